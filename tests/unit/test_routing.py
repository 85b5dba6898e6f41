"""The one record check (``services.bus.records.check``) and the dead letters it leads to.

Poison records of every kind are rejected with a reason naming what is wrong; a consumer
dead-letters each once under its stable name, however often it restarts and under whatever
consumer group, with an id derived from that name and the source position only.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import orjson
import pytest

from events import TopicKind, Topics, encode_binary, new_event
from events.models import DeadLetter
from events.positions import Delivery
from services.bus.deadletters import DeadLetters
from services.bus.memory import InMemoryBroker, InMemoryPublisher, InMemorySubscriber
from services.bus.port import PublishError
from services.bus.records import RawRecord, Rejected, check, dead_letter_id, route
from tests.factories import T0, submitted

TOPICS = Topics(prefix="route.")
WORKLOADS = TOPICS.name(TopicKind.WORKLOADS)
VALID = new_event(submitted("w1"), source="tests", time=T0)
ENCODED = encode_binary(VALID)


def _headers(**replace: bytes) -> list[tuple[str, bytes]]:
    return [(name, replace.get(name, value)) for name, value in ENCODED.headers]


@dataclass(frozen=True)
class Poison:
    name: str
    kind: TopicKind
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes]]
    reason: str


#: A record of each way to be no valid event where it lies.
POISON = [
    Poison("wrong key", TopicKind.WORKLOADS, b"w2", ENCODED.value, _headers(), "key: b'w2'"),
    Poison("no key", TopicKind.WORKLOADS, None, ENCODED.value, _headers(), "key: None"),
    Poison(
        "wrong topic",
        TopicKind.CLUSTER,
        ENCODED.key,
        ENCODED.value,
        _headers(),
        "type: fairshare.workload.submitted.v1 belongs on topic 'route.workloads'",
    ),
    Poison(
        "undecodable", TopicKind.WORKLOADS, b"w1", b"\x00\x01 not an event", [], "ce_specversion"
    ),
    Poison(
        "unknown type",
        TopicKind.WORKLOADS,
        ENCODED.key,
        ENCODED.value,
        _headers(ce_type=b"fairshare.workload.exploded.v1"),
        "type: unknown event type",
    ),
    Poison(
        "bad schema",
        TopicKind.WORKLOADS,
        ENCODED.key,
        ENCODED.value.replace(b'"gpus":1', b'"gpus":-1'),
        _headers(),
        "data.gpus:",
    ),
    Poison(
        "not JSON",
        TopicKind.WORKLOADS,
        ENCODED.key,
        b"{not json",
        _headers(),
        "data: not valid JSON",
    ),
    Poison("tombstone", TopicKind.WORKLOADS, ENCODED.key, None, _headers(), "value: empty"),
]
IDS = [p.name for p in POISON]


def _record(poison: Poison, offset: int = 0) -> RawRecord:
    return RawRecord(
        TOPICS.name(poison.kind), 0, offset, poison.key, poison.value, list(poison.headers)
    )


def test_a_valid_record_is_delivered_with_its_position() -> None:
    record = RawRecord(WORKLOADS, 1, 7, ENCODED.key, ENCODED.value, ENCODED.headers)
    checked = check(record, TOPICS)
    assert isinstance(checked, Delivery)
    assert checked.envelope == VALID
    assert (checked.position.topic, checked.position.partition, checked.position.offset) == (
        WORKLOADS,
        1,
        7,
    )


@pytest.mark.parametrize("poison", POISON, ids=IDS)
def test_every_kind_of_poison_is_rejected_with_its_reason(poison: Poison) -> None:
    checked = check(_record(poison), TOPICS)
    assert isinstance(checked, Rejected)
    assert poison.reason in checked.reason


@pytest.mark.parametrize("poison", POISON, ids=IDS)
def test_route_dead_letters_the_same_records_with_their_bytes(poison: Poison) -> None:
    routed = route(
        _record(poison, offset=3),
        topics=TOPICS,
        registry=_registry(),
        consumer="charging",
        now=T0,
    )
    assert isinstance(routed.data, DeadLetter)
    assert poison.reason in routed.data.reason
    assert routed.data.source_position == f"{TOPICS.name(poison.kind)}/0/3"


def _registry() -> Any:
    from events.registry import default_registry

    return default_registry()


def test_a_dead_letter_id_derives_from_the_consumer_name_and_position_only() -> None:
    record = _record(POISON[0], offset=5)
    letters = [
        route(record, topics=TOPICS, registry=_registry(), consumer=name, now=T0 + delta)
        for name, delta in (("charging", timedelta(0)), ("charging", timedelta(hours=3)))
    ]
    assert letters[0].id == letters[1].id == dead_letter_id("charging", "route.workloads/0/5")
    other = route(record, topics=TOPICS, registry=_registry(), consumer="projector", now=T0)
    assert other.id != letters[0].id


# -- dead letters on the in-memory bus (the same office as on Kafka) ------------------------


def _broker_with_poison() -> InMemoryBroker:
    broker = InMemoryBroker(partitions=3)
    publisher = InMemoryPublisher(broker, TOPICS)
    publisher.publish(VALID)
    for poison in POISON:
        publisher.publish_raw(TOPICS.name(poison.kind), poison.key, poison.value, poison.headers)
    return broker


def _letters(broker: InMemoryBroker) -> list[DeadLetter]:
    letters = []
    for record in broker.records(TOPICS.name(TopicKind.DEADLETTER)):
        checked = check(record, TOPICS)
        assert isinstance(checked, Delivery)
        assert isinstance(checked.envelope.data, DeadLetter)
        assert checked.envelope.id == dead_letter_id(
            checked.envelope.data.consumer, checked.envelope.data.source_position
        )
        letters.append(checked.envelope.data)
    return letters


def _drain(subscriber: InMemorySubscriber) -> list[Delivery]:
    """Everything, in small batches (a batch of poison alone hands out nothing)."""
    got: list[Delivery] = []
    for _ in range(20):
        got += subscriber.poll(max_records=2)
    return got


def test_a_group_member_hands_out_only_valid_events_and_dead_letters_each_poison_once() -> None:
    broker = _broker_with_poison()
    subscriber = InMemorySubscriber(
        broker, "charging-1", [TopicKind.WORKLOADS, TopicKind.CLUSTER], TOPICS, consumer="charging"
    )
    assert [d.envelope for d in _drain(subscriber)] == [VALID]
    letters = _letters(broker)
    assert len(letters) == len(POISON)
    assert {letter.consumer for letter in letters} == {"charging"}


def test_restarts_under_new_groups_add_no_dead_letter() -> None:
    """Charging reads from the first offset under a new group each start: 12 poison records
    once made 222 dead letters. Now one per record and consumer name."""
    broker = _broker_with_poison()
    kinds = [TopicKind.WORKLOADS, TopicKind.CLUSTER]
    for start in range(4):
        charging = InMemorySubscriber(
            broker, f"charging-{start}", kinds, TOPICS, consumer="charging"
        )
        _drain(charging)
        charging.close()
        projector = InMemorySubscriber(broker, "projector", kinds, TOPICS)
        _drain(projector)
        projector.close()  # never commits: everything is redelivered on the next start
    letters = _letters(broker)
    assert len(letters) == 2 * len(POISON)
    assert sorted(letter.consumer for letter in letters) == sorted(
        ["charging", "projector"] * len(POISON)
    )


def test_a_forged_dead_letter_does_not_silence_the_real_one() -> None:
    broker = InMemoryBroker(partitions=1)
    publisher = InMemoryPublisher(broker, TOPICS)
    publisher.publish_raw(WORKLOADS, b"w2", ENCODED.value, ENCODED.headers)  # wrong key
    position = f"{WORKLOADS}/0/0"
    # Someone writes a dead letter with the id the charging host would derive, but about
    # another position: not a letter of that record.
    forged = DeadLetter(
        source_position=f"{WORKLOADS}/0/99",
        source_topic=WORKLOADS,
        source_partition=0,
        source_offset=99,
        consumer="charging",
        reason="forged",
    )
    publisher.publish(
        new_event(forged, source="x", time=T0, event_id=dead_letter_id("charging", position))
    )
    # ...and an undecodable record carrying that id in its header.
    publisher.publish_raw(
        TOPICS.name(TopicKind.DEADLETTER),
        b"x",
        orjson.dumps({}),
        [("ce_id", dead_letter_id("charging", position).encode())],
    )
    _drain(InMemorySubscriber(broker, "c-1", [TopicKind.WORKLOADS], TOPICS, consumer="charging"))
    genuine = [letter for letter in _letters_lenient(broker) if letter.source_position == position]
    assert len(genuine) == 1
    assert genuine[0].reason.startswith("key: b'w2'")


def _letters_lenient(broker: InMemoryBroker) -> list[DeadLetter]:
    out = []
    for record in broker.records(TOPICS.name(TopicKind.DEADLETTER)):
        checked = check(record, TOPICS)
        if isinstance(checked, Delivery) and isinstance(checked.envelope.data, DeadLetter):
            out.append(checked.envelope.data)
    return out


class FlakyPublisher:
    """Accepts publishes, fails the first flush (the broker did not take them)."""

    def __init__(self) -> None:
        self.published: list[str] = []
        self.flushes = 0

    def publish(self, envelope: Any) -> None:
        self.published.append(envelope.id)

    def flush(self, timeout_s: float = 30.0) -> None:
        self.flushes += 1
        if self.flushes == 1:
            raise PublishError("not acknowledged")

    def close(self) -> None:
        return None


def test_a_dead_letter_that_failed_to_publish_is_published_again() -> None:
    publisher = FlakyPublisher()
    in_log: list[RawRecord] = []

    def published() -> Iterable[RawRecord]:
        return list(in_log)

    office = DeadLetters("charging", lambda: publisher, published, TOPICS)
    rejected = check(_record(POISON[0]), TOPICS)
    assert isinstance(rejected, Rejected)
    assert office.reject(rejected) is not None
    with pytest.raises(PublishError):
        office.flush()
    assert office.reject(rejected) is not None, "not in the log: posted again"
    office.flush()
    assert len(publisher.published) == 2
    assert len(set(publisher.published)) == 1


def test_a_group_member_does_not_commit_past_a_dead_letter_not_in_the_log() -> None:
    broker = InMemoryBroker(partitions=1)
    InMemoryPublisher(broker, TOPICS).publish_raw(WORKLOADS, b"w1", b"garbage")
    subscriber = InMemorySubscriber(broker, "g", [TopicKind.WORKLOADS], TOPICS)
    publisher = FlakyPublisher()
    subscriber.dead_letters = DeadLetters("g", lambda: publisher, list, TOPICS)
    with pytest.raises(PublishError):
        subscriber.poll()
    subscriber.commit()
    assert broker.committed("g", WORKLOADS, 0) == 0
