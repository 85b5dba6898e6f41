"""One ordering rule for every reader: a view that has caught up equals the offline fold.

A recorded log (a small simulated run on the Philly trace, with budgets created only when their
first workload arrives, nested budgets created at one instant, and nodes registered at the very
instant of their first placement) is produced into partitions progressively, in event-time
order, and read by the API's own reading path (``LiveView`` over a ``Follower``, whose merge is
the one under test) with partitions fetched in an order Hypothesis chooses, in batches of any
size, with restarts (a fresh view reads everything again). However it was read, once caught up
the view holds what the fold of the log sorted by event time holds: every workload's status,
attempt and placement, the budget tree. Nothing is held or rejected.
"""

from __future__ import annotations

import bisect
import random
from datetime import UTC, datetime
from functools import cache
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from events import TopicKind, Topics, new_event
from events.envelope import Envelope, derived_event_id
from events.models import (
    BudgetCreated,
    BudgetWeightChanged,
    EventData,
    GpuHeartbeat,
    LedgerCharge,
    MembershipGranted,
    NodeRegistered,
    WorkloadPlaced,
    WorkloadSubmitted,
)
from events.positions import Delivery, Position, TopicPartition
from projections.live_state import LiveState
from scheduling.scheduling_pass import run_pass
from services.api.view import VIEW_KINDS, LiveView
from services.bus.follower import in_time_order
from services.bus.memory import InMemoryBroker, InMemoryPublisher, InMemorySubscriber
from services.simulator.engine import Simulation, SimulationConfig
from services.simulator.trace import PHILLY_BUDGETS, PHILLY_TRACE, load_budgets, load_trace

TOPICS = Topics(prefix="order.")


def _event(data: EventData, at: float, n: int) -> Envelope[Any]:
    return new_event(
        data,
        source="sim",
        time=datetime.fromtimestamp(at, UTC),
        event_id=derived_event_id("order", str(n)),
    )


def _simulated() -> list[Envelope[Any]]:
    jobs = load_trace(PHILLY_TRACE, limit=80)
    log: list[Envelope[Any]] = []
    beats = 0

    def record(data: EventData, at: float) -> None:
        # Charges are the ledger's, not the view's; one heartbeat in four is plenty here.
        nonlocal beats
        if isinstance(data, GpuHeartbeat):
            beats += 1
        if not isinstance(data, LedgerCharge) and (
            beats % 4 == 0 or not isinstance(data, GpuHeartbeat)
        ):
            log.append(_event(data, at, len(log)))

    weights = load_budgets(PHILLY_BUDGETS)
    Simulation(
        jobs,
        weights,
        SimulationConfig(gpus=32, gpus_per_node=8),
        run_pass,
        recorder=record,
    ).run()
    return log


