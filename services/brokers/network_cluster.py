"""The files of a secured Apache Kafka whose nodes reach each other by name on a network of
their own (the compose file's ``kafka-1..3``), made by Fairshare so that it is secured exactly
as the clusters ``fairshare up`` and ``broker run`` start on loopback: the same certificates,
the same listener settings (`BrokerSecurity.listener_settings`), the same ``server.properties``
(`render_server_properties`), the admin's SCRAM credential stored when the storage is
formatted. Only the addresses differ: each node listens on every interface of its container
and advertises its host name, which its certificate names.

In ``directory``: ``security/`` (as `services.brokers.security` describes it; the CA, the
nodes' key and certificate, the admin's password and client settings), ``node-<id>.
properties`` for each node, ``format-<id>.args`` (a Java @argfile that formats its storage with
the cluster's id and the admin's SCRAM credential: a password on a command line would show in
``ps``), ``cluster.id``, and ``security/admin-java.properties`` (the Java tools' settings, for
health checks).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from services.bus.connection import write_private, write_properties
from services.bus.principals import SCRAM_MECHANISM

from .apache_kafka import kept_cluster_id
from .kafka_config import render_server_properties
from .kafka_node import argfile_text
from .security import BrokerSecurity

__all__ = ["write_network_cluster"]


def write_network_cluster(
    directory: Path,
    hosts: Sequence[str],
    *,
    port: int = 9092,
    controller_port: int = 9093,
    log_dir: str = "/var/lib/kafka/data",
    libs: str = "/opt/kafka/libs",
) -> list[Path]:
    """Write (or, for the certificates and passwords, keep) the files of a cluster of
    ``hosts``; returns each node's ``server.properties``, node ids counting from 1."""
    if not hosts or len(set(hosts)) != len(hosts):
        raise ValueError(f"a cluster needs distinct host names, not {list(hosts)}")
    security = BrokerSecurity.in_directory(directory, hosts)
    voters = ",".join(f"{node}@{host}:{controller_port}" for node, host in enumerate(hosts, 1))
    cluster_id = kept_cluster_id(directory, [])
    written = []
    for node, host in enumerate(hosts, 1):
        text = render_server_properties(
            port=port,
            controller_port=controller_port,
            log_dir=log_dir,
            node_id=node,
            voters=voters,
            cluster_size=len(hosts),
            security=security.listener_settings(),
            host=host,
            bind="",
        )
        config = write_private(directory / f"node-{node}.properties", text)
        format_command = ["-cp", f"{libs}/*", "kafka.tools.StorageTool", "format"]
        format_command += ["-t", cluster_id, "-c", str(config), *security.format_arguments()]
        write_private(directory / f"format-{node}.args", argfile_text(format_command))
        written.append(config)
    write_properties(
        security.directory / "admin-java.properties",
        {
            "security.protocol": "SASL_SSL",
            "sasl.mechanism": SCRAM_MECHANISM,
            "sasl.jaas.config": security.admin_jaas,
            "ssl.truststore.type": "PEM",
            "ssl.truststore.location": str(security.ca_file),
        },
    )
    return written
