"""The files an Apache Kafka node (KRaft, combined broker and controller) is started with.

Pure text rendering, kept apart from the processes so unit tests can pin exactly what a node
runs with: one node for ``fairshare up`` and the test session, three for a replicated
deployment where an acknowledged write must survive the loss of any one broker.
"""

from __future__ import annotations

import base64
import os
from collections.abc import Mapping, Sequence

__all__ = [
    "new_cluster_id",
    "render_log4j2_properties",
    "render_server_properties",
    "replication_for",
    "voters_string",
]


def new_cluster_id() -> str:
    """A fresh KRaft cluster id, in the same form as Kafka's ``Uuid.randomUuid()``.

    That is 16 random bytes, URL-safe base64 without padding (22 characters).
    Like Kafka, ids starting with '-' are rejected: the command line would read them
    as an option.
    """
    while True:
        raw = base64.urlsafe_b64encode(os.urandom(16)).decode("ascii").rstrip("=")
        if not raw.startswith("-"):
            return raw


def replication_for(brokers: int) -> tuple[int, int]:
    """(replication factor, min.insync.replicas) for a cluster of ``brokers``.

    Three copies with two in sync once there are three brokers: an ``acks=all`` write is then
    on two machines before it is acknowledged, and one broker can die without stopping
    writes. Fewer brokers cannot hold three copies, so they get what they can.
    """
    replication = max(1, min(3, brokers))
    return replication, 2 if replication >= 3 else 1


def voters_string(controller_ports: Sequence[int]) -> str:
    """``controller.quorum.voters`` for nodes 1..N on loopback: ``1@127.0.0.1:P1,...``."""
    return ",".join(f"{i}@127.0.0.1:{port}" for i, port in enumerate(controller_ports, start=1))


def render_server_properties(
    *,
    port: int,
    controller_port: int,
    log_dir: os.PathLike[str] | str,
    node_id: int = 1,
    voters: str | None = None,
    cluster_size: int = 1,
    security: Mapping[str, str] | None = None,
    host: str = "127.0.0.1",
    bind: str | None = None,
) -> str:
    """``server.properties`` for one combined broker+controller node of a loopback cluster
    (or, with ``host``, of one whose nodes reach each other by name; ``bind`` is the address
    its listeners bind, "" for every interface; default ``host``).

    Internal topics (consumer offsets, transactions, share state) and topics created without
    an explicit factor are replicated as `replication_for` says; on one node that is 1,
    without which they could never be created. ``unclean.leader.election.enable=false`` is
    Kafka's default, written out because the guarantee depends on it: an out-of-sync replica
    never becomes leader and so never truncates acknowledged records away.
    ``group.initial.rebalance.delay.ms=0`` makes consumer groups start at once.

    With ``security`` (`services.brokers.security.BrokerSecurity.listener_settings`), the
    client and inter-broker listener speaks SASL_SSL and the controller listener TLS, with
    those settings added: no listener is left that speaks plain text.
    """
    replication, min_isr = replication_for(cluster_size)
    address = host if bind is None else bind
    listener = "SASL_SSL" if security else "PLAINTEXT"
    controller = "SSL" if security else "PLAINTEXT"
    settings = {
        "process.roles": "broker,controller",
        "node.id": str(node_id),
        "controller.quorum.voters": voters or f"{node_id}@{host}:{controller_port}",
        "listeners": f"{listener}://{address}:{port},CONTROLLER://{address}:{controller_port}",
        "advertised.listeners": f"{listener}://{host}:{port}",
        "inter.broker.listener.name": listener,
        "controller.listener.names": "CONTROLLER",
        "listener.security.protocol.map": f"{listener}:{listener},CONTROLLER:{controller}",
        "log.dirs": str(log_dir),
        "num.partitions": "1",
        "default.replication.factor": str(replication),
        "min.insync.replicas": str(min_isr),
        "unclean.leader.election.enable": "false",
        "offsets.topic.replication.factor": str(replication),
        "transaction.state.log.replication.factor": str(replication),
        "transaction.state.log.min.isr": str(min_isr),
        "share.coordinator.state.topic.replication.factor": str(replication),
        "share.coordinator.state.topic.min.isr": str(min_isr),
        "group.initial.rebalance.delay.ms": "0",
        **(security or {}),
    }
    lines = ["# Written by services/brokers/apache_kafka.py; rewritten on every start."]
    lines += [f"{key}={_escape_property(value)}" for key, value in settings.items()]
    return "\n".join(lines) + "\n"


def _escape_property(value: str) -> str:
    r"""Escape a value for a Java ``.properties`` file (``\`` is special there)."""
    return value.replace("\\", "\\\\")


def render_log4j2_properties() -> str:
    """A log4j2 config that prints only warnings and errors to the console.

    The broker's INFO output is hundreds of lines per start; broker.log stays
    small enough that its tail in an error message shows the actual failure.
    """
    return (
        "status = warn\n"
        "appender.console.type = Console\n"
        "appender.console.name = STDOUT\n"
        "appender.console.layout.type = PatternLayout\n"
        "appender.console.layout.pattern = [%d] %p %m (%c)%n\n"
        "rootLogger.level = warn\n"
        "rootLogger.appenderRef.stdout.ref = STDOUT\n"
    )
