"""LiveState: the composition every service reads. Cross-topic order is not guaranteed by
Kafka, so facts that depend on one not read yet wait and apply once it arrives."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from events import new_event
from events.envelope import Envelope
from events.models import (
    BudgetCreated,
    BudgetUsage,
    DecisionRecord,
    EventData,
    NodeGpus,
    NodeRegistered,
    Placement,
    PreemptCommand,
    UsageSnapshot,
    WorkloadPlaced,
    WorkloadStarted,
)
from projections.live_state import LiveState
from tests.factories import submitted

T0 = 1_800_000_000 - 1_800_000_000 % 3600


def ev(data: EventData, at: float) -> Envelope[Any]:
    return new_event(data, source="tests", time=datetime.fromtimestamp(at, UTC))


def placement(node: str, *gpus: int) -> Placement:
    return Placement(nodes=(NodeGpus(node=node, gpus=gpus),))


def lab() -> list[Envelope[Any]]:
    return [
        ev(BudgetCreated(budget="lab", created_by="admin"), T0),
        ev(BudgetCreated(budget="lab/a", created_by="admin"), T0),
        ev(NodeRegistered(node="n1", cluster="c", pool="p", gpus=2, gpu_type="x"), T0),
    ]


def test_a_child_budget_read_before_its_parent_waits_for_it() -> None:
    state = LiveState()
    parent, child, _ = lab()
    assert not state.apply(child)
    assert state.waiting == [child]
    assert state.apply(parent)
    assert "lab/a" in state.tree.nodes
    assert state.waiting == []
    assert state.rejected == []


def test_a_placement_read_before_its_node_and_submission_applies_once_they_arrive() -> None:
    state = LiveState()
    placed = ev(
        WorkloadPlaced(
            workload_id="w1",
            attempt=1,
            pool="p",
            placement=placement("n1", 0, 1),
            allocated=True,
            command_id="place:w1:1",
        ),
        T0 + 10,
    )
    state.apply(placed)
    for envelope in [*lab(), ev(submitted("w1", budget="lab/a", pools=("p",), gpus=2), T0 + 5)]:
        state.apply(envelope)
    assert state.cluster.workloads["w1"].status == "placed"
    assert not state.waiting
    assert not state.rejected


def test_a_placement_on_gpus_whose_release_is_on_another_topic_waits_for_the_release() -> None:
    state = LiveState()
    for envelope in lab():
        state.apply(envelope)
    state.apply(ev(submitted("old", budget="lab/a", pools=("p",), gpus=2, min_runtime_s=0), T0))
    state.apply(ev(submitted("new", budget="lab/a", pools=("p",), gpus=2), T0 + 1))
    old = WorkloadPlaced(
        workload_id="old",
        attempt=1,
        pool="p",
        placement=placement("n1", 0, 1),
        allocated=False,
        command_id="place:old:1",
    )
    state.apply(ev(old, T0 + 2))
    state.apply(
        ev(
            WorkloadStarted(
                workload_id="old",
                attempt=1,
                pool="p",
                placement=placement("n1", 0, 1),
                allocated=False,
            ),
            T0 + 3,
        )
    )
    preempt = PreemptCommand(
        command_id="preempt:old:1",
        cluster="c",
        pool="p",
        workload_id="old",
        attempt=1,
        requeue=True,
        decision=DecisionRecord(
            pass_id=1, input_position=(), reason="preempt-for", preemptor="new"
        ),
    )
    new = old.model_copy(
        update={"workload_id": "new", "allocated": True, "command_id": "place:new:1"}
    )
    # The preemptor's placement (workloads topic) is read before the preemption (commands).
    assert not state.apply(ev(new, T0 + 10))
    assert state.apply(ev(preempt, T0 + 10))
    assert state.cluster.workloads["new"].status == "placed"
    assert [c.command.command_id for c in state.commands["old"]] == ["preempt:old:1"]
    assert not state.rejected


def test_redelivered_events_are_ignored_and_contradictions_rejected() -> None:
    state = LiveState()
    facts = lab()
    for envelope in facts:
        assert state.apply(envelope)
    assert not state.apply(facts[0]), "the same event id again"
    again = ev(BudgetCreated(budget="lab", created_by="admin"), T0 + 1)
    assert not state.apply(again)
    assert [r.event_id for r in state.rejected] == [again.id]
    assert not state.waiting


def test_window_usage_is_the_snapshot_plus_running_work_since_the_charged_hour() -> None:
    state = LiveState()
    for envelope in lab():
        state.apply(envelope)
    state.apply(ev(submitted("w1", budget="lab/a", pools=("p",), gpus=2), T0))
    placed = placement("n1", 0, 1)
    state.apply(
        ev(
            WorkloadPlaced(
                workload_id="w1",
                attempt=1,
                pool="p",
                placement=placed,
                allocated=True,
                command_id="place:w1:1",
            ),
            T0 + 1,
        )
    )
    state.apply(
        ev(
            WorkloadStarted(
                workload_id="w1", attempt=1, pool="p", placement=placed, allocated=True
            ),
            T0 + 100,
        )
    )
    # Before any snapshot: everything since the start is open occupancy.
    assert state.usage_in_window("p", T0 + 1000) == {"lab/a": 2 * 900}
    snapshot = UsageSnapshot(
        pool="p",
        window_start=datetime.fromtimestamp(T0 - 3600, UTC),
        window_end=datetime.fromtimestamp(T0 + 3700, UTC),
        as_of=(),
        budgets=(BudgetUsage(budget="lab/a", allocated_gpu_s=7000, unallocated_gpu_s=0),),
    )
    state.apply(ev(snapshot, T0 + 3700))
    # The snapshot holds the closed hour; the hour in progress is counted from its start.
    assert state.usage_in_window("p", T0 + 3700 + 300) == {"lab/a": 7000 + 2 * 400}


def test_a_held_fact_is_not_rejected_because_time_passed() -> None:
    """A backlog read after a restart spans hours: an early fact waits, however far the log's
    time has moved on, until what it depends on is read."""
    state = LiveState()
    parent, child, node = lab()
    assert not state.apply(child)
    for hour in range(1, 25):
        state.apply(ev(node.data.model_copy(update={"node": f"n{hour + 1}"}), T0 + hour * 3600))
    assert state.waiting == [child]
    assert state.rejected == []
    assert state.apply(parent)
    assert "lab/a" in state.tree.nodes
    assert state.waiting == []


def test_a_fact_held_before_the_reader_read_the_whole_log_past_it_is_rejected() -> None:
    state = LiveState()
    orphan = ev(BudgetCreated(budget="nowhere/a", created_by="admin"), T0)
    assert not state.apply(orphan)
    mark = state.hold_mark()  # then the reader captures end offsets and reads up to them
    later = ev(BudgetCreated(budget="lab/b", created_by="admin"), T0 + 1)
    assert not state.apply(later)  # held after the mark: kept for the next round
    assert state.reject_held_before(mark) == 1
    assert [r.event_id for r in state.rejected] == [orphan.id]
    assert state.waiting == [later]
    assert state.apply(lab()[0])
    assert state.waiting == []
