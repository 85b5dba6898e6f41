"""The debug lane (scheduling/debug_lane.py): small, short work starts first, a
reserve sized from recent lane demand, preemption regardless of rank after a short patience,
never inside a contract, never of other lane work, within the lane's bound; as examples and as
properties of random streams rich in debug work."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from events.models import PreemptCommand
from scheduling.debug_lane import (
    DebugLane,
    DebugLanes,
    LaneIndex,
    lane_state,
    poisson_quantile,
)
from tests.unit.scheduling_fixtures import (
    T0,
    Scenario,
    place_commands,
    placed_ids,
    preempted_ids,
)
from tests.unit.test_scheduler_properties import (
    LEAVES,
    PROPERTY_SETTINGS,
    Job,
    Observed,
    World,
    simulate,
    worlds,
)

DEBUG = 600  # a 10-minute contract: debug work under the default lane (1 GPU, <= 15 min)


def test_lane_work_starts_first_whatever_its_budget_has_used() -> None:
    s = Scenario(nodes=(("n0", 2),))
    s.running("b-run", "b", (("n0", (0,)),), started_at=T0, min_runtime_s=3600)
    s.submit("b-train", "b", min_runtime_s=3600, at=T0)
    s.submit("a-debug", "a", min_runtime_s=DEBUG, at=T0 + 5)
    s.set_usage({"a": 1_000_000.0, "b": 0.0})
    result = s.run(T0 + 10)
    assert placed_ids(result) == ["a-debug"]
    assert "debug lane" in place_commands(result)[0].decision.detail


def test_the_reserve_is_sized_from_recent_lane_demand() -> None:
    # P(N < 3) = 0.979 >= 0.9 > P(N < 2) = 0.885 for a mean of 0.58 lane GPUs in use.
    assert [poisson_quantile(mean, 0.9) for mean in (0.01, 0.58, 2.0, 10.0)] == [1, 3, 5, 15]
    lane = DebugLane()
    assert lane.reserve_for(0.0, 256) == 0  # no lane work lately: nothing held back
    assert lane.reserve_for(0.58 * lane.lookback_s, 256) == 3
    assert lane.reserve_for(1_000.0 * lane.lookback_s, 256) == 25  # at most 10% of capacity
    assert lane.reserve_for(1_000.0 * lane.lookback_s, 4) == 1


def test_other_work_leaves_the_reserve_free_and_lane_work_takes_it() -> None:
    s = Scenario(nodes=(("n0", 8),))
    s.running("a-debugged", "a", (("n0", (0,)),), started_at=T0 - 300, min_runtime_s=DEBUG)
    s.finished("a-debugged", T0 - 100)
    for i in range(8):
        s.submit(f"b-train-{i}", "b", min_runtime_s=3600, at=T0 + i)
    state = lane_state(s.cluster, DebugLanes(), "p", T0 + 10, LaneIndex())
    assert (state.reserve, state.in_use, state.withheld()) == (1, 0, 1)
    assert len(placed_ids(s.run(T0 + 10))) == 7
    s.submit("a-debug", "a", min_runtime_s=DEBUG, at=T0 + 20)
    assert placed_ids(s.run(T0 + 21)) == ["a-debug"]


def _full_node(debug_at: float) -> Scenario:
    """One node, full: a and b each hold their entitlement (so neither may take from the
    other by the churn rules), b's run past its contract, b far ahead of a in the order; a's
    debug job waiting."""
    s = Scenario(nodes=(("n0", 4),))
    s.running("a-run", "a", (("n0", (0, 1)),), started_at=T0, min_runtime_s=3600)
    s.running("b-run", "b", (("n0", (2,)),), started_at=T0 - 7200, min_runtime_s=3600)
    s.running("b-new", "b", (("n0", (3,)),), started_at=T0, min_runtime_s=3600)
    s.submit("a-debug", "a", min_runtime_s=DEBUG, at=debug_at)
    s.set_usage({"a": 1_000_000.0, "b": 0.0})
    return s


def test_lane_work_preempts_regardless_of_rank_once_its_patience_is_spent() -> None:
    s = _full_node(debug_at=T0 + 100)
    waiting = s.run(T0 + 105)
    assert preempted_ids(waiting) == []
    assert waiting.wake_at == T0 + 115
    result = s.run(T0 + 115)
    assert preempted_ids(result) == ["b-run"]
    (preempt,) = [c for c in result.commands if isinstance(c, PreemptCommand)]
    assert preempt.decision.preemptor == "a-debug"
    assert "debug lane" in preempt.decision.detail
    assert placed_ids(result) == ["a-debug"]


def test_lane_work_never_preempts_inside_a_contract_nor_other_lane_work() -> None:
    s = Scenario(nodes=(("n0", 4),))
    s.running("a-run", "a", (("n0", (0, 1)),), started_at=T0, min_runtime_s=3600)
    s.running("b-run", "b", (("n0", (2,)),), started_at=T0, min_runtime_s=3600)
    # Lane-shaped work past its contract (it runs longer than it asked to be protected for).
    s.running("b-debug", "b", (("n0", (3,)),), started_at=T0 - 2000, min_runtime_s=DEBUG)
    s.submit("a-debug", "a", min_runtime_s=DEBUG, at=T0)
    s.set_usage({"b": 1_000_000.0})
    assert s.run(T0 + 100).commands == []


def test_lane_work_may_take_its_own_budgets_run_past_its_contract() -> None:
    s = Scenario(nodes=(("n0", 1),))
    s.running("a-train", "a", (("n0", (0,)),), started_at=T0 - 7200, min_runtime_s=3600)
    s.submit("a-debug", "a", min_runtime_s=DEBUG, at=T0)
    assert preempted_ids(s.run(T0 + 100)) == ["a-train"]


def test_the_lane_is_bounded_beyond_it_debug_work_waits_its_turn() -> None:
    """a and b hold their entitlements (4 of 8 each); a's first debug job fills a lane of 1
    GPU (1/8), so its second waits like any work; the default lane (2 GPUs) takes a b run."""
    lanes = DebugLanes(default=DebugLane(max_lane_fraction=0.125))
    s = Scenario(nodes=(("n0", 8),))
    s.running("a-debug-1", "a", (("n0", (0,)),), started_at=T0, min_runtime_s=DEBUG)
    s.running("a-run", "a", (("n0", (1, 2, 3)),), started_at=T0, min_runtime_s=3600)
    for gpu in (4, 5, 6, 7):
        s.running(f"b-{gpu}", "b", (("n0", (gpu,)),), started_at=T0 - 7200, min_runtime_s=3600)
    s.submit("a-debug-2", "a", min_runtime_s=DEBUG, at=T0)
    s.set_usage({"a": 1_000_000.0})
    assert s.run(T0 + 100, debug_lanes=lanes).commands == []
    lanes_off = DebugLanes(default=DebugLane(enabled=False))
    assert s.run(T0 + 100, debug_lanes=lanes_off).commands == []
    assert len(preempted_ids(s.run(T0 + 100))) == 1  # under the default bound of 25%


def test_a_pool_may_have_its_own_lane() -> None:
    big = DebugLane(max_gpus=2)
    lanes = DebugLanes(pools=(("p", big),))
    assert lanes.for_pool("p") is big
    assert lanes.for_pool("q") == DebugLane()
    with pytest.raises(ValueError, match="patience"):
        DebugLane(patience_s=-1)


# -- properties ---------------------------------------------------------------------------------
debug_heavy_jobs = st.builds(
    Job,
    budget=st.sampled_from(LEAVES),
    gpus=st.sampled_from([1, 1, 1, 2, 4]),
    min_runtime_s=st.sampled_from([0, 120, 600, 600, 1800, 3600]),
    resumable=st.booleans(),
    priority=st.integers(-1, 1),
    duration=st.sampled_from([60.0, 400.0, 1500.0, 5000.0]),
    whole_nodes=st.booleans(),
)


def lane_never_breaks_a_contract(seen: Observed) -> None:
    lane = DebugLane()
    for command in seen.result.commands:
        if not isinstance(command, PreemptCommand) or "debug lane" not in command.decision.detail:
            continue
        preemptor = seen.cluster.workloads[command.decision.preemptor or ""]
        victim = seen.cluster.workloads[command.workload_id]
        assert lane.admits(preemptor), preemptor.workload_id
        assert not lane.admits(victim), victim.workload_id
        if victim.allocated:
            assert victim.started_at is not None, victim.workload_id
            assert seen.now - victim.started_at >= victim.min_runtime_s, victim.workload_id


@PROPERTY_SETTINGS
@given(worlds(debug_heavy_jobs))
def test_debug_lane_work_never_preempts_work_inside_its_contract(world: World) -> None:
    simulate(world, (lane_never_breaks_a_contract,))


@PROPERTY_SETTINGS
@given(worlds(debug_heavy_jobs))
def test_debug_heavy_streams_are_deterministic(world: World) -> None:
    assert simulate(world).passes == simulate(world).passes
