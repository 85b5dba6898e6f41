"""Waiting in a test for something to happen: poll its condition until a deadline.

A fixed sleep is both too long (on a fast machine every run pays it) and too short (on a loaded
one the thing has not happened yet, and the test fails for no fault of the code). Polling ends
as soon as the condition holds, and the deadline only bounds how long a broken run takes to
fail, so it can be generous."""

from __future__ import annotations

import time
from collections.abc import Callable


def wait_until(
    condition: Callable[[], object], what: str, timeout_s: float = 10.0, *, every_s: float = 0.02
) -> None:
    """Return once ``condition()`` is truthy; fail naming ``what`` after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"timed out after {timeout_s:g} s waiting for {what}"
        time.sleep(every_s)
