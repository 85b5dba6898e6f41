"""A ``should_stop`` for services run in a test's own thread until a condition holds."""

from __future__ import annotations

import time
from collections.abc import Callable


def until(condition: Callable[[], bool], timeout_s: float = 60) -> Callable[[], bool]:
    """A should_stop: true once ``condition`` (asked at most every 0.5 s) or after the timeout."""
    deadline = time.monotonic() + timeout_s
    next_check = 0.0

    def stop() -> bool:
        nonlocal next_check
        if time.monotonic() > deadline:
            return True
        if time.monotonic() < next_check:
            return False
        next_check = time.monotonic() + 0.5
        return condition()

    return stop
