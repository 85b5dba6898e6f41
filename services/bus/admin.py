"""Creating Fairshare's topics on a broker, idempotently.

Event topics keep records forever (``retention.ms=-1``): they are the system of record and the
audit replays them from the beginning. The one exception is the liveness topic (the agents'
10-s ``node.alive`` signals, :data:`events.topics.TRANSIENT_KINDS`): nothing a charge or an
audited decision depends on reads it, so it keeps records for ``FAIRSHARE_LIVENESS_RETENTION_S``
(two days by default; docs/operations.md says why) in segments of at most an hour, so that
what has expired is deleted within the hour. On a cluster of three or more brokers every topic
is replicated three times with ``min.insync.replicas=2``, so an ``acks=all`` write is on two
brokers before it is acknowledged and the loss of any one broker loses nothing.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient
from confluent_kafka.cimpl import NewTopic

from events.topics import TRANSIENT_KINDS, TopicKind, Topics
from services.bus.connection import client_config

if TYPE_CHECKING:
    from confluent_kafka.admin._metadata import ClusterMetadata

log = logging.getLogger(__name__)

DEFAULT_PARTITIONS = 3
KEEP_FOREVER = {"retention.ms": "-1", "retention.bytes": "-1"}
#: How long the liveness topic keeps its records unless the setting says otherwise: longer
#: than any reader is expected to stay down or between checkpoints (a weekend's outage of a
#: scheduler aside), so a restarted reader still finds every node's last signal.
DEFAULT_LIVENESS_RETENTION_S = 2 * 86_400
LIVENESS_RETENTION_ENV = "FAIRSHARE_LIVENESS_RETENTION_S"
#: Segments of the liveness topic roll at least this often (retention deletes whole segments).
_LIVENESS_SEGMENT_S = 3600
#: Copies of each record, and how many must have it before ``acks=all`` is answered, once
#: the cluster has this many brokers.
REPLICATED = 3
REPLICATED_MIN_INSYNC = 2


class TopicSetupError(RuntimeError):
    pass


def replication_for_cluster(
    brokers: int, replication_factor: int | None = None
) -> tuple[int, dict[str, str]]:
    """(replication factor, topic config) for a cluster whose metadata lists ``brokers``.

    Three copies with two in sync from three brokers up; below that, one copy per broker
    (at most). Counting from metadata rather than trusting a setting means a development
    broker and a production cluster need no different configuration. An explicit
    ``replication_factor`` wins (it still gets ``min.insync.replicas=2`` when it is 3+).
    """
    replication = replication_factor or max(1, min(REPLICATED, brokers))
    if replication >= REPLICATED:
        return replication, {"min.insync.replicas": str(REPLICATED_MIN_INSYNC)}
    return replication, {}


def brokers_to_count(admin: AdminClient, cluster: ClusterMetadata, timeout_s: float) -> int:
    """How many brokers to count for a topic's replication: those ``cluster`` (the caller's
    fresh metadata) lists, or, where more, the replication the brokers are configured with
    (``default.replication.factor``, which the clusters Fairshare starts set from their size),
    waiting up to ``timeout_s`` for that many to be up. Counting only the brokers up at that
    moment gave a topic created while a three-node cluster was still forming one or two copies
    for good (the partition tests saw a leader cut from its quorum keep acknowledging writes
    alone). A broker that does not answer for its configuration (a development broker) is
    counted as before."""
    configured = _configured_replication(admin, cluster.brokers, timeout_s)
    wanted = min(configured, REPLICATED)
    deadline = time.monotonic() + timeout_s
    while len(cluster.brokers) < wanted and time.monotonic() < deadline:
        time.sleep(0.5)
        cluster = admin.list_topics(timeout=timeout_s)
    if len(cluster.brokers) < wanted:
        raise TopicSetupError(
            f"only {len(cluster.brokers)} broker(s) up after {timeout_s:g}s; the cluster is "
            f"configured for {configured} copies of each topic (default.replication.factor)"
        )
    return max(len(cluster.brokers), wanted)


def _configured_replication(
    admin: AdminClient, brokers: Mapping[int, object], timeout_s: float
) -> int:
    """The brokers' ``default.replication.factor`` (0 when none answers for it)."""
    from confluent_kafka.admin._config import ConfigResource
    from confluent_kafka.admin._resource import ResourceType

    for broker in sorted(brokers):
        resource = ConfigResource(ResourceType.BROKER, str(broker))
        try:
            entries = admin.describe_configs([resource])[resource].result(timeout=timeout_s)
            return int(entries["default.replication.factor"].value)
        except Exception:
            continue
    return 0


def liveness_retention_s() -> float:
    """The liveness topic's retention: ``FAIRSHARE_LIVENESS_RETENTION_S`` or two days."""
    text = os.environ.get(LIVENESS_RETENTION_ENV, "").strip()
    if not text:
        return DEFAULT_LIVENESS_RETENTION_S
    try:
        seconds = float(text)
    except ValueError:
        raise TopicSetupError(
            f"{LIVENESS_RETENTION_ENV}: not a number of seconds: {text!r}"
        ) from None
    if seconds < 60:
        raise TopicSetupError(f"{LIVENESS_RETENTION_ENV}: at least 60 seconds, not {text!r}")
    return seconds


