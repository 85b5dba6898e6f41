"""The cluster state fold: nodes, workloads, the assigned/physical GPU views, and stale events."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from events.envelope import new_event
from events.models import (
    BudgetCreated,
    GpuHeartbeat,
    GpuReading,
    NodeCordoned,
    NodeDown,
    NodeDrained,
    NodeRegistered,
    NodeUncordoned,
    NodeUp,
    PreemptCommand,
    WorkloadCancelled,
    WorkloadFinished,
    WorkloadLost,
    WorkloadPlaced,
    WorkloadPreempted,
    WorkloadRequeued,
    WorkloadStarted,
    WorkloadSubmitted,
)
from events.models.commands import DecisionRecord
from projections.cluster_state import ClusterStateError
from scheduling.placement import largest_node
from tests.unit.scheduling_fixtures import T0, Scenario, shape, snapshot, utc


def scenario(**kwargs: object) -> Scenario:
    kwargs.setdefault("nodes", (("n0", 4), ("n1", 4)))
    return Scenario(**kwargs)  # type: ignore[arg-type]


def preempt_command(workload_id: str, attempt: int = 1, reason: str = "drain") -> PreemptCommand:
    return PreemptCommand(
        command_id=f"preempt:{workload_id}:{attempt}",
        cluster="c1",
        pool="p",
        workload_id=workload_id,
        attempt=attempt,
        requeue=True,
        decision=DecisionRecord(pass_id=1, input_position=(), reason=reason),  # type: ignore[arg-type]
    )


def placed_event(
    workload_id: str, node: str, gpus: tuple[int, ...], attempt: int = 1
) -> WorkloadPlaced:
    return WorkloadPlaced(
        workload_id=workload_id,
        attempt=attempt,
        pool="p",
        placement=shape(((node, gpus),)),
        allocated=True,
        command_id=f"place:{workload_id}:{attempt}",
    )


# -- nodes -----------------------------------------------------------------------------------------
def test_registered_nodes_give_capacity_and_index_by_free_gpus() -> None:
    s = scenario(nodes=(("n0", 4), ("n1", 8)))
    assert s.cluster.capacity("p") == 12
    assert s.cluster.capacity("other") == 0
    index = s.cluster.pools["p"]
    assert index.max_free() == 8
    assert index.best_fit(3) == "n0"  # fewest free GPUs that suffice
    assert index.best_fit(5) == "n1"
    assert index.best_fit(9) is None


def test_the_largest_node_of_a_pool_counts_every_node_it_ever_registered() -> None:
    """Kept by the fold (every pass, why-pending answer and start estimate asks for it, and
    scanning the nodes cost each of them the cluster's size); a down node still counts."""
    s = scenario(nodes=(("n0", 4), ("n1", 8)))
    s.apply(NodeRegistered(node="q0", cluster="c1", pool="q", gpus=16, gpu_type="h100"), T0)
    assert largest_node(s.cluster, "p") == 8
    assert largest_node(s.cluster, "q") == 16
    assert largest_node(s.cluster, "none") == 0
    s.apply(NodeDown(node="n1", last_heartbeat=utc(T0 - 60)), T0)
    s.apply(NodeCordoned(node="n0", cordoned_by="ops"), T0)
    assert largest_node(s.cluster, "p") == 8
    assert largest_node(s.cluster, "p") == max(
        n.gpus for n in s.cluster.nodes.values() if n.pool == "p"
    )


def test_re_registering_a_node_is_idempotent_but_not_with_another_shape() -> None:
    s = scenario()
    before = snapshot(s.cluster)
    s.apply(NodeRegistered(node="n0", cluster="c1", pool="p", gpus=4, gpu_type="h100"), T0)
    assert snapshot(s.cluster)["index"] == before["index"]
    assert s.cluster.capacity("p") == 8
    with pytest.raises(ClusterStateError, match="re-registered"):
        s.apply(NodeRegistered(node="n0", cluster="c1", pool="p", gpus=8, gpu_type="h100"), T0)
    with pytest.raises(ClusterStateError, match="re-registered"):
        s.apply(NodeRegistered(node="n0", cluster="c1", pool="q", gpus=4, gpu_type="h100"), T0)


def test_cordon_removes_the_node_from_placement_but_not_from_capacity() -> None:
    s = scenario()
    s.apply(NodeCordoned(node="n0", cordoned_by="ops"), T0)
    assert s.cluster.indexes.cordoned_nodes == {"n0"}
    assert s.cluster.capacity("p") == 8
    assert s.cluster.pools["p"].nodes_with_free(4) == ["n1"]
    assert not s.cluster.nodes["n0"].schedulable
    s.apply(NodeUncordoned(node="n0", uncordoned_by="ops"), T0 + 1)
    assert s.cluster.indexes.cordoned_nodes == set()
    assert list(s.cluster.pools["p"].nodes_with_free(4)) == ["n0", "n1"]


def test_uncordon_reindexes_the_node_with_its_current_free_count() -> None:
    s = scenario()
    s.running("w", "a", (("n0", (0, 1, 2)),), started_at=T0)
    s.apply(NodeCordoned(node="n0", cordoned_by="ops"), T0 + 1)
    s.apply(NodeUncordoned(node="n0", uncordoned_by="ops"), T0 + 2)
    index = s.cluster.pools["p"]
    assert list(index.nodes_with_free(1)) == ["n0"]
    assert list(index.nodes_with_free(4)) == ["n1"]
    assert index.best_fit(1) == "n0"


def test_down_node_leaves_capacity_and_placement_until_up() -> None:
    s = scenario()
    s.apply(NodeDown(node="n1", last_heartbeat=utc(T0 - 60)), T0)
    assert s.cluster.indexes.down_nodes == {"n1"}
    assert s.cluster.capacity("p") == 4
    assert s.cluster.pools["p"].best_fit(4) == "n0"
    assert s.cluster.nodes["n1"].last_heartbeat == T0 - 60
    s.apply(NodeDown(node="n1"), T0 + 1)  # a repeated report changes nothing
    assert s.cluster.capacity("p") == 4
    s.apply(NodeUp(node="n1"), T0 + 100)
    assert s.cluster.indexes.down_nodes == set()
    assert s.cluster.capacity("p") == 8
    assert s.cluster.nodes["n1"].last_heartbeat == T0 + 100


def test_a_cordoned_node_that_comes_back_up_stays_cordoned() -> None:
    s = scenario()
    s.apply(NodeCordoned(node="n0", cordoned_by="ops"), T0)
    s.apply(NodeDown(node="n0"), T0 + 1)
    assert s.cluster.capacity("p") == 4
    s.apply(NodeUp(node="n0"), T0 + 2)
    assert s.cluster.capacity("p") == 8
    assert s.cluster.indexes.cordoned_nodes == {"n0"}
    assert list(s.cluster.pools["p"].nodes_with_free(4)) == ["n1"]


def test_drained_flag_is_reset_by_a_new_cordon_and_by_a_placement() -> None:
    s = scenario()
    s.apply(NodeCordoned(node="n0", cordoned_by="ops"), T0)
    s.apply(NodeDrained(node="n0"), T0 + 1)
    assert s.cluster.nodes["n0"].drained
    s.apply(NodeCordoned(node="n0", cordoned_by="ops"), T0 + 2)
    assert not s.cluster.nodes["n0"].drained
    s.apply(NodeDrained(node="n0"), T0 + 3)
    s.apply(NodeUncordoned(node="n0", uncordoned_by="ops"), T0 + 4)
    assert not s.cluster.nodes["n0"].drained


def test_events_about_unknown_nodes_are_refused() -> None:
    s = scenario()
    with pytest.raises(ClusterStateError, match="unknown node 'ghost'"):
        s.apply(NodeCordoned(node="ghost", cordoned_by="ops"), T0)
    with pytest.raises(ClusterStateError, match="unknown node 'ghost'"):
        s.apply(NodeDown(node="ghost"), T0)


def test_heartbeats_advance_node_and_holder_times_never_backwards() -> None:
    s = scenario()
    s.running("w", "a", (("n0", (0,)),), started_at=T0)
    beat = GpuHeartbeat(
        node="n0",
        cluster="c1",
        sequence=1,
        gpus=(
            GpuReading(index=0, occupant="w", attempt=1, utilisation_pct=90, memory_used_bytes=1),
        ),
    )
    s.apply(beat, T0 + 60)
    assert s.cluster.nodes["n0"].last_heartbeat == T0 + 60
    assert s.cluster.workloads["w"].last_heartbeat == T0 + 60
    s.apply(beat, T0 + 30)  # a late duplicate
    assert s.cluster.nodes["n0"].last_heartbeat == T0 + 60
    s.apply(beat.model_copy(update={"node": "ghost"}), T0 + 90)  # unknown node: ignored
    assert s.cluster.nodes["n0"].last_heartbeat == T0 + 60


# -- submit ----------------------------------------------------------------------------------------
def test_submit_is_idempotent_by_client_id() -> None:
    s = scenario()
    s.submit("w", "a", gpus=2, at=T0)
    before = snapshot(s.cluster)
    s.submit("w", "b", gpus=4, min_runtime_s=0, at=T0 + 50)  # same id, other content
    assert snapshot(s.cluster) == before
    workload = s.cluster.workloads["w"]
    assert (workload.budget, workload.gpus, workload.submitted_at) == ("a", 2, T0)
    assert list(s.cluster.pending["p"]["a"][(True, 2, "single-node")]) == [(0, T0, -1, "w")]


def test_submit_after_the_workload_ended_does_not_revive_it() -> None:
    s = scenario()
    s.running("w", "a", (("n0", (0,)),), started_at=T0)
    s.finished("w", T0 + 100)
    s.submit("w", "a", at=T0 + 200)
    assert s.cluster.workloads["w"].status == "succeeded"
    assert not any(q for kinds in s.cluster.pending["p"].values() for q in kinds.values())


def test_submit_takes_its_time_from_the_envelope_in_epoch_seconds() -> None:
    """Every fold is told when a fact happened the same way: the envelope's epoch seconds."""
    s = scenario()
    submitted = new_event(
        WorkloadSubmitted(
            workload_id="w", budget="a", pools=("p",), gpus=1, min_runtime_s=0, submitter="u"
        ),
        source="test",
        time=datetime.fromtimestamp(T0 + 7, UTC),
    )
    s.cluster.apply(submitted.data, submitted.epoch_seconds)
    assert s.cluster.workloads["w"].submitted_at == T0 + 7
    assert not s.cluster.workloads["w"].allocated


def test_pending_queue_orders_by_priority_then_submit_time_then_id() -> None:
    s = scenario()
    s.submit("late-high", "a", at=T0 + 30, priority=5)
    s.submit("early", "a", at=T0 + 10)
    s.submit("b-same-time", "a", at=T0 + 20)
    s.submit("a-same-time", "a", at=T0 + 20)
    queue = s.cluster.pending["p"]["a"][(True, 1, "single-node")]
    assert [key[3] for key in queue] == ["late-high", "early", "a-same-time", "b-same-time"]


def test_multi_pool_workload_waits_in_every_pool_and_leaves_all_when_placed() -> None:
    s = scenario()
    s.add_node("q0", 4, pool="q")
    s.submit("w", "a", pools=("q", "p"))
    assert len(s.cluster.pending["p"]["a"][(True, 1, "single-node")]) == 1
    assert len(s.cluster.pending["q"]["a"][(True, 1, "single-node")]) == 1
    s.apply(
        WorkloadPlaced(
            workload_id="w",
            attempt=1,
            pool="q",
            placement=shape((("q0", (0,)),)),
            allocated=True,
            command_id="x",
        ),
        T0 + 1,
    )
    assert len(s.cluster.pending["p"]["a"][(True, 1, "single-node")]) == 0
    assert len(s.cluster.pending["q"]["a"][(True, 1, "single-node")]) == 0
    assert [w.workload_id for w in s.cluster.active_in("q")] == ["w"]
    assert list(s.cluster.active_in("p")) == []


# -- placement: GPUs are never assigned twice ------------------------------------------------------
def test_placement_assigns_gpus_and_holders() -> None:
    s = scenario()
    s.submit("w", "a", gpus=2)
    s.apply(placed_event("w", "n0", (1, 3)), T0 + 1)
    workload = s.cluster.workloads["w"]
    assert workload.status == "placed"
    assert workload.placed_at == T0 + 1
    node = s.cluster.nodes["n0"]
    assert node.assigned == {1: "w", 3: "w"}
    assert node.holders == {"w": (1, 3)}
    assert node.free == 2
    assert node.free_indices() == [0, 2]
    assert list(s.cluster.pools["p"].nodes_with_free(2)) == ["n0"]
    assert list(s.cluster.pending["p"]["a"][(True, 2, "single-node")]) == []


def test_placing_on_an_assigned_gpu_raises() -> None:
    s = scenario()
    s.submit("a1", "a", gpus=2)
    s.submit("b1", "b", gpus=2)
    s.apply(placed_event("a1", "n0", (0, 1)), T0 + 1)
    with pytest.raises(ClusterStateError, match="GPU 1 of n0 is already assigned to a1"):
        s.apply(placed_event("b1", "n0", (1, 2)), T0 + 2)


def test_a_refused_placement_leaves_the_state_unchanged() -> None:
    """The fold refuses the event (it goes to the dead-letter topic); the consumer carries on
    with a state that must not be half-changed: the workload still pending and queued, no GPU
    assigned to it, the node still indexed for placement."""
    s = scenario()
    s.submit("a1", "a", gpus=2)
    s.submit("b1", "b", gpus=2)
    s.apply(placed_event("a1", "n0", (0, 1)), T0 + 1)
    before = snapshot(s.cluster)
    with pytest.raises(ClusterStateError):
        s.apply(placed_event("b1", "n0", (2, 1)), T0 + 2)
    assert snapshot(s.cluster) == before


def test_placement_on_an_unknown_node_is_refused_without_changing_the_state() -> None:
    s = scenario()
    s.submit("w", "a", gpus=1)
    before = snapshot(s.cluster)
    with pytest.raises(ClusterStateError, match="unknown node 'ghost'"):
        s.apply(placed_event("w", "ghost", (0,)), T0 + 1)
    assert snapshot(s.cluster) == before


def test_placement_on_a_gpu_the_node_does_not_have_is_refused() -> None:
    s = scenario()
    s.submit("w", "a", gpus=2)
    before = snapshot(s.cluster)
    with pytest.raises(ClusterStateError, match="n0 has no GPU 4"):
        s.apply(placed_event("w", "n0", (3, 4)), T0 + 1)
    assert snapshot(s.cluster) == before


def test_placement_on_a_node_of_a_pool_the_workload_did_not_ask_for_is_refused() -> None:
    s = scenario()
    s.add_node("q0", 4, pool="q")
    s.submit("w", "a", gpus=1)  # pools=("p",)
    before = snapshot(s.cluster)
    with pytest.raises(ClusterStateError, match="q0 is in pool q"):
        s.apply(placed_event("w", "q0", (0,)), T0 + 1)
    assert snapshot(s.cluster) == before


def test_duplicate_and_stale_placements_are_ignored() -> None:
    s = scenario()
    s.submit("w", "a", gpus=1)
    s.apply(placed_event("w", "n0", (0,)), T0 + 1)
    before = snapshot(s.cluster)
    s.apply(placed_event("w", "n0", (0,)), T0 + 2)  # replayed duplicate
    s.apply(placed_event("w", "n1", (3,)), T0 + 3)  # another placement of the same attempt
    s.apply(placed_event("w", "n1", (3,), attempt=2), T0 + 4)  # of an attempt not yet begun
    assert snapshot(s.cluster) == before


# -- the assigned view vs the physical view --------------------------------------------------------
def test_preempt_command_frees_the_assignment_but_not_the_physical_gpus() -> None:
    s = scenario()
    s.running("victim", "a", (("n0", (0, 1, 2, 3)),), started_at=T0)
    s.apply(preempt_command("victim"), T0 + 10)
    node = s.cluster.nodes["n0"]
    assert node.assigned == {}
    assert node.holders == {"victim": (0, 1, 2, 3)}
    assert s.cluster.workloads["victim"].preempting
    assert s.cluster.workloads["victim"].status == "running"
    # The preemptor may take the GPUs at once; it starts when the victim has exited.
    s.submit("preemptor", "b", gpus=4)
    s.apply(placed_event("preemptor", "n0", (0, 1, 2, 3)), T0 + 10)
    assert node.assigned == dict.fromkeys(range(4), "preemptor")
    assert set(node.holders) == {"victim", "preemptor"}
    s.preempted("victim", T0 + 40)
    # The victim's end releases only what is still its own.
    assert node.assigned == dict.fromkeys(range(4), "preemptor")
    assert node.holders == {"preemptor": (0, 1, 2, 3)}
    assert s.cluster.workloads["victim"].status == "preempted"


def test_duplicate_or_stale_preempt_commands_change_nothing() -> None:
    s = scenario()
    s.running("w", "a", (("n0", (0,)),), started_at=T0)
    s.apply(preempt_command("w", attempt=2), T0 + 1)  # names another run
    assert not s.cluster.workloads["w"].preempting
    assert s.cluster.nodes["n0"].assigned == {0: "w"}
    s.apply(preempt_command("w"), T0 + 2)
    before = snapshot(s.cluster)
    s.apply(preempt_command("w"), T0 + 3)
    s.apply(preempt_command("ghost"), T0 + 3)  # unknown workload: nothing to stop
    assert snapshot(s.cluster) == before


def test_started_sets_the_contract_clock_only_for_the_current_placed_attempt() -> None:
    s = scenario()
    s.submit("w", "a", gpus=1, min_runtime_s=600)
    s.apply(placed_event("w", "n0", (0,)), T0 + 1)
    workload = s.cluster.workloads["w"]
    assert workload.ran_s(T0 + 500) == 0.0
    assert not workload.contract_over(T0 + 10_000)  # never started: no contract clock
    started = WorkloadStarted(
        workload_id="w", attempt=2, pool="p", placement=shape((("n0", (0,)),)), allocated=True
    )
    s.apply(started, T0 + 5)  # stale attempt
    assert workload.status == "placed"
    s.apply(started.model_copy(update={"attempt": 1}), T0 + 10)
    assert workload.status == "running"
    assert workload.started_at == T0 + 10
    s.apply(started.model_copy(update={"attempt": 1}), T0 + 99)  # duplicate
    assert workload.started_at == T0 + 10
    assert workload.ran_s(T0 + 310) == 300.0
    assert not workload.contract_over(T0 + 609)
    assert workload.contract_over(T0 + 610)


# -- ends, requeues, stale events ------------------------------------------------------------------
def test_preempted_resumable_work_awaits_requeue_and_keeps_its_submit_time() -> None:
    s = scenario()
    s.submit("w", "a", gpus=2, at=T0 - 500, priority=3)
    s.apply(placed_event("w", "n0", (0, 1)), T0)
    s.start("w", T0 + 1)
    s.apply(preempt_command("w"), T0 + 700)
    s.preempted("w", T0 + 730)
    workload = s.cluster.workloads["w"]
    assert workload.status == "preempted"
    assert s.cluster.awaiting_requeue == {"w"}
    assert s.cluster.nodes["n0"].holders == {}
    assert s.cluster.nodes["n0"].assigned == {}
    s.apply(
        WorkloadRequeued(
            workload_id="w", attempt=1, original_submit_time=utc(T0 - 500), reason="preempted"
        ),
        T0 + 731,
    )
    assert workload.status == "pending"
    assert workload.attempt == 2
    assert workload.submitted_at == T0 - 500
    assert workload.placement == ()
    assert workload.started_at is None
    assert s.cluster.awaiting_requeue == set()
    assert list(s.cluster.pending["p"]["a"][(True, 2, "single-node")]) == [(-3, T0 - 500, -1, "w")]


def test_non_resumable_preempted_work_is_not_requeued() -> None:
    s = scenario()
    s.running("w", "a", (("n0", (0,)),), started_at=T0, resumable=False)
    s.apply(preempt_command("w"), T0 + 700)
    s.preempted("w", T0 + 730)
    assert s.cluster.workloads["w"].status == "preempted"
    assert s.cluster.awaiting_requeue == set()


def test_stale_requeue_finish_and_lost_of_an_earlier_attempt_are_ignored() -> None:
    s = scenario()
    s.running("w", "a", (("n0", (0,)),), started_at=T0)
    s.apply(preempt_command("w"), T0 + 700)
    s.preempted("w", T0 + 730)
    requeued = WorkloadRequeued(
        workload_id="w", attempt=1, original_submit_time=utc(T0 - 10), reason="preempted"
    )
    s.apply(requeued, T0 + 731)
    s.apply(placed_event("w", "n1", (2,), attempt=2), T0 + 732)
    s.start("w", T0 + 733)
    before = snapshot(s.cluster)
    s.apply(requeued, T0 + 740)  # duplicate of the first requeue
    s.apply(WorkloadFinished(workload_id="w", attempt=1, outcome="failed"), T0 + 741)
    s.apply(WorkloadPreempted(workload_id="w", attempt=1, command_id="x", ran_s=700), T0 + 742)
    s.apply(WorkloadLost(workload_id="w", attempt=1, node="n0", last_heartbeat=utc(T0)), T0 + 743)
    s.apply(preempt_command("w", attempt=1), T0 + 744)
    assert snapshot(s.cluster) == before
    assert s.cluster.workloads["w"].status == "running"
    assert s.cluster.workloads["w"].attempt == 2


def test_requeue_of_a_workload_that_did_not_end_is_ignored() -> None:
    s = scenario()
    s.running("w", "a", (("n0", (0,)),), started_at=T0)
    before = snapshot(s.cluster)
    s.apply(
        WorkloadRequeued(
            workload_id="w", attempt=1, original_submit_time=utc(T0), reason="preempted"
        ),
        T0 + 1,
    )
    assert snapshot(s.cluster) == before


def test_finished_releases_everything_and_is_terminal() -> None:
    s = scenario()
    s.running("w", "a", (("n0", (0, 1)),), started_at=T0)
    s.apply(WorkloadFinished(workload_id="w", attempt=1, outcome="failed", exit_code=1), T0 + 9)
    workload = s.cluster.workloads["w"]
    assert workload.status == "failed"
    assert s.cluster.nodes["n0"].assigned == {}
    assert s.cluster.nodes["n0"].holders == {}
    assert list(s.cluster.active_in("p")) == []
    assert s.cluster.awaiting_requeue == set()
    assert s.cluster.pools["p"].best_fit(4) == "n0"


def test_lost_work_is_requeued_only_if_resumable() -> None:
    s = scenario()
    s.running("r", "a", (("n0", (0,)),), started_at=T0)
    s.running("x", "a", (("n0", (1,)),), started_at=T0, resumable=False)
    for wid in ("r", "x"):
        s.apply(WorkloadLost(workload_id=wid, attempt=1, node="n0", last_heartbeat=utc(T0)), T0 + 5)
    assert s.cluster.workloads["r"].status == "lost"
    assert s.cluster.workloads["x"].status == "lost"
    assert s.cluster.awaiting_requeue == {"r"}


# -- cancel ----------------------------------------------------------------------------------------
def test_cancel_of_pending_work_removes_it_from_the_queue() -> None:
    s = scenario()
    s.submit("w", "a")
    s.apply(WorkloadCancelled(workload_id="w", cancelled_by="tester"), T0 + 1)
    assert s.cluster.workloads["w"].status == "cancelled"
    assert list(s.cluster.pending["p"]["a"][(True, 1, "single-node")]) == []
    assert s.cluster.indexes.cancelling == set()


def test_cancel_of_running_work_waits_for_its_end_and_never_requeues_it() -> None:
    s = scenario()
    s.running("w", "a", (("n0", (0,)),), started_at=T0)
    s.apply(WorkloadCancelled(workload_id="w", cancelled_by="tester"), T0 + 1)
    workload = s.cluster.workloads["w"]
    assert workload.status == "running"
    assert workload.cancel_requested
    assert s.cluster.indexes.cancelling == {"w"}
    s.apply(preempt_command("w", reason="cancel"), T0 + 2)
    s.preempted("w", T0 + 30)
    assert workload.status == "cancelled"
    assert s.cluster.indexes.cancelling == set()
    assert s.cluster.awaiting_requeue == set()


def test_cancel_of_an_unknown_workload_is_refused() -> None:
    with pytest.raises(ClusterStateError, match="unknown workload 'ghost'"):
        scenario().apply(WorkloadCancelled(workload_id="ghost", cancelled_by="u"), T0)


def test_events_the_fold_does_not_use_are_ignored() -> None:
    s = scenario()
    before = snapshot(s.cluster)
    version = s.cluster.version
    s.apply(BudgetCreated(budget="lab", created_by="ana"), T0)
    assert snapshot(s.cluster) == before
    assert s.cluster.version == version + 1
