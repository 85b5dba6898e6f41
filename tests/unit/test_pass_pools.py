"""The pass restricted to the pools its scheduler leads (``PassContext.pools``, a lease per
pool): it decides nothing about another pool's nodes, runs or pending work, and a workload
listing several pools is placed only by the leader of the first one it lists."""

from __future__ import annotations

from typing import Any

from events.models import (
    NodeCordoned,
    NodeDown,
    NodeDrained,
    WorkloadCancelled,
    WorkloadLost,
    WorkloadPlaced,
    WorkloadRequeued,
    WorkloadStarted,
)
from tests.unit.scheduling_fixtures import (
    T0,
    Scenario,
    of_type,
    place_commands,
    placed_ids,
    placements,
    preempt_commands,
    shape,
    snapshot,
)

P1 = frozenset({"p1"})
BOTH = frozenset({"p1", "p2"})


def run_in(
    s: Scenario,
    workload_id: str,
    budget: str,
    node: str,
    gpus: tuple[int, ...],
    pool: str,
    pools: tuple[str, ...],
    min_runtime_s: int = 60,
    **fields: Any,
) -> None:
    """Submitted listing ``pools``, placed on ``node`` in ``pool``, started at ``T0``."""
    s.submit(workload_id, budget, len(gpus), min_runtime_s, T0 - 10, pools=pools, **fields)
    placement = shape(((node, gpus),))
    attempt = s.cluster.workloads[workload_id].attempt
    common: dict[str, Any] = {"workload_id": workload_id, "attempt": attempt, "pool": pool}
    allocated = min_runtime_s > 0
    s.apply(
        WorkloadPlaced(
            **common, placement=placement, allocated=allocated, command_id=f"m:{workload_id}"
        ),
        T0 - 5,
    )
    s.apply(WorkloadStarted(**common, placement=placement, allocated=allocated), T0)


def two_pools() -> Scenario:
    """``n1`` (4 GPUs) in p1, ``n2`` (4 GPUs) in p2."""
    s = Scenario(nodes=(), pool="p1")
    s.add_node("n1", 4, "p1")
    s.add_node("n2", 4, "p2")
    return s


def test_without_pools_or_with_every_pool_the_pass_decides_the_same() -> None:
    runs = []
    for pools in (None, BOTH):
        s = two_pools()
        s.submit("a1", "a", gpus=2, min_runtime_s=3600, pools=("p1",))
        s.submit("b1", "b", gpus=2, min_runtime_s=3600, pools=("p2",))
        s.submit("a2", "a", gpus=1, pools=("p2", "p1"), at=T0 + 1)  # debug lane work
        result = s.run(T0 + 10, pools=pools, pool_epochs=None if pools is None else {})
        runs.append((result.ordered, snapshot(s.cluster)))
    assert runs[0] == runs[1]


def test_only_the_led_pools_pending_work_is_placed() -> None:
    s = two_pools()
    s.submit("a1", "a", gpus=2, min_runtime_s=3600, pools=("p1",))
    s.submit("b1", "b", gpus=2, min_runtime_s=3600, pools=("p2",))
    s.submit("a2", "a", gpus=1, pools=("p1",))  # the debug lane
    s.submit("b2", "b", gpus=1, pools=("p2",))
    result = s.run(T0 + 10, pools=P1, pool_epochs={"p1": 4}, epoch=4)
    assert sorted(placed_ids(result)) == ["a1", "a2"]
    assert {c.pool for c in place_commands(result)} == {"p1"}
    assert {c.epoch for c in place_commands(result)} == {4}
    assert s.cluster.workloads["b1"].status == "pending"
    assert s.cluster.workloads["b2"].status == "pending"
    # p2's leader places the rest; p1 has nothing left to do.
    other = s.run(T0 + 11, pools=frozenset({"p2"}), pool_epochs={"p2": 9})
    assert sorted(placed_ids(other)) == ["b1", "b2"]
    assert {c.epoch for c in place_commands(other)} == {9}


