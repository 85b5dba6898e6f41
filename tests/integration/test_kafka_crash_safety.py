"""No acknowledged write is lost when a broker is killed with -9.

noida-db lost 28 of 36 acknowledged submissions that way, so these tests kill real Apache
Kafka brokers, the ``fairshare up`` default and a replicated three-broker cluster, while the
project's own `KafkaEventPublisher` (idempotent, ``acks=all``) writes, then count what the
log holds by reading the topic back from the beginning. Each test starts its own brokers
(they kill them), so they do not use the session's broker fixture.
"""

from __future__ import annotations

import os
import signal
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient

from events import TopicKind, Topics
from events.envelope import new_event
from services.brokers import (
    KafkaCluster,
    KafkaUnavailableError,
    start_embedded_broker,
    start_kafka_cluster,
)
from services.brokers.security import admin_settings_file
from services.bus.admin import ensure_topics
from services.bus.connection import KAFKA_CONFIG_ENV, client_config
from services.bus.kafka import KafkaEventPublisher
from services.bus.port import PublishError
from tests.factories import submitted
from tests.real_kafka import no_kafka

pytestmark = [pytest.mark.broker]


def _submission(index: int) -> Any:
    data = submitted(f"crash-{index:06d}")
    return new_event(data, source="crash-test", time=datetime.now(UTC))


def _ids_in_log(bootstrap: str, topic: str, timeout_s: float = 60) -> set[str]:
    """Every event id (``ce_id`` header) in ``topic``, read from the start to the end
    offsets, as an auditor replaying the log would see it."""
    # this process's Kafka settings (the secured default's admin, where a test names it)
    admin = AdminClient(client_config(bootstrap))
    partitions = admin.list_topics(topic, timeout=timeout_s).topics[topic].partitions
    consumer = Consumer(
        client_config(bootstrap)
        | {
            "group.id": f"crash-reader-{uuid.uuid4().hex}",
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
        }
    )
    try:
        ends = {p: _end_offset(consumer, topic, p, timeout_s) for p in partitions}
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in partitions])
        ids: set[str] = set()
        done = {p for p, end in ends.items() if end == 0}
        deadline = time.monotonic() + timeout_s
        while len(done) < len(ends) and time.monotonic() < deadline:
            message = consumer.poll(1.0)
            if message is None or message.error() is not None:
                continue
            headers = dict(message.headers() or [])
            ids.add(headers["ce_id"].decode())
            if message.offset() + 1 >= ends[message.partition()]:
                done.add(message.partition())
        assert len(done) == len(ends), f"log not read to its end offsets {ends} in {timeout_s}s"
        return ids
    finally:
        consumer.close()


def _end_offset(consumer: Consumer, topic: str, partition: int, timeout_s: float) -> int:
    """The partition's high watermark, retried while leadership settles (a broker that just
    restarted answers Metadata a moment before it leads its partitions again)."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            return int(consumer.get_watermark_offsets(TopicPartition(topic, partition), 5)[1])
        except KafkaException:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)


@pytest.fixture
def topics(monkeypatch: pytest.MonkeyPatch) -> Topics:
    # these tests start plain brokers of their own: the session's identity (a secured session
    # broker's admin, --broker-security) is not theirs
    monkeypatch.delenv(KAFKA_CONFIG_ENV, raising=False)
    return Topics(prefix=f"crash{uuid.uuid4().hex[:8]}.")


@pytest.mark.slow  # kill -9 of the broker: with the chaos scenarios
def test_a_killed_single_broker_keeps_every_acknowledged_event(
    tmp_path: Path, topics: Topics, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The ``fairshare up`` default (secured; written and read as its admin): kill -9 right
    after a flushed batch, restart on the same data dir, and every acknowledged submission is
    there."""
    data_dir = tmp_path / "broker"
    try:
        broker, banner = start_embedded_broker(data_dir, "apache-kafka")
    except KafkaUnavailableError as error:
        no_kafka(error)
    assert banner == []
    assert broker.security_dir is not None
    monkeypatch.setenv(KAFKA_CONFIG_ENV, str(admin_settings_file(broker.security_dir)))
    try:
        ensure_topics(broker.bootstrap, topics)
        publisher = KafkaEventPublisher(broker.bootstrap, topics)
        acked: list[str] = []
        for batch in range(5):
            envelopes = [_submission(batch * 100 + i) for i in range(100)]
            for envelope in envelopes:
                publisher.publish(envelope)
            publisher.flush(30)  # raises unless every one was acknowledged
            acked += [envelope.id for envelope in envelopes]
        assert broker.pid is not None
        os.kill(broker.pid, signal.SIGKILL)
        _wait_for(lambda: broker.exited() is not None, 30, "the killed broker to exit")
    finally:
        broker.stop()
    publisher.close()

    again, _ = start_embedded_broker(data_dir)
    try:
        assert again.bootstrap == broker.bootstrap  # same ports, same log
        in_log = _ids_in_log(again.bootstrap, topics.name(TopicKind.WORKLOADS))
    finally:
        again.stop()
    lost = set(acked) - in_log
    assert not lost, f"{len(lost)} of {len(acked)} acknowledged submissions lost"


