"""Pick a broker launcher by name.

One string (from a CLI flag, an environment variable or a pytest option) chooses
the broker for a whole session, so every entry point dispatches the same way and
reports the same list of valid kinds.
"""

from __future__ import annotations

from pathlib import Path

from .apache_kafka import start_apache_kafka
from .containers import start_testcontainers_kafka
from .external import external_broker
from .handle import BrokerHandle, BrokerStartError
from .noida import start_noida

__all__ = ["BROKER_KINDS", "start_broker"]

#: Every kind `start_broker` accepts, in order of preference for tests.
BROKER_KINDS = ("apache-kafka", "noida", "external", "testcontainers")


def start_broker(kind: str, data_dir: Path) -> BrokerHandle:
    """Start (or, for "external", borrow) a broker of ``kind``.

    ``data_dir`` is where a local broker keeps its state; "external" and
    "testcontainers" ignore it, since their data lives elsewhere. Underscores and
    case are forgiven ("apache_kafka"), since the name often comes from env vars.
    """
    normalized = kind.strip().lower().replace("_", "-")
    if normalized == "apache-kafka":
        return start_apache_kafka(data_dir)
    if normalized == "noida":
        return start_noida(data_dir)
    if normalized == "external":
        return external_broker()
    if normalized == "testcontainers":
        return start_testcontainers_kafka()
    raise BrokerStartError(
        f"unknown broker kind {kind!r}; expected one of: {', '.join(BROKER_KINDS)}"
    )
