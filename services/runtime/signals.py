"""Stopping long-running services cleanly on Ctrl-C and SIGTERM, and always within a grace
period.

A service loop checks the stop flag between rounds, so it finishes its round (publish, flush,
commit) rather than dying in the middle of one. But a Python signal handler only runs when the
main thread is back in the interpreter, and a flush or a poll blocked inside librdkafka can
hold it there for tens of seconds: SIGTERM then looked ignored. So the C-level handler's
wake-up byte (``signal.set_wakeup_fd``) is read by a watcher thread, which sets the flag at
once and starts the grace timer; a process still running when the grace period ends logs why
and exits with ``EXIT_STOP_TIMEOUT``. ``FAIRSHARE_STOP_GRACE_S`` sets the period (``fairshare
up`` gives its children less than its own force-kill delay).
"""

from __future__ import annotations

import logging
import os
import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from services.runtime.service import (
    EXIT_STOP_TIMEOUT,
    exit_on_fatal_bus_error,
    service_name,
)

log = logging.getLogger("services.runtime")

STOP_GRACE_ENV = "FAIRSHARE_STOP_GRACE_S"
DEFAULT_STOP_GRACE_S = 30.0
_STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)
_WAKE = b"\0"  # not a signal number: tells the watcher to end


def stop_grace_s() -> float:
    try:
        return float(os.environ.get(STOP_GRACE_ENV, DEFAULT_STOP_GRACE_S))
    except ValueError:
        return DEFAULT_STOP_GRACE_S


class StopRequest:
    """The stop flag and the grace timer it starts; safe to call from any thread."""

    def __init__(self, grace_s: float, on_expiry: Callable[[], None] | None = None) -> None:
        self.grace_s = grace_s
        self._flag = threading.Event()
        self._lock = threading.Lock()
        self._timer: threading.Timer | None = None
        self._on_expiry = on_expiry or self._exit

    def __call__(self) -> bool:
        return self._flag.is_set()

    def request(self, signum: int) -> None:
        with self._lock:
            if self._flag.is_set():
                return
            self._flag.set()
            log.info("stop requested", extra={"signal": signal.Signals(signum).name})
            self._timer = threading.Timer(self.grace_s, self._on_expiry)
            self._timer.daemon = True
            self._timer.start()

    def cancel(self) -> None:
        with self._lock:
            if self._timer is not None:
                self._timer.cancel()

    def _exit(self) -> None:
        log.error(
            "service exiting",
            extra={
                "service": service_name(),
                "exit_code": EXIT_STOP_TIMEOUT,
                "reason": f"still running {self.grace_s:g} s after the stop request",
            },
        )
        os._exit(EXIT_STOP_TIMEOUT)


def _watch(read_fd: int, stop: StopRequest) -> None:
    """Read the wake-up bytes the C-level handler writes, even while the main thread is
    blocked in C; end on :data:`_WAKE` or when the pipe closes."""
    while True:
        try:
            data = os.read(read_fd, 64)
        except OSError:
            return
        for signum in data:
            if signum == 0:
                return
            if signum in _STOP_SIGNALS:
                stop.request(signum)
        if not data:
            return


@contextmanager
def stop_requested_on_signals(grace_s: float | None = None) -> Iterator[Callable[[], bool]]:
    """Ctrl-C / SIGTERM ask the service's loop to finish its round; the previous handlers come
    back afterwards. A fatal bus error inside the block exits the process (crash-only, see
    ``services.runtime.service``)."""
    stop = StopRequest(stop_grace_s() if grace_s is None else grace_s)

    def handle(signum: int, _frame: object) -> None:
        stop.request(signum)

    previous = {sig: signal.signal(sig, handle) for sig in _STOP_SIGNALS}
    read_fd, write_fd = os.pipe()
    os.set_blocking(write_fd, False)
    previous_fd = signal.set_wakeup_fd(write_fd, warn_on_full_buffer=False)
    watcher = threading.Thread(target=_watch, args=(read_fd, stop), daemon=True)
    watcher.start()
    try:
        with exit_on_fatal_bus_error():
            yield stop
    finally:
        stop.cancel()
        signal.set_wakeup_fd(previous_fd)
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        os.write(write_fd, _WAKE)
        watcher.join(timeout=1)
        os.close(write_fd)
        os.close(read_fd)
