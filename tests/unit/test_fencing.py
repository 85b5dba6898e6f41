"""Fencing tokens: a command of a deposed leader (an epoch below one already seen on a command
for its cluster and pool) changes nothing, in the cluster fold, in the composition every service
reads, and in an agent. The mark is per pool, so leaders of different pools (a lease per pool)
never fence each other."""

from __future__ import annotations

from typing import Any

import pytest

from events.models import (
    NodeGpus,
    NodeRegistered,
    PlaceCommand,
    Placement,
    PreemptCommand,
    WorkloadPlaced,
    WorkloadPreempted,
    WorkloadStarted,
    WorkloadSubmitted,
)
from events.models.commands import DecisionRecord
from projections.cluster_state import ClusterState, FencedCommandError, MissingClusterFactError
from projections.live_state import LiveState
from scheduling.scheduling_pass import PassContext, run_pass
from tests.unit.scheduling_fixtures import make_tree, place_commands
from tests.unit.test_agents import CLUSTER, NODE0, POOL, Harness, submit
from tests.unit.test_agents import decision as agent_decision

T = 1_790_000_000.0


def _decision(reason: Any = "fairshare") -> DecisionRecord:
    return DecisionRecord(pass_id=1, input_position=(), reason=reason)


def _placement(*gpus: int, node: str = "n0") -> Placement:
    return Placement(nodes=(NodeGpus(node=node, gpus=gpus),))


def place_command(
    workload: str, epoch: int, *gpus: int, cluster: str = "c1", pool: str = "p1"
) -> PlaceCommand:
    return PlaceCommand(
        command_id=f"place:{workload}:1",
        epoch=epoch,
        cluster=cluster,
        pool=pool,
        workload_id=workload,
        attempt=1,
        budget="lab/a",
        placement=_placement(*gpus, node="n0" if cluster == "c1" else "m0"),
        allocated=False,
        min_runtime_s=0,
        decision=_decision(),
    )


def placed(workload: str, *gpus: int) -> WorkloadPlaced:
    return WorkloadPlaced(
        workload_id=workload,
        attempt=1,
        pool="p1",
        placement=_placement(*gpus),
        allocated=False,
        command_id=f"place:{workload}:1",
    )


def preempt_command(
    workload: str, epoch: int, cluster: str = "c1", pool: str = "p1"
) -> PreemptCommand:
    return PreemptCommand(
        command_id=f"preempt:{workload}:1",
        epoch=epoch,
        cluster=cluster,
        pool=pool,
        workload_id=workload,
        attempt=1,
        requeue=True,
        decision=_decision("cancel"),
    )


def cluster_with(*workloads: str) -> ClusterState:
    cluster = ClusterState()
    cluster.apply(NodeRegistered(node="n0", cluster="c1", pool="p1", gpus=4, gpu_type="h"), T)
    cluster.apply(NodeRegistered(node="m0", cluster="c2", pool="p1", gpus=4, gpu_type="h"), T)
    for name in workloads:
        cluster.apply(
            WorkloadSubmitted(
                workload_id=name,
                budget="lab/a",
                pools=("p1",),
                gpus=1,
                min_runtime_s=0,
                submitter="bo",
            ),
            T,
        )
    return cluster


def running(cluster: ClusterState, workload: str, gpu: int, epoch: int) -> None:
    cluster.apply(place_command(workload, epoch, gpu), T)
    cluster.apply(placed(workload, gpu), T)
    cluster.apply(
        WorkloadStarted(
            workload_id=workload, attempt=1, pool="p1", placement=_placement(gpu), allocated=False
        ),
        T,
    )


# -- the fold ------------------------------------------------------------------------------------


def test_a_deposed_leaders_preempt_changes_nothing_and_is_counted() -> None:
    cluster = cluster_with("w1", "w2")
    running(cluster, "w1", 0, epoch=1)
    running(cluster, "w2", 1, epoch=2)  # the new leader's first command for c1
    with pytest.raises(FencedCommandError, match="epoch: 1 is below 2"):
        cluster.apply(preempt_command("w1", epoch=1), T + 5)
    w1 = cluster.workloads["w1"]
    assert (w1.status, w1.preempting) == ("running", False)
    assert cluster.nodes["n0"].assigned[0] == "w1"
    assert cluster.fenced_commands == 1
    cluster.apply(preempt_command("w1", epoch=2), T + 6)  # the current leader's is obeyed
    assert cluster.workloads["w1"].preempting


