"""Keep a broker this process started running: when it dies, start it again on the same data
and ports.

Every service recovers from a broker outage by itself (its Kafka client reconnects, or the
supervisor restarts it), but only if the broker comes back; a supervisor that restarts
everything except the one process everything needs is not one. ``fairshare up`` and
``fairshare broker run`` both poll a `BrokerWatch` from their main loop (the thread that
starts a JVM is the one its parent-death signal is tied to, see `kafka_node`).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from .handle import BrokerHandle, BrokerStartError

__all__ = ["BrokerGaveUpError", "BrokerWatch"]

#: Failed restarts in a row after which the watcher stops trying: a broker that cannot start
#: on its own data (disk full, a corrupt log, a port taken by someone else) needs a person,
#: and the process that owns it should exit non-zero rather than linger without a log.
MAX_FAILED_REVIVALS = 5


class BrokerGaveUpError(RuntimeError):
    """The broker died and could not be started again."""


@dataclass
class BrokerWatch:
    """The broker's deaths and restarts, for a supervisor's status line."""

    handle: BrokerHandle
    restarts: int = 0
    #: How the broker last died (the first line of its exit reason).
    last_exit: str | None = None
    failures: int = 0
    retry_at: float | None = None

    @property
    def supervised(self) -> bool:
        return self.handle.revive is not None

    def check(self, report: Callable[[str], None], now: float | None = None) -> bool:
        """One look: if the broker died, start it again (blocking until it serves). True when
        it was brought back by this call; `BrokerGaveUpError` after too many failures."""
        revive = self.handle.revive
        now = time.monotonic() if now is None else now
        if revive is None or (self.retry_at is not None and now < self.retry_at):
            return False
        why = self.handle.exited()
        if why is None:
            return False
        self.last_exit = why.strip().splitlines()[0] if why.strip() else "exited"
        report(f"broker died ({self.last_exit}); starting it again on the same data and ports")
        started = time.monotonic()
        try:
            what = revive()
        except BrokerStartError as error:
            self.failures += 1
            if self.failures >= MAX_FAILED_REVIVALS:
                raise BrokerGaveUpError(
                    f"the broker died and did not start again {self.failures} times: {error}"
                ) from error
            delay = min(30.0, 2.0**self.failures)
            self.retry_at = time.monotonic() + delay
            first = str(error).strip().splitlines()[0] if str(error).strip() else "failed"
            report(f"broker did not start again ({first}); trying again in {delay:g} s")
            return False
        self.failures = 0
        self.retry_at = None
        self.restarts += 1
        report(f"{what} in {time.monotonic() - started:.1f} s (restart {self.restarts})")
        return True

    def status(self) -> str:
        """``broker up`` or ``broker restarted 2x (last: ...)``, for the status line."""
        if not self.supervised:
            return "broker not supervised here"
        if self.restarts:
            return f"broker restarted {self.restarts}x (last: {self.last_exit})"
        return "broker up"
