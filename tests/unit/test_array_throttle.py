"""A job array's throttle (``%K``) in the scheduling core: never more than K of its elements
placed or running at once, whatever ends, fails, is preempted, lost or cancelled; the next
element is queued when one ends, in index order; the debug lane takes no element; and the
fold of the same facts, replayed, has the same queues (``audit decisions`` re-derives it)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from events.envelope import new_event
from events.models import (
    BudgetCreated,
    EventData,
    NodeDown,
    NodeRegistered,
    NodeUp,
    WorkloadArraySubmitted,
    WorkloadCancelled,
    WorkloadFinished,
    WorkloadSubmitted,
)
from events.times import fold_instant
from projections.cluster_state import ClusterState
from projections.cluster_types import ACTIVE
from projections.live_state import LiveState
from scheduling.debug_lane import DebugLane
from scheduling.memos import PassMemos
from scheduling.scheduling_pass import SOURCE, PassContext, run_pass
from scheduling.why_pending import ArrayLimit, PoolQueue
from services.audit.decisions import audit_decisions
from tests.unit.scheduling_fixtures import (
    CLUSTER,
    T0,
    Agent,
    Scenario,
    placed_ids,
    preempted_ids,
    snapshot,
)


def array(
    array_id: str, indices: str, limit: int | None, **fields: object
) -> WorkloadArraySubmitted:
    values: dict[str, object] = {
        "budget": "a",
        "pools": ("p",),
        "gpus": 1,
        "min_runtime_s": 600,
        "submitter": "tester",
    }
    values.update(fields)
    return WorkloadArraySubmitted(
        array_id=array_id,
        indices=indices,
        max_running=limit,
        **values,  # type: ignore[arg-type]
    )


def active(cluster: ClusterState, array_id: str) -> list[str]:
    return sorted(
        w.workload_id
        for w in cluster.workloads.values()
        if w.array_id == array_id and w.status in ACTIVE
    )


def test_a_pass_places_at_most_k_elements_and_the_first_by_index() -> None:
    s = Scenario(nodes=(("n0", 8), ("n1", 8)))
    s.apply(array("A", "0-11", 3), T0)
    placed = placed_ids(s.run(T0 + 1))
    assert placed == ["A_0", "A_1", "A_2"]  # A_10 does not sort before A_2
    assert placed_ids(s.run(T0 + 2)) == []
    queue = PoolQueue(s.cluster, s.tree, "p", T0 + 2, {})
    assert [w.workload_id for w in queue.ordered][:2] == ["A_3", "A_4"]
    assert queue.considered == 0
    assert queue.reasons(1) == (ArrayLimit("A", 3, 3),)


def test_an_end_queues_the_next_element_and_a_stopping_run_still_counts() -> None:
    s = Scenario(nodes=(("n0", 8),))
    s.apply(array("A", "0-5", 2), T0)
    s.run(T0 + 1)
    s.start("A_0", T0 + 2)
    s.start("A_1", T0 + 2)
    s.finished("A_0", T0 + 10)
    assert placed_ids(s.run(T0 + 11)) == ["A_2"]
    s.apply(WorkloadCancelled(workload_id="A_1", cancelled_by="tester"), T0 + 12)
    result = s.run(T0 + 13)  # the cancel's preempt command: A_1 holds its GPU until it ends
    assert preempted_ids(result) == ["A_1"]
    assert active(s.cluster, "A") == ["A_1", "A_2"]
    assert placed_ids(s.run(T0 + 14)) == []
    s.preempted("A_1", T0 + 20)
    assert placed_ids(s.run(T0 + 21)) == ["A_3"]


def test_a_requeued_element_goes_back_ahead_of_later_ones() -> None:
    s = Scenario(nodes=(("n0", 4),))
    s.apply(array("A", "0-5", 2, resumable=True), T0)
    s.run(T0 + 1)
    s.start("A_0", T0 + 2)
    s.start("A_1", T0 + 2)
    s.apply(NodeDown(node="n0"), T0 + 50)
    s.run(T0 + 51)  # lost, then requeued: A_0 and A_1 are pending again, first in line
    s.apply(NodeUp(node="n0"), T0 + 60)
    assert placed_ids(s.run(T0 + 61)) == ["A_0", "A_1"]


def test_the_debug_lane_takes_no_element() -> None:
    """A budget's own run past its contract is preempted for its debug job (the lane), never
    for an element of the same shape: an array is batch work."""
    s = Scenario(nodes=(("n0", 4),))
    s.submit("blocker", "a", gpus=4, min_runtime_s=600, at=T0 - 1000)
    s.run(T0 - 999)
    s.start("blocker", T0 - 998)
    s.apply(array("A", "0", None, min_runtime_s=60), T0)  # lane-shaped: 1 GPU, 1 min
    assert not DebugLane().admits(s.cluster.workloads["A_0"])
    assert preempted_ids(s.run(T0 + 100)) == []
    s.submit("debug", "a", min_runtime_s=60, at=T0 + 100)
    assert DebugLane().admits(s.cluster.workloads["debug"])
    assert preempted_ids(s.run(T0 + 200)) == ["blocker"]


def test_an_unthrottled_array_is_queued_whole_in_index_order() -> None:
    s = Scenario(nodes=(("n0", 2),))
    s.apply(array("A", "0-11", None), T0)
    queue = PoolQueue(s.cluster, s.tree, "p", T0, {})
    assert [w.array_index for w in queue.ordered] == list(range(12))
    assert queue.considered == 12


# -- the property ----------------------------------------------------------------------------------
@dataclass(frozen=True)
class Plan:
    nodes: tuple[int, ...]
    #: (count, limit, gpus, min_runtime_s) per array
    arrays: tuple[tuple[int, int, int, int], ...]
    #: Per step: seconds since the previous, and an operation.
    steps: tuple[tuple[int, str, int], ...]
    durations: tuple[int, ...]


plans = st.builds(
    Plan,
    nodes=st.lists(st.sampled_from([1, 2, 4]), min_size=1, max_size=3).map(tuple),
    arrays=st.lists(
        st.tuples(
            st.integers(1, 12), st.integers(1, 4), st.integers(1, 2), st.sampled_from([0, 600])
        ),
        min_size=1,
        max_size=3,
    ).map(tuple),
    steps=st.lists(
        st.tuples(
            st.sampled_from([5, 40, 300]),
            st.sampled_from(["pass", "pass", "cancel", "down", "up", "rival"]),
            st.integers(0, 40),
        ),
        min_size=3,
        max_size=25,
    ).map(tuple),
    durations=st.lists(st.sampled_from([30, 200, 900]), min_size=1, max_size=5).map(tuple),
)


def _gates_of(cluster: ClusterState) -> dict[str, tuple[int, list[object], list[object]]]:
    return {
        array_id: (gate.running, list(gate.queued), list(gate.held))
        for array_id, gate in sorted(cluster.indexes.gates.items())
    }


def _within_limits(cluster: ClusterState, limits: dict[str, int]) -> None:
    for array_id, limit in limits.items():
        running = active(cluster, array_id)
        assert len(running) <= limit, (array_id, running)
        gate = cluster.indexes.gates[array_id]
        assert gate.running == len(running)
        pending = sorted(
            w.queue_key()
            for w in cluster.workloads.values()
            if w.array_id == array_id and w.status == "pending"
        )
        # the first pending ones, as many as may still start, are in the queues; no other
        assert list(gate.queued) == pending[: max(0, limit - len(running))]
        assert sorted([*gate.queued, *gate.held]) == pending


@settings(
    max_examples=80, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow]
)
@given(plans)
def test_never_more_than_k_elements_run_and_a_replay_has_the_same_queues(plan: Plan) -> None:
    nodes = tuple((f"n{i}", gpus) for i, gpus in enumerate(plan.nodes))
    s = Scenario(budgets=(("a", 1.0), ("b", 2.0)), nodes=nodes)
    log: list[tuple[EventData, float]] = [
        (
            NodeRegistered(node=name, cluster=CLUSTER, pool="p", gpus=gpus, gpu_type="h100"),
            T0 - 3600,
        )
        for name, gpus in nodes
    ]

    def apply(data: EventData, at: float) -> None:
        s.apply(data, at)
        log.append((data, at))

    limits: dict[str, int] = {}
    agent = Agent(s.cluster, {})
    for k, (count, limit, gpus, runtime) in enumerate(plan.arrays):
        apply(array(f"A{k}", f"0-{count - 1}", limit, gpus=gpus, min_runtime_s=runtime), T0)
        limits[f"A{k}"] = limit
        for i in range(count):
            agent.remaining[f"A{k}_{i}"] = float(plan.durations[(i + k) % len(plan.durations)])
    now = T0
    for step, (dt, operation, target) in enumerate(plan.steps):
        now += dt
        agent.advance(now, apply)
        _operate(s, apply, agent, operation, target, now, step)
        result = run_pass(
            s.cluster, s.tree, lambda _pool: {"a": 1e6}, PassContext(now=now), s.memos
        )
        log.extend((data, fold_instant(now)) for data in result.ordered)
        agent.act(result, now)
        _within_limits(s.cluster, limits)
    replayed = ClusterState()
    for data, at in log:
        replayed.apply(data, at)
    assert snapshot(replayed) == snapshot(s.cluster)
    assert _gates_of(replayed) == _gates_of(s.cluster)


def _operate(
    s: Scenario,
    apply: Callable[[EventData, float], None],
    agent: Agent,
    operation: str,
    target: int,
    now: float,
    step: int,
) -> None:
    """Cancel some workload, take a node down or bring it up, or submit a rival of a budget
    ranking ahead (it preempts elements past their contracts, or burst ones)."""
    names = sorted(s.cluster.workloads)
    if operation == "cancel":
        apply(WorkloadCancelled(workload_id=names[target % len(names)], cancelled_by="t"), now)
    elif operation in ("down", "up"):
        node = f"n{target % len(s.cluster.nodes)}"
        apply(NodeDown(node=node) if operation == "down" else NodeUp(node=node), now)
    elif operation == "rival":
        agent.remaining[f"r{step}"] = 100.0
        rival = WorkloadSubmitted(
            workload_id=f"r{step}",
            budget="b",
            pools=("p",),
            gpus=1 + target % 4,
            min_runtime_s=600,
            submitter="rival",
        )
        apply(rival, now)


def test_finishing_every_element_leaves_the_gate_empty() -> None:
    s = Scenario(nodes=(("n0", 4),))
    s.apply(array("A", "0-4", 2), T0)
    now = T0
    for _ in range(5):
        now += 10
        for workload_id in placed_ids(s.run(now)):
            s.start(workload_id, now)
            s.apply(
                WorkloadFinished(workload_id=workload_id, attempt=1, outcome="succeeded"), now + 1
            )
    gate = s.cluster.indexes.gates["A"]
    assert (gate.running, list(gate.queued), list(gate.held), gate.pending) == (0, [], [], {})
    assert {w.status for w in s.cluster.workloads.values()} == {"succeeded"}


def test_audit_decisions_re_derives_every_pass_of_a_throttled_array() -> None:
    """A log written as the scheduler service writes it (its passes on the live fold, each
    decision folded as it is made and read back as its own), with two throttled arrays whose
    elements end, fail and are cancelled: the audit re-runs each pass and finds it the same."""
    state, log = LiveState(), []

    def fact(data: EventData, at: float) -> None:
        envelope = new_event(data, source="tests", time=datetime.fromtimestamp(at, UTC))
        state.apply(envelope)
        log.append(envelope)

    for budget in ("a", "b"):
        fact(BudgetCreated(budget=budget, created_by="admin"), T0 - 60)
    for name in ("n0", "n1"):
        fact(NodeRegistered(node=name, cluster=CLUSTER, pool="p", gpus=2, gpu_type="h"), T0 - 60)
    fact(array("A", "0-9", 2, min_runtime_s=0), T0)
    fact(array("B", "0-29:3", 3, budget="b", gpus=1), T0 + 1)
    agent, memos = Agent(state.cluster, {}), PassMemos()
    agent.remaining.update({w: 30.0 + 17 * (i % 3) for i, w in enumerate(state.cluster.workloads)})
    now = T0 + 2
    for step in range(1, 30):
        now += 20
        agent.advance(now, fact)
        if step == 5:
            fact(WorkloadCancelled(workload_id="B_9", cancelled_by="t"), now)
        result = run_pass(
            state.cluster,
            state.tree,
            state.usage_source(now),
            PassContext(now=now, pass_id=step),
            memos,
        )
        for data in result.ordered:
            envelope = new_event(data, source=SOURCE, time=datetime.fromtimestamp(now, UTC))
            state.record_own(envelope)
            log.append(envelope)
        agent.act(result, now)
    assert {w.status for w in state.cluster.workloads.values()} <= {"succeeded", "cancelled"}
    audit = audit_decisions(log)
    assert audit.passes > 10
    assert audit.problems == []
    # The throttle is re-derived, not trusted: a log that says A allowed one at a time does
    # not check out against passes that ran two.
    first = next(i for i, e in enumerate(log) if isinstance(e.data, WorkloadArraySubmitted))
    tighter = log[first].data.model_copy(update={"max_running": 1})
    forged = [*log[:first], log[first].model_copy(update={"data": tighter}), *log[first + 1 :]]
    assert audit_decisions(forged).problems