def _wait_for(condition: Callable[[], bool], timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


class _Stream:
    """Publishes submissions one flush at a time on a thread; an id counts as acknowledged
    only when its flush succeeded (the guarantee under test)."""

    def __init__(self, bootstrap: str, topics: Topics) -> None:
        self.publisher = KafkaEventPublisher(bootstrap, topics)
        self.acked: list[str] = []
        self.failures: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        index = 0
        while not self._stop.is_set():
            envelope = _submission(index)
            index += 1
            try:
                self.publisher.publish(envelope)
                self.publisher.flush(60)
            except PublishError as error:
                self.failures.append(str(error))
                continue
            self.acked.append(envelope.id)

    def __enter__(self) -> _Stream:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=120)
        self.publisher.close()


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[KafkaCluster]:
    try:
        started = start_kafka_cluster(tmp_path / "cluster", 3)
    except KafkaUnavailableError as error:
        no_kafka(error)
    try:
        yield started
    finally:
        started.stop()


def _partition(bootstrap: str, topic: str, timeout_s: float = 30) -> Any:
    """Partition 0's metadata once every broker knows it (just after creation, the broker
    asked may not list the partition or its leader yet)."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    deadline = time.monotonic() + timeout_s
    while True:
        metadata = admin.list_topics(topic, timeout=timeout_s)
        found = metadata.topics.get(topic)
        partition = None if found is None else found.partitions.get(0)
        if partition is not None and partition.leader >= 0 and len(partition.replicas) == 3:
            return partition
        if time.monotonic() > deadline:
            raise AssertionError(f"{topic} has no partition 0 with a leader and 3 replicas")
        time.sleep(0.2)


@pytest.mark.slow
def test_killing_the_leader_of_a_replicated_cluster_loses_no_acknowledged_event(
    cluster: KafkaCluster, topics: Topics
) -> None:
    """Three brokers, replication 3, min.insync.replicas 2: kill -9 the leader of the
    workloads partition mid-stream; the stream goes on and nothing acknowledged is lost."""
    ensure_topics(cluster.bootstrap, topics, partitions=1)
    workloads = topics.name(TopicKind.WORKLOADS)
    partition = _partition(cluster.bootstrap, workloads)
    assert sorted(partition.replicas) == [1, 2, 3]
    leader = partition.leader

    with _Stream(cluster.bootstrap, topics) as stream:
        _wait_for(lambda: len(stream.acked) >= 200, 120, "200 acknowledged submissions")
        cluster.node(leader).kill()
        at_kill = len(stream.acked)
        _wait_for(lambda: len(stream.acked) >= at_kill + 200, 180, "the stream to go on")
    assert _partition(cluster.bootstrap, workloads).leader != leader

    in_log = _ids_in_log(cluster.bootstrap, workloads)
    lost = set(stream.acked) - in_log
    print(
        f"acknowledged {len(stream.acked)} ({at_kill} before the kill), refused "
        f"{len(stream.failures)}, in the log {len(in_log)}, lost {len(lost)}"
    )
    assert not lost, f"{len(lost)} of {len(stream.acked)} acknowledged submissions lost"

    # The killed broker comes back, catches up, and the log still holds everything.
    cluster.restart(leader)
    _wait_for(
        lambda: len(_partition(cluster.bootstrap, workloads).isrs) == 3, 120, "a full ISR again"
    )
    assert set(stream.acked) <= _ids_in_log(cluster.bootstrap, workloads)
