"""How a service process ends when it cannot go on: crash-only.

A service whose Kafka client is fatally broken, or that met an error nobody planned for, must
not linger half-alive (the zombies of the broker-outage issue published nothing, ignored SIGTERM
and looked healthy). It exits at once with a distinctive code and one structured log line that
says why; its supervisor (``fairshare up``, systemd, Kubernetes) restarts it, and the restarted
process rebuilds its state from the log. Nothing here retries: that is the supervisor's job.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TypeVar

log = logging.getLogger("services.runtime")

T = TypeVar("T")

#: A fatal bus error or an unexpected exception (EX_SOFTWARE of sysexits.h).
EXIT_CRASH = 70
#: Asked to stop, but still running when the grace period ran out (see ``signals``).
EXIT_STOP_TIMEOUT = 71


def service_name(argv: list[str] | None = None) -> str:
    """``fairshare agent simulated`` -> ``agent simulated``: the command, without options."""
    words = []
    for word in (sys.argv if argv is None else argv)[1:3]:
        if word.startswith("-"):
            break
        words.append(word)
    return " ".join(words) or "fairshare"


def is_fatal_bus_error(error: BaseException) -> bool:
    """Whether ``error`` is the bus saying its client is dead (imported lazily: the bus pulls
    in librdkafka, which commands that never touch Kafka need not load)."""
    from services.bus.kafka import FatalBusError

    return isinstance(error, FatalBusError)


def exit_now(code: int, reason: str, error: BaseException | None = None) -> SystemExit:
    """Log the one line that says why (with the traceback of an unexpected ``error``; a fatal
    bus error's reason is the whole story), and return the SystemExit to raise."""
    unexpected = error is not None and not is_fatal_bus_error(error)
    log.error(
        "service exiting",
        extra={"service": service_name(), "exit_code": code, "reason": reason},
        exc_info=error if unexpected else None,
    )
    return SystemExit(code)


@contextmanager
def exit_on_fatal_bus_error() -> Iterator[None]:
    """A fatal bus error inside the block ends the process with :data:`EXIT_CRASH`; every
    other exception passes through unchanged (callers such as ``fairshare up`` report their
    own failures)."""
    try:
        yield
    except Exception as error:
        if not is_fatal_bus_error(error):
            raise
        raise exit_now(EXIT_CRASH, f"fatal bus error: {error}", error) from error


def run_service(main: Callable[[], T]) -> T:
    """Run a service's main function, crash-only: a fatal bus error or any unexpected exception
    exits with :data:`EXIT_CRASH` and one structured line (the traceback in it for the
    unexpected ones); ``SystemExit`` and ``KeyboardInterrupt`` pass as they are."""
    try:
        return main()
    except Exception as error:
        if is_fatal_bus_error(error):
            raise exit_now(EXIT_CRASH, f"fatal bus error: {error}", error) from error
        raise exit_now(EXIT_CRASH, f"unexpected {type(error).__name__}: {error}", error) from error
