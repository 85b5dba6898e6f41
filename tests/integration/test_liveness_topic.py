"""The liveness topic on a real broker (issue 23): created with its time-based retention while
every other topic keeps its records forever, and read from its first offset still there by a
follower whose position retention removed."""

from __future__ import annotations

import uuid

import pytest
from confluent_kafka import TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource, ResourceType

from events import TopicKind, Topics, new_event
from events.models import GpuReading, NodeAlive
from services.brokers import BrokerHandle
from services.bus.admin import LIVENESS_RETENTION_ENV, ensure_topics
from services.bus.connection import client_config
from services.bus.follower import LogFollower
from services.bus.kafka import KafkaEventPublisher
from tests.factories import T0

pytestmark = [pytest.mark.broker]


def _configs(bootstrap: str, topic: str) -> dict[str, str]:
    admin = AdminClient(client_config(bootstrap))
    resource = ConfigResource(ResourceType.TOPIC, topic)
    entries = admin.describe_configs([resource])[resource].result(timeout=30)
    return {name: entry.value for name, entry in entries.items()}


def test_the_liveness_topic_is_created_with_its_retention_and_the_others_keep_forever(
    broker: BrokerHandle, monkeypatch: pytest.MonkeyPatch
) -> None:
    topics = Topics(prefix=f"t{uuid.uuid4().hex[:10]}.")
    ensure_topics(broker.bootstrap, topics, liveness_retention=7200)
    liveness = _configs(broker.bootstrap, topics.name(TopicKind.LIVENESS))
    assert liveness["retention.ms"] == str(7200 * 1000)
    assert liveness["segment.ms"] == str(3600 * 1000), "deleted within the hour once expired"
    assert liveness["cleanup.policy"] == "delete"
    for kind in (TopicKind.HEARTBEATS, TopicKind.WORKLOADS, TopicKind.LEDGER):
        assert _configs(broker.bootstrap, topics.name(kind))["retention.ms"] == "-1"
    assert topics.name(TopicKind.LIVENESS) not in topics.durable_names()

    # The setting's default comes from the environment (`fairshare up` and every service).
    monkeypatch.setenv(LIVENESS_RETENTION_ENV, "172800")
    other = Topics(prefix=f"t{uuid.uuid4().hex[:10]}.")
    ensure_topics(broker.bootstrap, other)
    assert _configs(broker.bootstrap, other.name(TopicKind.LIVENESS))["retention.ms"] == str(
        172_800_000
    )


def test_a_follower_whose_position_retention_removed_reads_from_the_first_offset_left(
    broker: BrokerHandle,
) -> None:
    topics = Topics(prefix=f"t{uuid.uuid4().hex[:10]}.")
    ensure_topics(broker.bootstrap, topics, partitions=1)
    name = topics.name(TopicKind.LIVENESS)
    publisher = KafkaEventPublisher(broker.bootstrap, topics)
    reading = GpuReading(index=0, utilisation_pct=0.0, memory_used_bytes=0)
    for i in range(6):
        alive = NodeAlive(node="n0", cluster="c", sequence=i, gpus=(reading,))
        publisher.publish(new_event(alive, source="tests", time=T0))
    publisher.flush()
    publisher.close()
    admin = AdminClient(client_config(broker.bootstrap))
    # what time-based retention does to old segments, done at once
    for future in admin.delete_records([TopicPartition(name, 0, 4)]).values():
        future.result(timeout=30)

    follower = LogFollower(broker.bootstrap, [TopicKind.LIVENESS], topics, start={(name, 0): 1})
    try:
        read = follower.catch_up(stall_timeout_s=20)
    finally:
        follower.close()
    assert [d.envelope.data.sequence for d in read] == [4, 5]
    assert follower.positions[(name, 0)] == 6

    for future in admin.delete_records([TopicPartition(name, 0, 6)]).values():
        future.result(timeout=30)
    emptied = LogFollower(broker.bootstrap, [TopicKind.LIVENESS], topics, start={(name, 0): 2})
    try:
        assert emptied.catch_up(stall_timeout_s=20) == [], "an emptied partition blocks nothing"
    finally:
        emptied.close()
