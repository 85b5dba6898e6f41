"""The Kafka a local ``fairshare up`` runs, found from its data dir: for the commands an
auditor or operator types next to it (``events export``, ``audit ... --kafka``), which
otherwise had to be told the port it chose and the audit principal's credentials, written
nowhere but in the data dir itself.

``fairshare up`` keeps its broker in ``<data dir>/broker``: one node's ports in ``ports.json``
there (three nodes: ``node-<id>/ports.json``), and, when secured (the default), every
principal's client settings in ``security/clients/<principal>.properties``. A data dir with
neither is no local Kafka, and the caller says what to pass instead.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from services.brokers.handle import read_ports
from services.brokers.security import SECURITY_DIR

#: Where ``fairshare up`` keeps its broker inside its data dir.
BROKER_SUBDIR = "broker"


@dataclass(frozen=True)
class LocalKafka:
    bootstrap: str
    #: The principal's librdkafka properties, for a secured Kafka (None: a plain one).
    client_config: Path | None
    broker_dir: Path


def local_kafka(data_dir: Path, principal: str = "audit") -> LocalKafka | None:
    """The Kafka ``fairshare up`` keeps in ``data_dir`` and how ``principal`` connects to it,
    or None if the data dir holds none. Whether it runs is for the caller's connection to
    find out (a stopped one refuses, with the usual message)."""
    broker_dir = data_dir / BROKER_SUBDIR
    ports = [read_ports(broker_dir).get("port")]
    if ports[0] is None:
        ports = [read_ports(node).get("port") for node in sorted(broker_dir.glob("node-*"))]
    found = [port for port in ports if port is not None]
    if not found:
        return None
    settings = broker_dir / SECURITY_DIR / "clients" / f"{principal}.properties"
    return LocalKafka(
        ",".join(f"127.0.0.1:{port}" for port in found),
        settings if settings.is_file() else None,
        broker_dir,
    )