def _late(log: list[Envelope[Any]]) -> list[Envelope[Any]]:
    """The same facts, but budgets created when their first workload arrives and nodes
    registered at the instant of their first placement (equal times across topics)."""
    first_submit: dict[str, float] = {}
    first_place: dict[str, float] = {}
    for envelope in log:
        data = envelope.data
        if isinstance(data, WorkloadSubmitted):
            first_submit.setdefault(data.budget, envelope.epoch_seconds)
        if isinstance(data, WorkloadPlaced):
            for part in data.placement.nodes:
                first_place.setdefault(part.node, envelope.epoch_seconds)
    out = []
    for envelope in log:
        data, at = envelope.data, float(envelope.epoch_seconds)
        if isinstance(data, BudgetCreated):
            at = first_submit.get(data.budget, at)
        elif isinstance(data, NodeRegistered):
            at = first_place.get(data.node, at)
        out.append(envelope.model_copy(update={"time": datetime.fromtimestamp(at, UTC)}))
    # A nested budget made late, at one instant: parent, child, member, then a new weight.
    middle = log[len(log) // 2].epoch_seconds
    extra = [
        (BudgetCreated(budget="lab", created_by="admin"), middle),
        (BudgetCreated(budget="lab/late", weight=2, created_by="admin"), middle),
        (MembershipGranted(budget="lab/late", user="ana", role="member", granted_by="a"), middle),
        (BudgetWeightChanged(budget="lab/late", weight=3, changed_by="admin"), middle + 1),
    ]
    out += [_event(data, at, 10**6 + i) for i, (data, at) in enumerate(extra)]
    # produced in event-time order (each producer's own order kept on ties)
    return sorted(out, key=lambda e: e.epoch_seconds)


@cache
def recorded() -> tuple[Delivery, ...]:
    """The log as produced: every record with its position, in production order."""
    broker = InMemoryBroker(partitions=3)
    publisher = InMemoryPublisher(broker, TOPICS)
    log = _late(_simulated())
    for envelope in log:
        publisher.publish(envelope)
    by_id = {
        d.envelope.id: d
        for d in InMemorySubscriber(broker, "rec", VIEW_KINDS, TOPICS).poll(max_records=10**9)
    }
    assert len(by_id) == len(log)
    return tuple(by_id[e.id] for e in log)


class ProducedLog:
    """The recorded log, produced up to ``produced`` records so far."""

    def __init__(self) -> None:
        self.records = recorded()
        self.produced = 0
        self.partitions = sorted({(TOPICS.name(kind), p) for kind in VIEW_KINDS for p in range(3)})
        self._by_key: dict[TopicPartition, list[tuple[int, Delivery]]] = {
            k: [] for k in self.partitions
        }
        for index, delivery in enumerate(self.records):
            key = (delivery.position.topic, delivery.position.partition)
            self._by_key[key].append((index, delivery))

    def end(self, key: TopicPartition) -> int:
        """How many records of ``key`` are produced so far."""
        return bisect.bisect_left(self._by_key[key], (self.produced, -1), key=lambda r: (r[0], -1))

    def read(self, key: TopicPartition, start: int, count: int) -> list[Delivery]:
        stop = min(self.end(key), start + count)
        return [d for _, d in self._by_key[key][start:stop]]


class ScriptedPartitions:
    """A partition source whose fetches interleave partitions as ``rng`` says."""

    def __init__(self, log: ProducedLog, rng: random.Random) -> None:
        self.log, self.rng = log, rng
        self.next: dict[TopicPartition, int] = dict.fromkeys(log.partitions, 0)

    def partitions(self) -> list[TopicPartition]:
        return list(self.log.partitions)

    def fetch(self, timeout_s: float, max_records: int) -> list[Delivery | Position]:
        got: list[Delivery | Position] = []
        for _ in range(self.rng.randint(1, 4)):
            ready = [k for k in self.log.partitions if self.log.end(k) > self.next[k]]
            if not ready:
                break
            key = self.rng.choice(ready)
            records = self.log.read(key, self.next[key], self.rng.randint(1, 40))
            self.next[key] += len(records)
            got += records
        return got

    def end_offsets(self, cached: bool = False) -> dict[TopicPartition, int]:
        return {key: self.log.end(key) for key in self.log.partitions}

    def close(self) -> None:
        return None


def summary(state: LiveState) -> dict[str, Any]:
    return {
        "workloads": {
            w.workload_id: (w.status, w.attempt, w.pool, w.placement)
            for w in state.cluster.workloads.values()
        },
        "nodes": sorted(state.cluster.nodes),
        "budgets": {
            path: (sorted(node.children), node.weights, node.closed_at, node.members)
            for path, node in state.tree.nodes.items()
        },
    }


@cache
def offline() -> dict[str, Any]:
    state = LiveState()
    for delivery in in_time_order(list(recorded()), TOPICS):
        state.apply(delivery.envelope)
    assert not state.rejected
    assert not state.waiting
    return summary(state)


def test_the_recorded_log_has_what_the_rule_must_order() -> None:
    records = recorded()
    kinds = {TOPICS.kind_of(d.position.topic) for d in records}
    assert {TopicKind.BUDGETS, TopicKind.CLUSTER, TopicKind.WORKLOADS, TopicKind.COMMANDS} <= kinds
    workloads = offline()["workloads"]
    statuses = {status for status, *_ in workloads.values()}
    assert {"pending", "running"} <= statuses, statuses
    assert "lab/late" in offline()["budgets"]


def test_a_view_reading_topic_by_topic_equals_the_offline_fold() -> None:
    """The in-memory subscriber fetches one topic after the other: the old view's worst case."""
    broker = InMemoryBroker(partitions=3)
    publisher = InMemoryPublisher(broker, TOPICS)
    for delivery in recorded():
        publisher.publish(delivery.envelope)
    view = LiveView(InMemorySubscriber(broker, "api", VIEW_KINDS, TOPICS), topics=TOPICS)
    view.sync()
    assert view.caught_up
    assert summary(view.state) == offline()
    assert not view.state.rejected
    assert not view.state.waiting


@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(seed=st.integers(0, 2**32 - 1), restarts=st.lists(st.floats(0, 1), max_size=3))
def test_any_interleaving_and_restarts_fold_to_the_offline_view(
    seed: int, restarts: list[float]
) -> None:
    rng = random.Random(seed)
    log = ProducedLog()
    total = len(log.records)
    restart_at = sorted(int(f * total) for f in restarts)

    def fresh() -> LiveView:
        return LiveView(ScriptedPartitions(log, rng), topics=TOPICS)

    view = fresh()
    while log.produced < total:
        log.produced = min(total, log.produced + rng.randint(1, 120))
        for _ in range(rng.randint(0, 3)):
            view.poll_once(0.0)
        while restart_at and restart_at[0] <= log.produced:
            restart_at.pop(0)
            view.stop()  # the API restarted: a fresh view reads the log from the start
            view = fresh()
    view.sync()
    assert view.reached(view.log_end())
    assert not view.state.rejected
    assert not view.state.waiting
    assert summary(view.state) == offline()
