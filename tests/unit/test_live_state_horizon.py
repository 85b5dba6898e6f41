"""The live view is bounded by the live state, not by history (issue 23): ended work and the
ids of old facts leave memory a window and a day after they ended, and that changes nothing
any reader or pass sees. And a run's start or end read before its placement waits for it."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from events import new_event
from events.envelope import Envelope
from events.models import (
    EventData,
    PlaceCommand,
    PreemptCommand,
    WorkloadFinished,
    WorkloadPlaced,
    WorkloadStarted,
)
from events.times import DAY, HOUR
from projections.live_state import FORGET_AFTER_S, LiveState
from scheduling.scheduling_pass import PassContext, run_pass
from tests.factories import submitted
from tests.unit.test_audit_decisions import simulated_log
from tests.unit.test_live_state import T0, lab, placement


def ev(data: EventData, at: float) -> Envelope[Any]:
    return new_event(data, source="tests", time=datetime.fromtimestamp(at, UTC))


def _placed(workload_id: str) -> WorkloadPlaced:
    return WorkloadPlaced(
        workload_id=workload_id,
        attempt=1,
        pool="p",
        placement=placement("n1", 0, 1),
        allocated=True,
        command_id=f"place:{workload_id}:1",
    )


def _run(workload_id: str, start: float, end: float) -> list[Envelope[Any]]:
    where = {"pool": "p", "placement": placement("n1", 0, 1), "allocated": True}
    return [
        ev(submitted(workload_id, budget="lab/a", pools=("p",), gpus=2), start),
        ev(_placed(workload_id), start),
        ev(WorkloadStarted(workload_id=workload_id, attempt=1, **where), start + 1),
        ev(WorkloadFinished(workload_id=workload_id, attempt=1, outcome="succeeded"), end),
    ]


def test_a_start_and_an_end_read_before_their_placement_wait_for_it() -> None:
    """The history bench's API fold: a placement held (its node not read yet), its start and
    end folded meanwhile were dropped, so the placement later held its GPUs for ever and the
    next placement on them was rejected."""
    state = LiveState()
    budgets, child, node = lab()
    state.apply(budgets)
    state.apply(child)
    run = _run("w1", T0, T0 + 60)
    state.apply(run[0])
    assert not state.apply(run[1]), "its node is not read yet"
    assert not state.apply(run[2])
    assert not state.apply(run[3])
    assert state.apply(node)
    assert state.cluster.workloads["w1"].status == "succeeded"
    assert state.cluster.nodes["n1"].holders == {}
    for envelope in _run("w2", T0 + 120, T0 + 180):
        assert state.apply(envelope)
    assert (state.waiting, state.rejected) == ([], [])


def test_ended_work_and_old_ids_leave_memory_and_redeliveries_of_them_change_nothing() -> None:
    state = LiveState()
    for envelope in lab():
        state.apply(envelope)
    days = 30
    first = _run("w0", T0, T0 + HOUR)
    for day in range(days):
        for envelope in _run(f"w{day}", T0 + day * DAY, T0 + day * DAY + HOUR):
            state.apply(envelope)
    kept = FORGET_AFTER_S // DAY + 1
    assert len(state.cluster.workloads) <= kept
    assert "w0" not in state.cluster.workloads
    assert state.forgotten >= days - kept
    assert len(state.event_ids) <= 4 * (kept + 1) + len(lab())
    before = len(state.cluster.workloads)
    for envelope in first:  # redelivered a month late: the same ids and times
        assert not state.apply(envelope)
    assert "w0" not in state.cluster.workloads
    assert len(state.cluster.workloads) == before
    assert state.beyond_horizon == len(first)
    assert (state.waiting, state.rejected) == ([], [])


def _decisions(state: LiveState, now: float) -> list[str]:
    result = run_pass(state.cluster, state.tree, state.usage_source(now), PassContext(now=now))
    return [
        c.model_dump_json() for c in result.commands if isinstance(c, PlaceCommand | PreemptCommand)
    ]


def test_forgetting_changes_no_decision_and_nothing_live() -> None:
    """A fold that forgets after ten minutes against one that never forgets, on a simulated day
    of the Philly trace: every pass along the log decides the same, and every workload still
    pending or active is the same."""
    log = simulated_log(0, 300)
    assert log[-1].epoch_seconds - log[0].epoch_seconds > 6 * HOUR
    forgetful, total = LiveState(forget_after_s=600), LiveState(forget_after_s=10**12)
    for n, envelope in enumerate(log):
        forgetful.apply(envelope)
        total.apply(envelope)
        if n % 200 == 199:
            now = envelope.epoch_seconds + 1.0
            assert _decisions(forgetful, now) == _decisions(total, now)
    assert forgetful.forgotten > 0
    now = log[-1].epoch_seconds + 60.0
    assert _decisions(forgetful, now) == _decisions(total, now)
    assert len(forgetful.cluster.workloads) < len(total.cluster.workloads)
    for workload_id, workload in total.cluster.workloads.items():
        if workload.status in ("pending", "placed", "running"):
            assert forgetful.cluster.workloads[workload_id] == workload
    assert forgetful.cluster.pending == total.cluster.pending
    assert forgetful.cluster.active == total.cluster.active
    assert forgetful.beyond_horizon == 0
