"""Use a Kafka-protocol broker that someone else runs.

For CI services, a shared development cluster or a broker started by hand: Fairshare
only borrows it, so the handle's ``stop`` deliberately does nothing.
"""

from __future__ import annotations

import os

from .handle import BrokerHandle, BrokerStartError, wait_until_ready

__all__ = ["BOOTSTRAP_ENV", "external_broker"]

#: Environment variable naming the bootstrap servers of an external broker.
BOOTSTRAP_ENV = "FAIRSHARE_KAFKA_BOOTSTRAP"


def _no_op() -> None:
    """Stopping a borrowed broker is not ours to do."""


def external_broker(bootstrap: str | None = None, *, startup_timeout_s: float = 15) -> BrokerHandle:
    """A handle on the broker at ``bootstrap`` (default: ``$FAIRSHARE_KAFKA_BOOTSTRAP``).

    Readiness is checked up front, so a wrong address fails here with a clear
    message instead of as a hang in the first producer or consumer.
    """
    address = (bootstrap if bootstrap is not None else os.environ.get(BOOTSTRAP_ENV, "")).strip()
    if not address:
        raise BrokerStartError(
            f"no external broker given: pass a bootstrap address or set {BOOTSTRAP_ENV} "
            "(e.g. 127.0.0.1:9092)"
        )
    wait_until_ready(address, startup_timeout_s)
    return BrokerHandle(
        kind="external",
        bootstrap=address,
        description=f"external Kafka broker at {address} (not managed by Fairshare)",
        stop=_no_op,
    )
