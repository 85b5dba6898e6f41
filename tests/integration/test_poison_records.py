"""Poison records produced raw onto a real broker: every reader treats them alike.

A valid submission produced with another key or onto another topic, and records that do not
decode (garbage, an unknown type, a bad schema, not JSON, a tombstone), produced with a bare
confluent-kafka producer as any client could. The scheduler's reading path (the group-less
follower) never hands them out; the charging host and the projector dead-letter each once,
signed with their stable names, however often they restart (the charging host under a new
consumer group each time); the export writes the one valid event once.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import pytest
from confluent_kafka import Producer
from sqlalchemy import create_engine, select

from events import TopicKind
from events.models import DeadLetter
from events.ndjson import BadLine, read_events
from events.positions import Delivery
from services.audit.sources import log_from_kafka
from services.bus.connection import client_config
from services.bus.export import export_events, read_to_end
from services.bus.follower import LogFollower
from services.bus.records import check, dead_letter_id
from services.charging.serve import kafka_charging_host
from services.projector.serve import run_projector
from services.read_models.migrate import migrate
from services.read_models.tables import workloads
from services.scheduler.host import INPUTS
from tests.integration.kafka_bus import KafkaBus
from tests.integration.should_stop import until
from tests.unit.test_routing import ENCODED, POISON, VALID

pytestmark = [pytest.mark.broker]

#: What each consumer reads of the poison (charging does not read the cluster topic).
CHARGING_SEES = [p for p in POISON if p.kind in (TopicKind.WORKLOADS, TopicKind.HEARTBEATS)]
PROJECTOR_SEES = POISON


def _produce_raw(bus: KafkaBus) -> None:
    """The valid event, then every poison record (the wrong-key and wrong-topic ones are
    copies of it, same id), with a client that checks nothing."""
    producer = Producer(client_config(bus.broker.bootstrap, {"partitioner": "murmur2"}))
    workloads_topic = bus.topics.name(TopicKind.WORKLOADS)
    producer.produce(workloads_topic, key=ENCODED.key, value=ENCODED.value, headers=ENCODED.headers)
    for poison in POISON:
        producer.produce(
            bus.topics.name(poison.kind),
            key=poison.key,
            value=poison.value,
            headers=poison.headers,
        )
    assert producer.flush(30) == 0


def _dead_letters(bus: KafkaBus) -> list[tuple[str, DeadLetter]]:
    letters = []
    for record in read_to_end(bus.broker.bootstrap, [bus.topics.name(TopicKind.DEADLETTER)]):
        checked = check(record, bus.topics)
        assert isinstance(checked, Delivery), "dead letters are valid events"
        assert isinstance(checked.envelope.data, DeadLetter)
        letters.append((checked.envelope.id, checked.envelope.data))
    return letters


def _for(seconds: float, after: Callable[[], bool]) -> Callable[[], bool]:
    """A should_stop: true ``seconds`` after ``after()`` first held (everything read by then)."""
    since: list[float] = []

    def stop() -> bool:
        if not since and after():
            since.append(time.monotonic())
        return bool(since) and time.monotonic() - since[0] > seconds

    return stop


@pytest.mark.slow  # 14-32 s: the default run stays under 10 minutes; CI runs it with -m slow
def test_poison_is_skipped_by_followers_dead_lettered_once_and_exported_never(
    bus: KafkaBus, tmp_path: Path
) -> None:
    _produce_raw(bus)
    bootstrap = bus.broker.bootstrap

    # The scheduler's (and the API view's, and the agents') reading path.
    follower = LogFollower(bootstrap, INPUTS, bus.topics)
    try:
        assert [d.envelope for d in follower.catch_up()] == [VALID]
        assert follower.skipped == len(POISON)
    finally:
        follower.close()
    assert _dead_letters(bus) == [], "readers without a group never dead-letter"

    # The charging host, three starts (each under a new consumer group).
    for start in range(3):
        host = kafka_charging_host(bootstrap, bus.topics, snapshot_every_s=3600)
        if start == 0:
            host.run(until(lambda: len(_dead_letters(bus)) >= len(CHARGING_SEES)), poll_s=0.2)
        else:
            host.run(_for(3.0, after=lambda h=host.host: bool(h.positions)), poll_s=0.2)
        letters = _dead_letters(bus)
        assert len(letters) == len(CHARGING_SEES), f"start {start + 1}: {len(letters)} letters"
    assert {letter.consumer for _id, letter in letters} == {"charging"}

    # The projector, three starts that never commit their offsets (so all is redelivered).
    engine = create_engine(f"sqlite:///{tmp_path / 'read.db'}")
    migrate(engine)

    def projected() -> bool:
        with engine.connect() as connection:
            return connection.execute(select(workloads.c.workload_id)).first() is not None

    expected = len(CHARGING_SEES) + len(PROJECTOR_SEES)
    projector = f"{bus.topics.prefix}projector"  # its own static member id, not another test's
    for start in range(3):
        stop = (
            until(lambda: len(_dead_letters(bus)) >= expected)
            if start == 0
            else _for(3.0, after=projected)
        )
        run_projector(bootstrap, engine, stop, bus.topics, group=projector, commit_offsets=False)
        assert len(_dead_letters(bus)) == expected, f"projector start {start + 1}"
    engine.dispose()

    letters = _dead_letters(bus)
    assert len({letter_id for letter_id, _ in letters}) == len(letters) == expected
    for letter_id, letter in letters:
        assert letter_id == dead_letter_id(letter.consumer, letter.source_position)
    by_consumer = sorted(letter.consumer for _id, letter in letters)
    assert by_consumer == sorted(
        ["charging"] * len(CHARGING_SEES) + [projector] * len(PROJECTOR_SEES)
    )

    # The export: the valid event once (its copies under another key or topic are poison),
    # the dead letters as dead-letter events, each record at most once.
    out = tmp_path / "log.ndjson"
    result = export_events(bootstrap, out, bus.topics)
    exported = [e for e in read_events(out) if not isinstance(e, BadLine)]
    ids = [e.id for e in exported]
    assert len(ids) == len(set(ids)), "no event written twice"
    assert [e for e in exported if not isinstance(e.data, DeadLetter)] == [VALID]
    assert (result.events, result.skipped) == (1 + expected, len(POISON))

    # The audit's reading of the live log: the poison as bad lines, never as facts.
    read = list(log_from_kafka(bootstrap, bus.topics))
    assert sum(isinstance(e, BadLine) for e in read) == len(POISON)
    assert [e for e in read if not isinstance(e, BadLine) and e.id == VALID.id] == [VALID]
