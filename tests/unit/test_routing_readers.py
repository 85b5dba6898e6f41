"""Every reader of the log treats a poison record alike: never handed out, never folded, never
exported, dead-lettered once by the consumers that own dead-lettering.

The Kafka readers run here on their real code over a stand-in for confluent-kafka's
``Consumer`` that serves an in-memory broker's records, so the group-less path (the
scheduler's, the API view's and the agents' :class:`LogFollower`), the export, the audit and
the charging host's reading of the ledger are all checked without a broker
(``tests/integration/test_poison_records.py`` does it again on Apache Kafka). Before, they only
checked that a record decoded: a valid submission produced with another key or onto another
topic was placed by the scheduler and exported beside the original, while every dead-lettering
consumer rejected it.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from confluent_kafka import TopicPartition
from fastapi.testclient import TestClient

from events import TopicKind, encode_binary, new_event
from events.models import (
    BudgetCreated,
    EventData,
    LedgerCharge,
    NodeRegistered,
    PlaceCommand,
    WorkloadSubmitted,
)
from events.ndjson import BadLine, read_events
from events.positions import Delivery
from services.api import create_app
from services.api.view import VIEW_KINDS, LiveView
from services.bus.export import export_events
from services.bus.follower import Follower, LogFollower
from services.bus.memory import InMemoryBroker, InMemoryPublisher, InMemorySubscriber
from services.bus.records import RawRecord, check
from services.scheduler.host import INPUTS, SchedulerConfig, SchedulerService
from tests.factories import T0, sample_events, submitted
from tests.unit.test_routing import IDS, POISON, TOPICS, VALID, Poison

BOOTSTRAP = "stand-in:9092"


class _Message:
    def __init__(self, record: RawRecord) -> None:
        self._record = record

    def error(self) -> None:
        return None

    def topic(self) -> str:
        return self._record.topic

    def partition(self) -> int:
        return self._record.partition

    def offset(self) -> int:
        return self._record.offset

    def key(self) -> bytes | None:
        return self._record.key

    def value(self) -> bytes | None:
        return self._record.value

    def headers(self) -> list[tuple[str, bytes | None]]:
        return list(self._record.headers)


class StandInConsumer:
    """What the bus's readers call of ``confluent_kafka.Consumer``, over an in-memory broker."""

    broker = InMemoryBroker()

    def __init__(self, config: dict[str, Any]) -> None:
        self._next: dict[tuple[str, int], int] = {}

    def list_topics(self, topic: str | None = None, timeout: float = -1) -> Any:
        topics = {
            name: SimpleNamespace(
                partitions={i: None for i in range(len(self.broker.partitions(name)))}, error=None
            )
            for name in TOPICS.all_names()
        }
        return SimpleNamespace(topics=topics)

    def get_watermark_offsets(
        self, partition: TopicPartition, timeout: float | None = None, cached: bool = False
    ) -> tuple[int, int]:
        return 0, len(self.broker.partitions(partition.topic)[partition.partition])

    def assign(self, partitions: list[TopicPartition]) -> None:
        for tp in partitions:
            self._next[(tp.topic, tp.partition)] = 0

    def consume(self, num_messages: int = 1, timeout: float = -1) -> list[_Message]:
        messages: list[_Message] = []
        for (topic, index), start in self._next.items():
            part = self.broker.partitions(topic)[index]
            taken = part[start : start + num_messages - len(messages)]
            messages += [_Message(record) for record in taken]
            self._next[(topic, index)] = start + len(taken)
        return messages

    def close(self) -> None:
        return None


@pytest.fixture
def broker(monkeypatch: pytest.MonkeyPatch) -> InMemoryBroker:
    broker = InMemoryBroker(partitions=3)
    monkeypatch.setattr(StandInConsumer, "broker", broker)
    monkeypatch.setattr("services.bus.follower.Consumer", StandInConsumer)
    monkeypatch.setattr("services.bus.export.Consumer", StandInConsumer)
    return broker


def _produce(broker: InMemoryBroker, *poison: Poison, valid: bool = True) -> None:
    publisher = InMemoryPublisher(broker, TOPICS)
    if valid:
        publisher.publish(VALID)
    for p in poison:
        publisher.publish_raw(TOPICS.name(p.kind), p.key, p.value, p.headers)


@pytest.mark.parametrize("poison", POISON, ids=IDS)
def test_the_kafka_follower_skips_and_counts_poison(broker: InMemoryBroker, poison: Poison) -> None:
    _produce(broker, poison)
    follower = LogFollower(BOOTSTRAP, list(TopicKind), TOPICS)
    assert [d.envelope for d in follower.catch_up()] == [VALID]
    assert follower.skipped == 1
    assert not broker.records(TOPICS.name(TopicKind.DEADLETTER)), "followers never dead-letter"


@pytest.mark.parametrize("poison", POISON, ids=IDS)
def test_the_in_memory_follower_behaves_as_the_kafka_one(
    broker: InMemoryBroker, poison: Poison
) -> None:
    """The adapter contract: the in-memory source skips, counts and writes nothing too (it
    used to dead-letter, so unit tests never saw what a follower on Kafka did)."""
    _produce(broker, poison)
    follower = Follower(InMemorySubscriber(broker, "view", list(TopicKind), TOPICS), TOPICS)
    assert [d.envelope for d in follower.catch_up()] == [VALID]
    assert follower.skipped == 1
    assert not broker.records(TOPICS.name(TopicKind.DEADLETTER))