def test_equal_and_higher_epochs_pass_and_the_mark_is_per_cluster() -> None:
    cluster = cluster_with("w1", "w2", "w3")
    running(cluster, "w1", 0, epoch=0)  # a v1 command (epoch 0) before any lease: fine
    cluster.apply(place_command("w2", 3, 1), T)
    cluster.apply(preempt_command("w1", epoch=3), T)  # same epoch: fine
    assert cluster.workloads["w1"].preempting
    cluster.apply(place_command("w3", 1, 0, cluster="c2"), T)  # another cluster's mark
    assert cluster.command_epochs == {("c1", "p1"): 3, ("c2", "p1"): 1}
    assert cluster.fenced_commands == 0


def test_the_mark_is_per_pool_so_leaders_of_other_pools_never_fence_each_other() -> None:
    """A lease per pool: pool p2's leader is at epoch 9, p1's at 1; both are obeyed. Within a
    pool, the deposed leader is still refused."""
    cluster = cluster_with("w1", "w2")
    cluster.apply(preempt_command("w9", epoch=9, pool="p2"), T)  # p2's leader, epoch 9
    running(cluster, "w1", 0, epoch=1)  # p1's leader, epoch 1: not below p2's mark
    assert cluster.workloads["w1"].status == "running"
    assert cluster.command_epochs == {("c1", "p2"): 9, ("c1", "p1"): 1}
    running(cluster, "w2", 1, epoch=2)  # p1 taken over: epoch 2
    with pytest.raises(FencedCommandError, match=r"epoch: 1 is below 2.*pool p1"):
        cluster.apply(preempt_command("w1", epoch=1), T + 5)
    with pytest.raises(FencedCommandError, match=r"epoch: 8 is below 9.*pool p2"):
        cluster.apply(preempt_command("w1", epoch=8, pool="p2"), T + 5)
    assert not cluster.workloads["w1"].preempting
    assert cluster.fenced_commands == 2


def test_a_deposed_leaders_placement_read_after_its_command_places_nothing() -> None:
    cluster = cluster_with("w1", "w2")
    running(cluster, "w2", 1, epoch=2)
    with pytest.raises(FencedCommandError):
        cluster.apply(place_command("w1", 1, 0), T)
    with pytest.raises(MissingClusterFactError, match="deposed leader"):
        cluster.apply(placed("w1", 0), T)
    assert cluster.workloads["w1"].status == "pending"
    assert 0 not in cluster.nodes["n0"].assigned
    # The current leader places it (the same derived command id): that placement applies.
    cluster.apply(place_command("w1", 2, 2), T + 1)
    cluster.apply(placed("w1", 2), T + 1)
    assert cluster.workloads["w1"].placement == (("n0", (2,)),)


def test_a_deposed_leaders_placement_read_before_its_command_is_undone() -> None:
    cluster = cluster_with("w1", "w2")
    running(cluster, "w2", 1, epoch=2)
    cluster.apply(placed("w1", 0), T)  # on the workloads topic: read first
    assert cluster.workloads["w1"].status == "placed"
    with pytest.raises(FencedCommandError):
        cluster.apply(place_command("w1", 1, 0), T)
    w1 = cluster.workloads["w1"]
    assert (w1.status, w1.placement) == ("pending", ())
    assert 0 not in cluster.nodes["n0"].assigned
    assert "w1" not in cluster.nodes["n0"].holders


def test_the_composition_does_not_record_a_fenced_command_as_issued() -> None:
    """So an agent never finds a deposed leader's preempt among the commands, and the current
    leader's command with the same derived id is not taken for a repeat of it."""
    from events.envelope import new_event
    from events.times import utc_from_epoch

    state = LiveState()

    def fold(data: Any, epoch_id: int = 0) -> bool:
        return state.apply(new_event(data, source=f"t{epoch_id}", time=utc_from_epoch(T)))

    for data in (
        NodeRegistered(node="n0", cluster="c1", pool="p1", gpus=4, gpu_type="h"),
        WorkloadSubmitted(
            workload_id="w1", budget="lab/a", pools=("p1",), gpus=1, min_runtime_s=0, submitter="bo"
        ),
        WorkloadSubmitted(
            workload_id="w2", budget="lab/a", pools=("p1",), gpus=1, min_runtime_s=0, submitter="bo"
        ),
        place_command("w2", 2, 1),
        placed("w2", 1),
        place_command("w1", 2, 0),
        placed("w1", 0),
    ):
        assert fold(data)
    assert not fold(preempt_command("w1", epoch=1), 1)
    assert "preempt:w1:1" not in state.command_ids
    assert [r.command.command_id for r in state.commands["w1"]] == ["place:w1:1"]
    assert [r.reason for r in state.rejected if "deposed" in r.reason] != []
    assert fold(preempt_command("w1", epoch=2), 2)
    assert state.cluster.workloads["w1"].preempting


