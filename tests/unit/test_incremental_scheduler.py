"""The scheduler keeps what a pass needs between passes: the GPUs each budget holds and what
each budget's queues come to (kept by the fold, in its indexes), each pool's victim index (in
the scheduler's memos, caught up from the fold's change list and the contracts that ended
since), and the debug lane's index (caught up from the workloads the fold lists as changed).
Kept and fresh must agree after every pass of random histories, and every node's contract bound
must be its runs' latest contract end; starting every pass from fresh memos (the full pass, the
reference) must not change a decision (``test_churn.test_caches_change_no_decision``)."""

from __future__ import annotations

import math
from unittest.mock import patch

from hypothesis import given

from projections.cluster_indexes import ClusterIndexes
from projections.cluster_state import ClusterState
from projections.cluster_types import NodeState
from projections.queue_heads import queue_heads
from scheduling.debug_lane import DebugLanes, LaneIndex, lane_state
from scheduling.fairshare_order import count_held, held_by_leaf
from scheduling.preemption import VictimIndex, victim_index
from tests.unit.scheduling_fixtures import POOL, T0, Scenario
from tests.unit.test_scheduler_properties import (
    PROPERTY_SETTINGS,
    Observed,
    World,
    simulate,
    worlds,
)


def _contract_bound(cluster: ClusterState, node: NodeState) -> float:
    ends = [
        run.started_at + run.min_runtime_s
        for run in (cluster.workloads[h] for h in set(node.assigned.values()))
        if run.allocated and run.started_at is not None
    ]
    return max(ends, default=-math.inf)


def kept_equals_fresh(seen: Observed) -> None:
    cluster = seen.cluster
    bounds = cluster.indexes.contract_bounds
    for node in cluster.nodes.values():
        assert bounds[node.name] == _contract_bound(cluster, node), node.name
    for pool, by_ready in cluster.indexes.by_ready.items():
        in_pool = [n.name for n in cluster.nodes.values() if n.pool == pool]
        assert list(by_ready) == sorted((bounds[name], name) for name in in_pool)
    for pool, by_budget in cluster.indexes.pending.items():
        fresh = {budget: queue_heads(kinds) for budget, kinds in by_budget.items()}
        kept = cluster.indexes.heads.get(pool, {})
        assert kept == {budget: heads for budget, heads in fresh.items() if heads}, pool
    for pool in sorted(cluster.indexes.pools):
        assert held_by_leaf(cluster, pool) == count_held(cluster, pool), pool
        kept = victim_index(cluster, pool, seen.now, seen.memos.of_pool(pool))
        assert kept.content() == VictimIndex(cluster, pool, seen.now).content(), pool
        lanes = DebugLanes()
        kept_lane = lane_state(cluster, lanes, pool, seen.now, seen.memos.lane)
        assert kept_lane == lane_state(cluster, lanes, pool, seen.now, LaneIndex()), pool
        assert (kept_lane.pending, kept_lane.in_use) == _lane_work(cluster, lanes, pool), pool


def _lane_work(cluster: ClusterState, lanes: DebugLanes, pool: str) -> tuple[tuple[str, ...], int]:
    """The definition, from every workload: lane work of ``pool`` waiting, and the GPUs lane
    work holds there (placed or running, no preempt command out)."""
    pending: list[str] = []
    in_use = 0
    for workload in cluster.workloads.values():
        if pool not in workload.pools or not lanes.for_pool(pool).admits(workload):
            continue
        ended = workload.status in ("succeeded", "failed", "cancelled") or (
            workload.status in ("preempted", "lost") and not workload.resumable
        )
        if ended:
            continue
        if workload.status == "pending":
            pending.append(workload.workload_id)
        elif workload.pool == pool and workload.status in ("placed", "running"):
            in_use += 0 if workload.preempting else workload.gpus
    return tuple(sorted(pending)), in_use


@PROPERTY_SETTINGS
@given(worlds())
def test_the_kept_indexes_equal_fresh_ones_after_every_pass(world: World) -> None:
    simulate(world, (kept_equals_fresh,))


