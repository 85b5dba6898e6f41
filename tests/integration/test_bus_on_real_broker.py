"""The bus contract (tests/bus_contract.py) against a real broker started by the test session."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from events import TopicKind, Topics, new_event
from events.models import DeadLetter
from services.brokers import BrokerHandle
from services.bus.admin import TopicSetupError, ensure_topics
from services.bus.kafka import KafkaEventSubscriber
from tests import bus_contract
from tests.factories import T0, submitted
from tests.integration.kafka_bus import KafkaBus
from tests.unit.test_routing import POISON, VALID

pytestmark = [pytest.mark.broker]
ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.broker_fast
def test_every_event_type_round_trips_with_headers_and_keys(bus: KafkaBus) -> None:
    bus_contract.check_round_trip_of_every_event_type(bus)


@pytest.mark.broker_fast
def test_consumer_group_commits_restarts_and_resumes(bus: KafkaBus) -> None:
    bus_contract.check_commit_restart_resume(bus)


def test_redelivery_after_crash_before_commit_is_idempotent(bus: KafkaBus) -> None:
    bus_contract.check_redelivery_after_crash_is_idempotent(bus)


@pytest.mark.broker_fast
def test_poison_records_land_in_the_dead_letter_topic(bus: KafkaBus) -> None:
    bus_contract.check_poison_records_go_to_dead_letters(bus)


@pytest.mark.slow  # 12-16 s: the default run stays under 10 minutes; CI runs it with -m slow
def test_a_consumer_restarted_under_new_groups_dead_letters_each_record_once(
    bus: KafkaBus,
) -> None:
    """Signed with the consumer's stable name, not its group of the day, and recognised in the
    log on every later start: three starts, one dead letter per poison record."""
    publisher = bus.publisher()
    publisher.publish(VALID)
    workloads = [p for p in POISON if p.kind is TopicKind.WORKLOADS]
    for poison in workloads:
        publisher.publish_raw(
            bus.topics.name(poison.kind), poison.key, poison.value, poison.headers
        )
    publisher.flush()
    for start in range(3):
        subscriber = KafkaEventSubscriber(
            bus.broker.bootstrap,
            f"{bus.topics.prefix}charging-{start}",
            [TopicKind.WORKLOADS],
            bus.topics,
            consumer="charging",
        )
        got = bus_contract.drain(subscriber, 1, settle_s=2.0)
        subscriber.close()
        assert [d.envelope for d in got] == [VALID]
        assert subscriber.dead_letters.posted == (len(workloads) if start == 0 else 0)
    reader = bus.subscriber("deadletter-reader", [TopicKind.DEADLETTER])
    letters = bus_contract.drain(reader, len(workloads), settle_s=2.0)
    reader.close()
    assert len(letters) == len({d.envelope.id for d in letters}) == len(workloads)
    assert all(
        isinstance(d.envelope.data, DeadLetter) and d.envelope.data.consumer == "charging"
        for d in letters
    )


#: Starts a member, leaves it unpolled (or polls once), closes it; sixteen times. Run in a child
#: process: a close that hangs holds the GIL, so no thread or signal of the test could end it.
_JOIN_AND_CLOSE = """
import sys, time
from events import Topics
from services.bus.kafka import KafkaEventSubscriber
from services.projector.host import PROJECTED

bootstrap, prefix = sys.argv[1:3]
for start in range(16):
    member = KafkaEventSubscriber(
        bootstrap, prefix + "projector", PROJECTED, Topics(prefix=prefix),
        config={"group.instance.id": prefix + "projector-static"},
    )
    if start % 2:
        member.poll(timeout_s=0.5)
    else:
        time.sleep(1.0)  # joined, its assignment waiting for a poll
    member.close()
    print("closed", start + 1, flush=True)
"""


@pytest.mark.slow  # 14-32 s: the default run stays under 10 minutes; CI runs it with -m slow
def test_closing_right_after_joining_returns(bus: KafkaBus) -> None:
    """librdkafka's close never returned when an assignment had arrived that no poll had
    served (a projector, a static member, stopped just after it joined)."""
    publisher = bus.publisher()
    for i in range(100):
        publisher.publish(new_event(submitted(f"w{i}"), source="tests", time=T0))
    publisher.flush()
    args = [sys.executable, "-c", _JOIN_AND_CLOSE, bus.broker.bootstrap, bus.topics.prefix]
    try:
        done = subprocess.run(
            args, capture_output=True, text=True, timeout=90, check=False, cwd=ROOT
        )
    except subprocess.TimeoutExpired as expired:
        out = expired.stdout or b""
        closed = (out.decode() if isinstance(out, bytes) else out).split()
        pytest.fail(f"a close hung after {closed[-2:]}")
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split()[-2:] == ["closed", "16"]


def test_topic_creation_is_idempotent_and_refuses_repartitioning(broker: BrokerHandle) -> None:
    topics = Topics(prefix="admin-test.")
    created = ensure_topics(broker.bootstrap, topics, partitions={TopicKind.HEARTBEATS: 6})
    assert created[topics.name(TopicKind.HEARTBEATS)] == 6
    assert created[topics.name(TopicKind.WORKLOADS)] == 3
    assert ensure_topics(broker.bootstrap, topics, partitions={TopicKind.HEARTBEATS: 6}) == created
    with pytest.raises(TopicSetupError, match="has 6 partitions, wanted 3"):
        ensure_topics(broker.bootstrap, topics, partitions=3)