def test_work_listing_several_pools_is_the_first_pools_leaders() -> None:
    s = two_pools()
    s.submit("x", "a", gpus=2, min_runtime_s=3600, pools=("p2", "p1"))
    s.submit("y", "a", gpus=2, min_runtime_s=3600, pools=("p1",), at=T0 + 1)
    result = s.run(T0 + 10, pools=P1, pool_epochs={"p1": 1})
    assert placed_ids(result) == ["y"], "x is p2's leader's; y, behind x, is not held up"
    assert s.cluster.workloads["x"].status == "pending"
    # A leader of both pools places it in either: here p2 is full, so in p1.
    run_in(s, "z", "b", "n2", (0, 1, 2, 3), "p2", ("p2",))
    both = s.run(T0 + 20, pools=BOTH, pool_epochs={"p1": 1, "p2": 2})
    assert placements(both)["x"] == (("n1", (2, 3)),)
    assert {(c.workload_id, c.pool, c.epoch) for c in place_commands(both)} >= {("x", "p1", 1)}


def test_debug_lane_work_follows_the_same_rule() -> None:
    s = two_pools()
    s.submit("d", "a", gpus=1, pools=("p2", "p1"))  # small and short: the debug lane
    assert placed_ids(s.run(T0 + 10, pools=P1, pool_epochs={"p1": 1})) == []
    result = s.run(T0 + 11, pools=frozenset({"p2"}), pool_epochs={"p2": 1})
    assert placements(result) == {"d": (("n2", (0,)),)}
    assert "debug lane" in place_commands(result)[0].decision.detail


def test_maintenance_of_another_pool_is_left_to_its_leader() -> None:
    s = two_pools()
    s.add_node("m2", 4, "p2")
    run_in(s, "r1", "a", "n2", (0,), "p2", ("p2",))
    run_in(s, "r2", "a", "m2", (0,), "p2", ("p2",))
    run_in(s, "r3", "b", "n1", (0,), "p1", ("p1",))
    run_in(s, "r4", "b", "n1", (1,), "p1", ("p2", "p1"))  # runs in p1: p1's to stop
    s.apply(NodeDown(node="n2"), T0 + 100)
    s.apply(NodeCordoned(node="m2", cordoned_by="admin"), T0 + 100)
    s.apply(WorkloadCancelled(workload_id="r4", cancelled_by="tester"), T0 + 100)
    before = snapshot(s.cluster)
    quiet = s.run(T0 + 200, pools=P1, pool_epochs={"p1": 1})
    cancel = preempt_commands(quiet)
    assert [(c.workload_id, c.pool, c.decision.reason) for c in cancel] == [("r4", "p1", "cancel")]
    assert of_type(quiet, WorkloadLost) == [], "n2 is p2's: its leader declares its runs lost"
    assert of_type(quiet, NodeDrained) == []
    assert s.cluster.workloads["r1"].status == "running"
    assert not s.cluster.workloads["r2"].preempting, "m2's drain is p2's leader's"
    assert before["down"] == snapshot(s.cluster)["down"]

    lost = s.run(T0 + 201, pools=frozenset({"p2"}), pool_epochs={"p2": 3})
    assert [e.workload_id for e in of_type(lost, WorkloadLost)] == ["r1"]
    assert [(c.workload_id, c.decision.reason) for c in preempt_commands(lost)] == [("r2", "drain")]
    assert {c.epoch for c in preempt_commands(lost)} == {3}


def test_a_requeue_belongs_to_the_pool_the_run_ran_in() -> None:
    s = two_pools()
    run_in(s, "r", "a", "n2", (0,), "p2", ("p1", "p2"), resumable=True)
    s.preempted("r", T0 + 50)
    assert s.cluster.workloads["r"].pool == "p2"
    assert of_type(s.run(T0 + 60, pools=P1, pool_epochs={"p1": 1}), WorkloadRequeued) == []
    assert s.cluster.workloads["r"].status == "preempted"
    requeued = s.run(T0 + 61, pools=frozenset({"p2"}), pool_epochs={"p2": 1})
    assert [e.workload_id for e in of_type(requeued, WorkloadRequeued)] == ["r"]
    # Pending again, it is p1's leader's to place (its first pool), not p2's.
    assert placed_ids(requeued) == []
    assert placed_ids(s.run(T0 + 62, pools=P1, pool_epochs={"p1": 1})) == ["r"]