@PROPERTY_SETTINGS
@given(worlds())
def test_the_kept_indexes_equal_fresh_ones_when_the_fold_drops_its_change_lists(
    world: World,
) -> None:
    """With lists of a few changes, the fold drops them between most passes (as a burst of
    more than 100,000 facts does): the kept indexes must notice and catch up another way."""
    with patch.object(ClusterIndexes, "VICTIM_CHANGES_KEPT", 3):
        simulate(world, (kept_equals_fresh,))


def test_a_pass_after_one_event_catches_the_index_up_instead_of_rebuilding_it() -> None:
    s = Scenario(budgets=(("a", 1.0), ("b", 1.0)), nodes=(("n0", 4), ("n1", 4)))
    for k in range(8):
        s.running(f"a{k}", "a", ((f"n{k // 4}", (k % 4,)),), started_at=T0, min_runtime_s=60)
    memo = s.memos.serving(s.cluster).of_pool(POOL)
    first = victim_index(s.cluster, POOL, T0 + 120, memo)
    assert len(first.content()[0]) == 8  # every run is past its contract
    s.finished("a3", T0 + 130)
    again = victim_index(s.cluster, POOL, T0 + 140, memo)
    assert again is first  # caught up, not rebuilt
    assert "a3" not in again.content()[0]
    assert again.content() == VictimIndex(s.cluster, POOL, T0 + 140).content()
    s.submit("b0", "b", gpus=2, min_runtime_s=60, at=T0 + 145)
    s.run(T0 + 150)
    assert victim_index(s.cluster, POOL, T0 + 150, memo) is first
    assert first.content() == VictimIndex(s.cluster, POOL, T0 + 150).content()
    assert held_by_leaf(s.cluster, POOL) == count_held(s.cluster, POOL)


def test_memos_handed_another_state_start_over() -> None:
    """The service rebuilds its state from the log after a lost lease and keeps its memos: the
    first pass over the new state must not trust an index built from the old one."""
    s = Scenario(budgets=(("a", 1.0), ("b", 1.0)), nodes=(("n0", 4),))
    for k in range(4):
        s.running(f"a{k}", "a", (("n0", (k,)),), started_at=T0, min_runtime_s=60)
    s.submit("b0", "b", gpus=2, min_runtime_s=60, at=T0 + 100)
    s.run(T0 + 120)
    old = s.memos.of_pool(POOL).victims
    assert old is not None
    rebuilt = Scenario(budgets=(("a", 1.0), ("b", 1.0)), nodes=(("n0", 4),))
    rebuilt.memos = s.memos
    rebuilt.run(T0 + 130)
    assert rebuilt.memos.of_pool(POOL).victims is not old
    fresh = rebuilt.memos.lane
    assert fresh.seen == len(rebuilt.cluster.workloads) == 0


def test_the_lane_index_starts_over_when_the_fold_forgets_ended_work() -> None:
    """A live fold (``LiveState``) forgets ended work once a day of event time: the state's
    workloads then shrink, and an index that found new workloads by counting them missed the
    lane jobs submitted next (no reserve, no first pick: the Helios Earth audit's violations,
    ``test_audit_forgetting.py``). Kept must equal fresh across the forget."""
    s = Scenario(budgets=(("a", 1.0), ("b", 1.0)), nodes=(("n0", 4),))
    for k in range(3):
        s.running(f"d{k}", "a", (("n0", (k,)),), started_at=T0, min_runtime_s=60)
        s.finished(f"d{k}", T0 + 60)
    lanes = DebugLanes()
    lane_state(s.cluster, lanes, POOL, T0 + 70, s.memos.lane)
    assert s.cluster.forget_ended_before(T0 + 100) == ["d0", "d1", "d2"]
    s.submit("d3", "b", gpus=1, min_runtime_s=60, at=T0 + 200)
    s.submit("d4", "b", gpus=1, min_runtime_s=60, at=T0 + 200)
    kept = lane_state(s.cluster, lanes, POOL, T0 + 200, s.memos.lane)
    assert kept == lane_state(s.cluster, lanes, POOL, T0 + 200, LaneIndex())
    assert kept.pending == ("d3", "d4")
    assert kept.reserve >= 1
