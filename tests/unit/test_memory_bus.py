"""The in-memory bus honours the same contract as the real brokers (see tests/bus_contract.py)."""

from __future__ import annotations

from collections.abc import Callable, Iterable

import pytest

from events import TopicKind, Topics
from services.bus.memory import InMemoryBroker, InMemoryPublisher, InMemorySubscriber
from services.bus.port import EventSubscriber, PublishError
from tests import bus_contract
from tests.factories import T0, submitted


class MemoryBus:
    def __init__(self) -> None:
        self.partitions = 3
        self.settle_s = 0.0
        self.topics = Topics(prefix="unit.")
        self.broker = InMemoryBroker(partitions=self.partitions)

    def publisher(self) -> InMemoryPublisher:
        return InMemoryPublisher(self.broker, self.topics)

    def subscriber(self, group: str, kinds: Iterable[TopicKind]) -> EventSubscriber:
        return InMemorySubscriber(self.broker, group, kinds, self.topics)


CASES: list[Callable[[bus_contract.BusFactory], None]] = [
    bus_contract.check_round_trip_of_every_event_type,
    bus_contract.check_commit_restart_resume,
    bus_contract.check_redelivery_after_crash_is_idempotent,
    bus_contract.check_poison_records_go_to_dead_letters,
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.__name__)
def test_memory_bus_contract(case: Callable[[bus_contract.BusFactory], None]) -> None:
    case(MemoryBus())


def test_redelivered_poison_yields_one_dead_letter() -> None:
    bus = MemoryBus()
    bus.publisher().publish_raw(bus.topics.name(TopicKind.WORKLOADS), b"k", b"garbage")
    first = bus.subscriber("g", [TopicKind.WORKLOADS])
    first.poll()
    first.close()  # crash before commit: the poison record is redelivered
    second = bus.subscriber("g", [TopicKind.WORKLOADS])
    second.poll()
    letters = bus.broker.records(bus.topics.name(TopicKind.DEADLETTER))
    assert len(letters) == 1, "the redelivered record is recognised as already dead-lettered"


def test_unavailable_publisher_raises() -> None:
    from events import new_event

    publisher = MemoryBus().publisher()
    publisher.unavailable = True
    with pytest.raises(PublishError, match="unavailable"):
        publisher.publish(new_event(submitted("wl-1"), source="t", time=T0))