@pytest.mark.parametrize("poison", POISON, ids=IDS)
def test_export_writes_each_event_once_and_skips_poison(
    broker: InMemoryBroker, poison: Poison, tmp_path: Path
) -> None:
    _produce(broker, poison)
    out = tmp_path / "log.ndjson"
    result = export_events(BOOTSTRAP, out, TOPICS)
    assert [e.id for e in read_events(out) if not isinstance(e, BadLine)] == [VALID.id]
    assert (result.events, result.skipped) == (1, 1)


@pytest.mark.parametrize("poison", POISON, ids=IDS)
def test_the_audit_reads_poison_as_bad_lines_not_facts(
    broker: InMemoryBroker, poison: Poison
) -> None:
    from services.audit.sources import log_from_kafka

    _produce(broker, poison)
    read = list(log_from_kafka(BOOTSTRAP, TOPICS))
    assert [e for e in read if not isinstance(e, BadLine)] == [VALID]
    [bad] = [e for e in read if isinstance(e, BadLine)]
    assert TOPICS.name(poison.kind) in bad.reason


def test_a_charge_under_another_key_is_not_a_recorded_charge(broker: InMemoryBroker) -> None:
    from services.charging.serve import charges_on_ledger

    charge = next(e for e in sample_events() if isinstance(e.data, LedgerCharge))
    encoded = encode_binary(charge)
    ledger = TOPICS.name(TopicKind.LEDGER)
    publisher = InMemoryPublisher(broker, TOPICS)
    publisher.publish_raw(ledger, encoded.key, encoded.value, encoded.headers)
    publisher.publish_raw(ledger, b"another", encoded.value, encoded.headers)
    publisher.publish_raw(TOPICS.name(TopicKind.USAGE), encoded.key, encoded.value, [])
    assert list(charges_on_ledger(BOOTSTRAP, TOPICS)) == [charge.data]


# -- the services' own reading paths ----------------------------------------------------------


def _at(seconds: float) -> datetime:
    return datetime.fromtimestamp(T0.timestamp() + seconds, UTC)


def _lab(broker: InMemoryBroker) -> list[WorkloadSubmitted]:
    """A budget and a node, a submission produced properly, and two valid submissions
    produced wrongly: one keyed by another workload, one onto the cluster topic."""
    publisher = InMemoryPublisher(broker, TOPICS)
    facts: list[EventData] = [
        BudgetCreated(budget="lab", created_by="admin"),
        BudgetCreated(budget="lab/a", created_by="admin"),
        NodeRegistered(node="n0", cluster="c", pool="p", gpus=8, gpu_type="x"),
    ]
    for i, data in enumerate(facts):
        publisher.publish(new_event(data, source="tests", time=_at(i)))
    good, wrong_key, wrong_topic = (
        submitted(name, budget="lab/a", pools=("p",), gpus=1, min_runtime_s=0)
        for name in ("good", "wrong-key", "wrong-topic")
    )
    publisher.publish(new_event(good, source="tests", time=_at(10)))
    encoded = encode_binary(new_event(wrong_key, source="tests", time=_at(11)))
    publisher.publish_raw(TOPICS.name(TopicKind.WORKLOADS), b"good", encoded.value, encoded.headers)
    encoded = encode_binary(new_event(wrong_topic, source="tests", time=_at(12)))
    publisher.publish_raw(
        TOPICS.name(TopicKind.CLUSTER), encoded.key, encoded.value, encoded.headers
    )
    return [good, wrong_key, wrong_topic]


def test_the_scheduler_places_only_what_every_consumer_accepts(broker: InMemoryBroker) -> None:
    _lab(broker)
    service = SchedulerService(
        lambda: LogFollower(BOOTSTRAP, INPUTS, TOPICS),
        InMemoryPublisher(broker, TOPICS),
        config=SchedulerConfig(poll_s=0),
        clock=lambda: T0.timestamp() + 60,
    )
    for _ in range(3):
        service.step()
    commands = [check(r, TOPICS) for r in broker.records(TOPICS.name(TopicKind.COMMANDS))]
    placed = [
        d.envelope.data
        for d in commands
        if isinstance(d, Delivery) and isinstance(d.envelope.data, PlaceCommand)
    ]
    assert [c.workload_id for c in placed] == ["good"]
    assert set(service.state.cluster.workloads) == {"good"}
    service.close()


def test_the_api_view_and_the_agents_fold_only_what_every_consumer_accepts(
    broker: InMemoryBroker,
) -> None:
    from services.agents.serve import read_history

    _lab(broker)
    view = LiveView(LogFollower(BOOTSTRAP, VIEW_KINDS, TOPICS), topics=TOPICS)
    with view.read() as state:
        assert set(state.cluster.workloads) == {"good"}
    assert view.skipped == 2
    with TestClient(create_app(view, InMemoryPublisher(broker, TOPICS), {})) as client:
        health = client.get("/health").json()
    assert health["skipped"] == 2  # operators see what the view left out
    history = read_history(BOOTSTRAP, TOPICS)
    submissions = [e.data.workload_id for e in history if isinstance(e.data, WorkloadSubmitted)]
    assert submissions == ["good"]
