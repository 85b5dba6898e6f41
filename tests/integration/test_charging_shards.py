"""Charging scaled out by partitions, through a real broker: two shards of one group share
the workloads topic, post exactly the charges one fold of the whole log posts, publish one
complete usage stream, and when a shard goes away the other takes its partitions over."""

from __future__ import annotations

import threading
import time
from collections import defaultdict
from collections.abc import Callable

import pytest

from events import TopicKind, new_event
from events.models import (
    LedgerCharge,
    UsageSnapshot,
)
from events.positions import Delivery
from projections.ledger import Ledger
from services.bus.export import read_to_end
from services.bus.partitioning import partition_for_key
from services.bus.records import check
from services.charging.driver import ChargingDriver
from services.charging.serve import kafka_charging_shard
from tests.charging_facts import Facts, batch
from tests.integration.kafka_bus import KafkaBus
from tests.unit.test_ledger import _at

pytestmark = [pytest.mark.broker]


def _publish(bus: KafkaBus, facts: Facts) -> None:
    publisher = bus.publisher()
    for data, t in facts:
        publisher.publish(new_event(data, source="tests", time=_at(t)))
    publisher.flush()


def _expected(facts: Facts) -> dict[str, LedgerCharge]:
    ledger = Ledger()
    for data, t in facts:
        ledger.apply(data, float(t))
    return {charge.charge_id: charge for charge in ledger.entries}


def _read(bus: KafkaBus, kind: TopicKind) -> list[Delivery]:
    deliveries = []
    for record in read_to_end(bus.broker.bootstrap, [bus.topics.name(kind)]):
        checked = check(record, bus.topics)
        assert isinstance(checked, Delivery), checked
        deliveries.append(checked)
    return deliveries


def _charges(bus: KafkaBus) -> list[LedgerCharge]:
    return [
        d.envelope.data
        for d in _read(bus, TopicKind.LEDGER)
        if isinstance(d.envelope.data, LedgerCharge)
    ]


def _wait(what: str, condition: Callable[[], bool], timeout_s: float = 90.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.5)


class _Running:
    def __init__(self, shard: ChargingDriver) -> None:
        self.shard = shard
        self.stop = threading.Event()
        self.failure: BaseException | None = None
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        try:
            self.shard.run(self.stop.is_set, poll_s=0.2)
        except BaseException as error:  # reported by the test
            self.failure = error

    def halt(self) -> None:
        self.stop.set()
        self.thread.join(timeout=30)
        assert not self.thread.is_alive()
        assert self.failure is None, self.failure


def _posts_exactly(bus: KafkaBus, expected: dict[str, LedgerCharge]) -> bool:
    charges = _charges(bus)
    for charge in charges:  # a charge posted twice (a rebalance race) is the same charge
        assert expected.get(charge.charge_id) == charge, charge
    return {c.charge_id for c in charges} == set(expected)


@pytest.mark.slow  # 13 s: with the slow scenarios (the default run keeps its ten minutes)
def test_two_shards_share_the_partitions_and_one_takes_over(bus: KafkaBus) -> None:
    first = batch("w", 0)
    _publish(bus, first)
    partitions = bus.partitions
    owners = {partition_for_key(w.encode(), partitions) for w in ("ws1", "ws2")}
    options = {"snapshot_every_s": 0, "session_timeout_ms": 6000}
    a = _Running(kafka_charging_shard(bus.broker.bootstrap, bus.topics, "a", **options))
    b = _Running(kafka_charging_shard(bus.broker.bootstrap, bus.topics, "b", **options))
    try:
        # a holds every partition until b joins; the group then revokes and assigns anew,
        # and each shard rebuilds at its next round: wait for the assignment to settle
        _wait(
            "both shards to hold disjoint partitions",
            lambda: (
                bool(a.shard.built_for)
                and bool(b.shard.built_for)
                and not a.shard.built_for & b.shard.built_for
            ),
        )
        held_a, held_b = a.shard.built_for, b.shard.built_for
        assert held_a | held_b == set(range(partitions))
        expected = _expected(first)
        _wait("the charges of one fold of the log", lambda: _posts_exactly(bus, expected))
        if len(owners) == 2:  # the shared node's runs are charged by two shards
            assert any(p in held_a for p in owners)
            assert any(p in held_b for p in owners)

        # b goes away without leaving (static membership, like a kill): after the session
        # timeout its partitions are a's, whose rebuilt fold charges the new facts of every
        # partition and publishes none of the old charges again.
        b.halt()
        second = batch("x", 4 * 3600)
        _publish(bus, second)
        _wait("a to hold every partition", lambda: a.shard.built_for == set(range(partitions)))
        expected = _expected(first + second)
        _wait("the charges of both batches", lambda: _posts_exactly(bus, expected))
        assert a.shard.builds >= 2

        # One complete usage stream: a speaks for every pool once it holds partition 0, and
        # its window counts the charges b posted as well as its own.
        totals: dict[str, int] = defaultdict(int)
        for charge in expected.values():
            if charge.kind == "allocated":
                totals[charge.budget] += charge.signed_gpu_seconds

        def complete_snapshot() -> bool:
            snapshots = [
                d.envelope.data
                for d in _read(bus, TopicKind.USAGE)
                if isinstance(d.envelope.data, UsageSnapshot)
            ]
            if not snapshots:
                return False
            latest = snapshots[0]
            for snapshot in snapshots:  # what the scheduler keeps: the last of the latest end
                if snapshot.window_end >= latest.window_end:
                    latest = snapshot
            return {u.budget: u.allocated_gpu_s for u in latest.budgets} == dict(totals)

        _wait("a usage snapshot with every shard's charges", complete_snapshot)
    finally:
        for running in (a, b):
            if running.thread.is_alive():
                running.halt()
