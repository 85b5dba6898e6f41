"""Stopping long-running services cleanly on Ctrl-C and SIGTERM."""

from __future__ import annotations

import signal
from collections.abc import Callable, Iterator
from contextlib import contextmanager


@contextmanager
def stop_requested_on_signals() -> Iterator[Callable[[], bool]]:
    """Ctrl-C / SIGTERM ask the service's loop to finish its round (publish, flush, commit)
    rather than dying in the middle of one; the previous handlers come back afterwards."""
    requested = False

    def handle(_signum: int, _frame: object) -> None:
        nonlocal requested
        requested = True

    previous = {sig: signal.signal(sig, handle) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield lambda: requested
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