def retention_config(kind: TopicKind, liveness_retention_s: float) -> dict[str, str]:
    """What a topic of ``kind`` keeps: everything forever, or (the transient liveness topic)
    ``liveness_retention_s`` of records, deleted a segment (at most an hour) at a time."""
    if kind not in TRANSIENT_KINDS:
        return KEEP_FOREVER
    retention_ms = int(liveness_retention_s * 1000)
    return {
        "cleanup.policy": "delete",
        "retention.ms": str(retention_ms),
        "retention.bytes": "-1",
        "segment.ms": str(min(retention_ms, _LIVENESS_SEGMENT_S * 1000)),
    }


def ensure_topics(
    bootstrap: str,
    topics: Topics | None = None,
    *,
    partitions: int | Mapping[TopicKind, int] = DEFAULT_PARTITIONS,
    replication_factor: int | None = None,
    config: Mapping[str, str] | None = None,
    liveness_retention: float | None = None,
    timeout_s: float = 30.0,
    identity: Mapping[str, str] | None = None,
) -> dict[str, int]:
    """Create any missing topic; return ``name -> partition count`` for all of them.

    Without ``replication_factor`` it follows the cluster (see `replication_for_cluster`).
    ``liveness_retention`` (seconds) defaults to :func:`liveness_retention_s`; it applies
    when the topic is created (an existing one is changed with ``kafka-configs``: see
    docs/operations.md). An existing topic with a different partition count is reported, not
    altered: repartitioning would move keys to other partitions and break per-subject order.
    ``identity``: whose settings create them (default: this process's; on a secured Kafka only
    the admin principal may create topics, and a service's principal finds them all there).
    """
    topics = topics or Topics()
    wanted: dict[str, int] = {}
    for kind in TopicKind:
        count = (
            partitions if isinstance(partitions, int) else partitions.get(kind, DEFAULT_PARTITIONS)
        )
        if count < 1:
            raise ValueError(f"partitions for {kind.value} must be >= 1")
        wanted[topics.name(kind)] = count
    admin = AdminClient(client_config(bootstrap, identity=identity))
    cluster = admin.list_topics(timeout=timeout_s)
    existing = cluster.topics
    brokers = len(cluster.brokers)
    if replication_factor is None and any(name not in existing for name in wanted):
        brokers = brokers_to_count(admin, cluster, timeout_s)
    replication, replication_config = replication_for_cluster(brokers, replication_factor)
    retention_s = liveness_retention if liveness_retention is not None else liveness_retention_s()
    missing = [
        NewTopic(
            topics.name(kind),
            num_partitions=wanted[topics.name(kind)],
            replication_factor=replication,
            config={
                **retention_config(kind, retention_s),
                **replication_config,
                **(config or {}),
            },
        )
        for kind in TopicKind
        if topics.name(kind) not in existing
    ]
    if missing:
        for name, future in admin.create_topics(missing, request_timeout=timeout_s).items():
            try:
                future.result()
            except KafkaException as error:
                if error.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                    raise TopicSetupError(f"cannot create topic {name}: {error}") from error
    deadline = time.monotonic() + timeout_s
    while True:
        metadata = admin.list_topics(timeout=timeout_s).topics
        actual = {
            name: len(metadata[name].partitions)
            for name in wanted
            if name in metadata and metadata[name].error is None and metadata[name].partitions
        }
        if len(actual) == len(wanted):
            break
        if time.monotonic() > deadline:
            absent = sorted(set(wanted) - set(actual))
            raise TopicSetupError(f"topics not visible after {timeout_s}s: {absent}")
        time.sleep(0.2)
    mismatched = {n: (actual[n], c) for n, c in wanted.items() if actual[n] != c}
    if mismatched:
        details = ", ".join(
            f"{n} has {a} partitions, wanted {w}" for n, (a, w) in mismatched.items()
        )
        raise TopicSetupError(f"existing topics differ: {details}")
    return actual


def ensure_compacted_topic(
    bootstrap: str, topic: str, timeout_s: float, identity: Mapping[str, str] | None = None
) -> None:
    """One partition, compacted by key, replicated like every other topic (the lease, the
    checkpoints); a broker that refuses the configuration gets a plain topic. ``identity`` as
    for :func:`ensure_topics`."""
    admin = AdminClient(client_config(bootstrap, identity=identity))
    cluster = admin.list_topics(timeout=timeout_s)
    if topic in cluster.topics:
        return
    # Replicated like every other topic: losing one broker of three must not take the lease.
    replication, durability = replication_for_cluster(brokers_to_count(admin, cluster, timeout_s))
    compacted = {"cleanup.policy": "compact", "segment.ms": str(3600 * 1000)}
    for config in ({**compacted, **durability}, durability):
        new = NewTopic(topic, num_partitions=1, replication_factor=replication, config=config)
        try:
            admin.create_topics([new])[topic].result(timeout=timeout_s)
            return
        except KafkaException as error:
            code = error.args[0].code()
            if code == KafkaError.TOPIC_ALREADY_EXISTS:
                return
            if config == durability:
                raise
            log.warning("topic not created compacted", extra={"reason": str(error)})