def test_the_pass_stamps_its_epoch_on_every_command() -> None:
    cluster = cluster_with("w1", "w2")
    tree = make_tree([("lab", 1.0), ("lab/a", 1.0)])
    result = run_pass(cluster, tree, lambda pool: {}, PassContext(now=T, epoch=7))
    assert len(result.commands) == 2, "both placed"
    assert {command.epoch for command in result.commands} == {7}  # type: ignore[attr-defined]


def test_with_a_lease_per_pool_each_command_carries_its_pools_epoch() -> None:
    cluster = cluster_with()
    cluster.apply(NodeRegistered(node="k0", cluster="c1", pool="p2", gpus=4, gpu_type="h"), T)
    for name, pool in (("w1", "p1"), ("w2", "p2")):
        cluster.apply(
            WorkloadSubmitted(
                workload_id=name, budget="lab/a", pools=(pool,), gpus=1, min_runtime_s=0,
                submitter="bo",
            ),
            T,
        )  # fmt: skip
    tree = make_tree([("lab", 1.0), ("lab/a", 1.0)])
    ctx = PassContext(now=T, epoch=4, pools=frozenset({"p1", "p2"}), pool_epochs={"p1": 3, "p2": 4})
    result = run_pass(cluster, tree, lambda pool: {}, ctx)
    stamped = {(c.workload_id, c.pool, c.epoch) for c in place_commands(result)}
    assert stamped == {("w1", "p1", 3), ("w2", "p2", 4)}


# -- the agent -----------------------------------------------------------------------------------


def _agent_place(h: Harness, workload: str, gpu: int, epoch: int) -> None:
    placement = Placement(nodes=(NodeGpus(node=NODE0, gpus=(gpu,)),))
    h.publish(
        PlaceCommand(
            command_id=f"place:{workload}:1",
            epoch=epoch,
            cluster=CLUSTER,
            pool=POOL,
            workload_id=workload,
            attempt=1,
            budget="lab/a",
            placement=placement,
            allocated=False,
            min_runtime_s=0,
            decision=agent_decision(),
        )
    )
    h.publish(
        WorkloadPlaced(
            workload_id=workload,
            attempt=1,
            pool=POOL,
            placement=placement,
            allocated=False,
            command_id=f"place:{workload}:1",
        )
    )


def _agent_preempt(h: Harness, workload: str, epoch: int) -> None:
    h.publish(
        PreemptCommand(
            command_id=f"preempt:{workload}:1",
            epoch=epoch,
            cluster=CLUSTER,
            pool=POOL,
            workload_id=workload,
            attempt=1,
            requeue=True,
            decision=agent_decision("preempt-for"),
        )
    )


def test_an_agent_ignores_a_deposed_leaders_preempt_and_place() -> None:
    h = Harness()
    submit(h, "w1")  # runs until stopped
    submit(h, "w2")
    submit(h, "w3")
    _agent_place(h, "w1", 0, epoch=1)
    h.tick()
    _agent_place(h, "w2", 1, epoch=2)  # a takeover: the new leader's first command
    h.tick()
    assert {h.status("w1"), h.status("w2")} == {"running"}
    _agent_preempt(h, "w1", epoch=1)  # the old leader wakes up from a stall
    _agent_place(h, "w3", 2, epoch=1)
    h.tick(5)
    h.tick(60)
    assert h.status("w1") == "running", "a deposed leader's preempt stops nothing"
    assert h.status("w3") == "pending", "a deposed leader's placement starts nothing"
    assert h.agent.fenced_commands == 2
    assert sorted(h.agent.runs) == ["w1", "w2"]
    assert h.facts(WorkloadPreempted) == []
