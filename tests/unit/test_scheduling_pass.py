"""One scheduling pass, by example (docs/design.md section 2): order, placement, preemption,
maintenance and the decision records that explain them."""

from __future__ import annotations

import pytest

from events.models import (
    GpuHeartbeat,
    GpuReading,
    InputPosition,
    NodeCordoned,
    NodeDown,
    NodeDrained,
    PlaceCommand,
    PreemptCommand,
    WorkloadCancelled,
    WorkloadLost,
    WorkloadPlaced,
    WorkloadRequeued,
)
from scheduling.baselines import BASELINES, baseline_policy
from scheduling.fairshare_order import FairShareOrder
from scheduling.scheduling_pass import PassContext, next_contract_expiry
from tests.unit.scheduling_fixtures import (
    T0,
    Scenario,
    of_type,
    place_commands,
    placed_ids,
    placements,
    preempt_commands,
    preempted_ids,
    roundtrip,
    utc,
)

WEEK = 7 * 24 * 3600
LATER = T0 + 1000  # past every 600 s contract started at T0


# -- fair-share order ----------------------------------------------------------------------------
def test_under_served_budget_is_placed_before_an_over_served_one() -> None:
    s = Scenario(nodes=(("n0", 4),))
    s.submit("a-first", "a", gpus=4, at=T0 - 100, priority=100)
    s.submit("b-later", "b", gpus=4, at=T0)
    s.set_usage({"a": 100_000.0, "b": 50_000.0})
    result = s.run(T0 + 10)
    assert placed_ids(result) == ["b-later"]
    assert s.cluster.workloads["a-first"].status == "pending"


def test_budget_with_no_usage_ranks_first_whatever_its_weight() -> None:
    s = Scenario(budgets=(("small", 1.0), ("big", 100.0)), nodes=(("n0", 1),))
    s.submit("big-1", "big", at=T0 - 100)
    s.submit("small-1", "small", at=T0)
    s.set_usage({"big": 1.0})
    assert placed_ids(s.run(T0 + 10)) == ["small-1"]


def test_ties_go_to_the_larger_share_then_the_path() -> None:
    s = Scenario(budgets=(("a", 1.0), ("b", 2.0), ("c", 2.0)), nodes=(("n0", 1),))
    for budget in ("a", "c", "b"):
        s.submit(f"{budget}-1", budget, at=T0)
    assert placed_ids(s.run(T0 + 10)) == ["b-1"]


def test_everything_under_an_under_served_sibling_precedes_an_over_served_one() -> None:
    """x is over-served as a whole although its leaf x2 never ran: y1's work comes first (both
    hold less than their entitlement of 2 GPUs throughout: n1 is cordoned, still capacity)."""
    budgets = (("x", 1.0), ("x/x1", 1.0), ("x/x2", 1.0), ("y", 1.0), ("y/y1", 1.0))
    s = Scenario(budgets=budgets, nodes=(("n0", 2), ("n1", 2)))
    s.apply(NodeCordoned(node="n1", cordoned_by="ops"), T0 - 400)
    s.submit("x2-1", "x/x2", at=T0 - 300)
    s.submit("x1-1", "x/x1", at=T0 - 200)
    s.submit("y1-1", "y/y1", at=T0 - 100)
    s.submit("y1-2", "y/y1", at=T0)
    s.set_usage({"x/x1": 100_000.0, "y/y1": 60_000.0})
    result = s.run(T0 + 10)
    assert placed_ids(result) == ["y1-1", "y1-2"]


def test_a_budget_below_its_entitlement_goes_first_whatever_its_usage() -> None:
    """b used little but already holds its entitlement (2 of 4 GPUs); a used much and holds
    nothing: a is owed GPUs now, so the free GPU is a's; the window decides the rest."""
    s = Scenario(nodes=(("n0", 4),))
    s.running("b-run", "b", (("n0", (0, 1)),), started_at=T0 - 50, min_runtime_s=3600)
    s.submit("b-1", "b", at=T0 - 20)
    s.submit("a-1", "a", at=T0 - 10)
    s.set_usage({"a": 1_000_000.0, "b": 10.0})
    assert placed_ids(s.run(T0 + 10)) == ["a-1", "b-1"]


def test_fair_share_order_of_leaves_is_depth_first_by_subtree_usage() -> None:
    budgets = (("x", 1.0), ("x/x1", 1.0), ("x/x2", 1.0), ("y", 1.0), ("y/y1", 1.0), ("y/y2", 1.0))
    s = Scenario(budgets=budgets)
    usage = {"x/x1": 100_000.0, "y/y1": 60_000.0, "y/y2": 1.0}
    order = FairShareOrder(s.tree, "p", T0, usage, capacity=8, window_s=WEEK)
    assert order.leaf_order() == ["y/y2", "y/y1", "x/x2", "x/x1"]
    assert order.usage["x"] == 100_000.0
    assert order.ratio("x") == pytest.approx(100_000.0 / (0.5 * 8 * WEEK))


def test_priority_orders_work_within_its_budget_only() -> None:
    s = Scenario(nodes=(("n0", 2),))
    s.submit("a-low", "a", at=T0 - 300, priority=0)
    s.submit("a-high", "a", at=T0 - 100, priority=10)
    s.submit("b-neg", "b", at=T0, priority=-5)
    s.set_usage({"a": 50_000.0, "b": 10_000.0})
    assert placed_ids(s.run(T0 + 10)) == ["b-neg", "a-high"]


def test_within_a_budget_and_priority_earlier_submission_goes_first() -> None:
    s = Scenario(budgets=(("a", 1.0),), nodes=(("n0", 1),))
    s.submit("second", "a", at=T0 + 1)
    s.submit("first", "a", at=T0)
    assert placed_ids(s.run(T0 + 10)) == ["first"]


def test_per_pass_charge_spreads_free_gpus_across_budgets() -> None:
    s = Scenario(nodes=(("n0", 4),))
    for i in range(4):
        s.submit(f"a-{i}", "a", at=T0 + i)
    for i in range(4):
        s.submit(f"b-{i}", "b", at=T0 + 10 + i)
    result = s.run(T0 + 100)
    assert placed_ids(result) == ["a-0", "b-0", "a-1", "b-1"]


def test_a_gang_that_cannot_fit_does_not_block_other_budgets() -> None:
    s = Scenario(nodes=(("n0", 4),))
    s.submit("a-huge", "a", gpus=4, at=T0 - 100)
    s.running("a-run", "a", (("n0", (0,)),), started_at=T0 - 50, min_runtime_s=3600)
    s.submit("b-small", "b", gpus=2, at=T0)
    result = s.run(T0 + 10)
    assert placed_ids(result) == ["b-small"]
    assert preempted_ids(result) == []


# -- allocated vs unallocated ---------------------------------------------------------------------
def test_allocated_work_is_placed_before_unallocated_work() -> None:
    s = Scenario(nodes=(("n0", 1),))
    s.submit("a-free", "a", min_runtime_s=0, at=T0 - 1000)
    s.submit("b-alloc", "b", min_runtime_s=600, at=T0)
    s.set_usage({"b": 1_000_000.0})
    assert placed_ids(s.run(T0 + 10)) == ["b-alloc"]


def test_unallocated_work_fills_what_is_left_as_burst() -> None:
    s = Scenario(nodes=(("n0", 4),))
    s.submit("a-free", "a", gpus=2, min_runtime_s=0, at=T0 - 1000)
    s.submit("a-free-2", "a", gpus=2, min_runtime_s=0, at=T0 - 900)
    s.submit("b-alloc", "b", gpus=2, at=T0)
    result = s.run(T0 + 10)
    assert placed_ids(result) == ["b-alloc", "a-free"]
    burst = place_commands(result)[1]
    assert burst.decision.reason == "burst"
    assert burst.allocated is False
    assert burst.min_runtime_s == 0
    assert place_commands(result)[0].decision.reason == "fairshare"
    assert place_commands(result)[0].allocated is True


def test_unallocated_work_never_preempts() -> None:
    s = Scenario(nodes=(("n0", 4),))
    s.running("b-old", "b", (("n0", (0, 1, 2, 3)),), started_at=T0, min_runtime_s=60)
    s.submit("a-free", "a", gpus=2, min_runtime_s=0)
    s.set_usage({"b": 1_000_000.0})
    result = s.run(LATER)
    assert result.commands == []
    assert result.events == []


def test_unallocated_work_fills_leftovers_in_fair_share_order() -> None:
    s = Scenario(nodes=(("n0", 3),))
    s.running("b-run", "b", (("n0", (0,)),), started_at=T0, min_runtime_s=3600)
    s.submit("a-free-1", "a", min_runtime_s=0, at=T0 - 300)
    s.submit("a-free-2", "a", min_runtime_s=0, at=T0 - 200)
    s.submit("b-free-1", "b", min_runtime_s=0, at=T0 - 100)
    s.submit("b-free-2", "b", min_runtime_s=0, at=T0)
    s.set_usage({"a": 500_000.0, "b": 1_000.0})
    result = s.run(T0 + 10)
    assert placed_ids(result) == ["b-free-1", "b-free-2"]
    assert {c.decision.reason for c in place_commands(result)} == {"burst"}


# -- preemption ------------------------------------------------------------------------------------
def test_preemption_takes_unallocated_victims_first() -> None:
    s = Scenario(budgets=(("a", 1.0), ("b", 1.0), ("c", 1.0)), nodes=(("n0", 4),))
    s.running("c-free", "c", (("n0", (0, 1)),), started_at=T0, min_runtime_s=0)
    s.running("b-alloc", "b", (("n0", (2, 3)),), started_at=T0, min_runtime_s=600)
    s.submit("a-need", "a", gpus=2)
    s.set_usage({"b": 1_000_000.0})
    result = s.run(LATER)
    assert preempted_ids(result) == ["c-free"]
    assert placements(result) == {"a-need": (("n0", (0, 1)),)}


def test_unallocated_victim_may_be_preempted_even_before_it_started() -> None:
    s = Scenario(nodes=(("n0", 2),))
    s.submit("b-free", "b", gpus=2, min_runtime_s=0, at=T0 - 10)
    s.place("b-free", (("n0", (0, 1)),), T0 - 5)
    s.submit("a-need", "a", gpus=2)
    result = s.run(T0)
    assert preempted_ids(result) == ["b-free"]
    assert placed_ids(result) == ["a-need"]


@pytest.mark.parametrize(("now", "preempts"), [(T0 + 3599, False), (T0 + 3600, True)])
def test_allocated_work_is_never_preempted_inside_its_contract(now: float, preempts: bool) -> None:
    s = Scenario(nodes=(("n0", 4),))
    s.running("b-old", "b", (("n0", (0, 1, 2, 3)),), started_at=T0, min_runtime_s=3600)
    s.submit("a-new", "a", gpus=4)
    s.set_usage({"b": 1_000_000.0})
    result = s.run(now)
    assert preempted_ids(result) == (["b-old"] if preempts else [])
    assert placed_ids(result) == (["a-new"] if preempts else [])


def test_placed_allocated_work_that_has_not_started_is_protected() -> None:
    s = Scenario(nodes=(("n0", 4),))
    s.submit("b-placed", "b", gpus=4, min_runtime_s=60, at=T0 - 10_000)
    s.place("b-placed", (("n0", (0, 1, 2, 3)),), T0 - 9000)
    s.submit("a-new", "a", gpus=4)
    s.set_usage({"b": 1_000_000.0})
    assert s.run(T0).commands == []


def test_preempt_for_records_the_preemptor_and_both_standings() -> None:
    s = Scenario(nodes=(("n0", 4),))
    s.running("b-old", "b", (("n0", (0, 1)),), started_at=T0, min_runtime_s=600)
    s.running("b-other", "b", (("n0", (2, 3)),), started_at=T0 - 100, min_runtime_s=600)
    s.submit("a-new", "a", gpus=2, min_runtime_s=900)
    s.set_usage({"b": 1_000_000.0})
    result = s.run(LATER, pass_id=42, grace_period_s=45)
    (preempt,) = preempt_commands(result)
    assert preempt.workload_id == "b-old"
    assert preempt.attempt == 1
    assert preempt.grace_period_s == 45
    assert preempt.requeue is True
    assert preempt.cluster == "c1"
    assert preempt.pool == "p"
    decision = preempt.decision
    assert decision.reason == "preempt-for"
    assert decision.preemptor == "a-new"
    assert decision.pass_id == 42
    standings = {b.budget: b for b in decision.budgets}
    assert set(standings) == {"a", "b"}
    assert standings["a"].rank < standings["b"].rank
    assert standings["b"].usage_gpu_s == 1_000_000
    assert standings["a"].usage_ratio < standings["b"].usage_ratio
    (place,) = place_commands(result)
    assert place.workload_id == "a-new"
    assert place.decision.reason == "fairshare"
    assert "b-old" in place.decision.detail
    # The preemptor holds the GPUs at once; the victim still runs until it exits.
    node = s.cluster.nodes["n0"]
    assert node.assigned == {0: "a-new", 1: "a-new", 2: "b-other", 3: "b-other"}
    assert set(node.holders) == {"a-new", "b-old", "b-other"}


def test_non_resumable_victim_is_not_requeued() -> None:
    s = Scenario(nodes=(("n0", 2),))
    s.running("b-old", "b", (("n0", (0,)),), started_at=T0, min_runtime_s=60, resumable=False)
    s.running("b-other", "b", (("n0", (1,)),), started_at=LATER - 1, min_runtime_s=60)
    s.submit("a-new", "a")
    s.set_usage({"b": 1_000_000.0})
    (preempt,) = preempt_commands(s.run(LATER))
    assert (preempt.workload_id, preempt.requeue) == ("b-old", False)


@pytest.mark.parametrize(
    ("a_usage", "preempts"),
    [
        (10_000.0, False),  # equally served: no ping-pong
        (5_500.0, False),  # 5_500 + 2 x 600 is ahead, but by less than the 50% margin
        (5_000.0, True),  # 10_000 / (5_000 + 1_200) = 1.61: behind by more than the margin
        (0.0, True),
    ],
)
def test_catch_up_preempts_only_budgets_behind_by_the_margin_after_counting_the_request(
    a_usage: float, preempts: bool
) -> None:
    """a holds its entitlement (2 of 8 GPUs: c has half the weight and no work), so it is owed
    nothing: it may only catch up on b, which keeps its entitlement after losing b-old."""
    s = Scenario(budgets=(("a", 1.0), ("b", 1.0), ("c", 2.0)), nodes=(("n0", 4), ("n1", 4)))
    s.running("a-run", "a", (("n1", (0, 1)),), started_at=LATER - 1, min_runtime_s=3600)
    s.running("b-old", "b", (("n0", (0, 1)),), started_at=T0, min_runtime_s=600)
    s.running("b-rest", "b", (("n0", (2, 3)), ("n1", (2, 3))), started_at=T0, min_runtime_s=3600)
    s.submit("a-new", "a", gpus=2, min_runtime_s=600)
    s.set_usage({"a": a_usage, "b": 10_000.0})
    result = s.run(LATER)
    assert preempted_ids(result) == (["b-old"] if preempts else [])


def test_two_equally_served_budgets_do_not_preempt_each_other_over_passes() -> None:
    s = Scenario(nodes=(("n0", 2),))
    s.running("a-run", "a", (("n0", (0,)),), started_at=T0, min_runtime_s=600)
    s.running("b-run", "b", (("n0", (1,)),), started_at=T0, min_runtime_s=600)
    s.submit("a-more", "a", min_runtime_s=600)
    s.submit("b-more", "b", min_runtime_s=600)
    s.set_usage({"a": 5_000.0, "b": 5_000.0})
    for k in range(1, 5):
        assert s.run(T0 + 1000 * k).commands == []


def test_work_of_the_same_budget_is_never_a_victim() -> None:
    s = Scenario(nodes=(("n0", 1),))
    s.running("a-old", "a", (("n0", (0,)),), started_at=T0, min_runtime_s=60)
    s.submit("a-urgent", "a", priority=1000)
    s.set_usage({"a": 0.0, "b": 1_000_000.0})
    assert s.run(LATER).commands == []


def test_fewest_victims_on_one_node() -> None:
    s = Scenario(nodes=(("n0", 4),))
    s.running("b-1", "b", (("n0", (0,)),), started_at=T0, min_runtime_s=60)
    s.running("b-2", "b", (("n0", (1,)),), started_at=T0, min_runtime_s=60)
    s.running("b-pair", "b", (("n0", (2, 3)),), started_at=T0, min_runtime_s=60)
    s.submit("a-new", "a", gpus=2)
    s.set_usage({"b": 1_000_000.0})
    result = s.run(LATER)
    assert preempted_ids(result) == ["b-pair"]
    assert placements(result) == {"a-new": (("n0", (2, 3)),)}


def test_fewest_victims_across_nodes() -> None:
    s = Scenario(nodes=(("n0", 4), ("n1", 4)))
    s.running("b-1", "b", (("n0", (0,)),), started_at=T0, min_runtime_s=60)
    s.running("b-2", "b", (("n0", (1,)),), started_at=T0, min_runtime_s=60)
    s.running("b-keep0", "b", (("n0", (2, 3)),), started_at=LATER - 1, min_runtime_s=3600)
    s.running("b-pair", "b", (("n1", (0, 1)),), started_at=T0, min_runtime_s=60)
    s.running("b-keep1", "b", (("n1", (2, 3)),), started_at=LATER - 1, min_runtime_s=3600)
    s.submit("a-new", "a", gpus=2)
    s.set_usage({"b": 1_000_000.0})
    result = s.run(LATER)
    assert preempted_ids(result) == ["b-pair"]
    assert placements(result) == {"a-new": (("n1", (0, 1)),)}


def test_no_victim_is_preempted_that_the_placement_does_not_need() -> None:
    """An unallocated 1-GPU run cannot make room for a 3-GPU request; the allocated 3-GPU run
    alone can. Preempting both is one victim more than needed (docs/design.md section 2.6:
    "the fewest victims")."""
    s = Scenario(nodes=(("n0", 4), ("n1", 4)))
    s.running("b-free", "b", (("n0", (0,)),), started_at=T0, min_runtime_s=0)
    s.running("b-big", "b", (("n0", (1, 2, 3)),), started_at=T0, min_runtime_s=60)
    s.running("b-busy", "b", (("n1", (0, 1, 2, 3)),), started_at=LATER - 1, min_runtime_s=60)
    s.submit("a-new", "a", gpus=3)
    s.set_usage({"b": 1_000_000.0})
    result = s.run(LATER)
    assert preempted_ids(result) == ["b-big"]
    assert s.cluster.workloads["b-free"].status == "running"
    assert not s.cluster.workloads["b-free"].preempting


def test_among_equal_victim_counts_the_most_over_served_budget_loses() -> None:
    """b and c each hold 4 GPUs against an entitlement of 4/3 (d has half the weight, no work):
    either can give a 2-GPU run to a; c has used more."""
    budgets = (("a", 1.0), ("b", 1.0), ("c", 1.0), ("d", 3.0))
    s = Scenario(budgets=budgets, nodes=tuple((f"n{i}", 2) for i in range(4)))
    for i, budget in enumerate(("b", "b", "c", "c")):
        s.running(f"{budget}-run{i}", budget, ((f"n{i}", (0, 1)),), started_at=T0, min_runtime_s=60)
    s.submit("a-new", "a", gpus=2)
    s.set_usage({"b": 100_000.0, "c": 200_000.0})
    assert preempted_ids(s.run(LATER))[0].startswith("c-run")


def test_among_equal_victims_of_one_budget_the_youngest_run_loses() -> None:
    s = Scenario(nodes=(("n0", 2), ("n1", 2)))
    s.running("b-older", "b", (("n1", (0, 1)),), started_at=T0, min_runtime_s=60)
    s.running("b-younger", "b", (("n0", (0, 1)),), started_at=T0 + 100, min_runtime_s=60)
    s.submit("a-new", "a", gpus=2)
    s.set_usage({"b": 100_000.0})
    assert preempted_ids(s.run(LATER)) == ["b-younger"]


def test_preemption_can_be_switched_off_or_bounded() -> None:
    for ctx in ({"preemption": False}, {"max_preemption_searches": 0}):
        s = Scenario(nodes=(("n0", 1),))
        s.running("b-old", "b", (("n0", (0,)),), started_at=T0, min_runtime_s=60)
        s.submit("a-new", "a")
        s.set_usage({"b": 1_000_000.0})
        assert s.run(LATER, **ctx).commands == [], ctx


# -- placement shapes ------------------------------------------------------------------------------
def test_single_node_work_goes_to_the_best_fitting_node_lowest_gpus() -> None:
    s = Scenario(nodes=(("n0", 4), ("n1", 4)))
    s.running("b-run", "b", (("n1", (0,)),), started_at=T0, min_runtime_s=3600)
    s.submit("a-two", "a", gpus=2)
    assert placements(s.run(T0 + 1)) == {"a-two": (("n1", (1, 2)),)}


def test_single_node_work_is_never_split_across_nodes() -> None:
    s = Scenario(nodes=(("n0", 4), ("n1", 4)))
    s.running("b-0", "b", (("n0", (0, 1)),), started_at=T0, min_runtime_s=3600)
    s.running("b-1", "b", (("n1", (0, 1)),), started_at=T0, min_runtime_s=3600)
    s.submit("a-three", "a", gpus=3)
    s.set_usage({"b": 1.0})
    assert s.run(T0 + 1).commands == []


def test_gang_larger_than_a_node_gets_whole_free_nodes() -> None:
    s = Scenario(nodes=(("n0", 4), ("n1", 4), ("n2", 4), ("n3", 4)))
    s.running("b-run", "b", (("n0", (3,)),), started_at=T0, min_runtime_s=3600)
    s.submit("a-gang", "a", gpus=8, gang="whole-nodes")
    result = s.run(T0 + 1)
    (placement,) = placements(result).values()
    assert len(placement) == 2
    assert all(node != "n0" and gpus == (0, 1, 2, 3) for node, gpus in placement)
    (placed,) = of_type(result, WorkloadPlaced)
    assert placed.placement.gpu_count == 8


def test_gang_larger_than_a_node_waits_when_no_whole_nodes_are_free() -> None:
    s = Scenario(nodes=(("n0", 4), ("n1", 4), ("n2", 4)))
    for i in range(3):
        s.running(f"b-{i}", "b", ((f"n{i}", (0,)),), started_at=T0, min_runtime_s=3600)
    s.submit("a-gang", "a", gpus=8)  # 9 GPUs are free, but no two whole nodes
    s.set_usage({"b": 1_000_000.0})
    assert s.run(T0 + 1).commands == []


def test_whole_node_gang_preempts_whole_nodes() -> None:
    """a is owed 3 GPUs but its gang needs 4 on whole nodes, more than b can give and keep its
    entitlement: after waiting an hour (starving), it catches up on b, far behind it."""
    s = Scenario(nodes=(("n0", 2), ("n1", 2), ("n2", 2)))
    s.running("b-0", "b", (("n0", (0, 1)),), started_at=T0, min_runtime_s=60)
    s.running("b-1", "b", (("n1", (0, 1)),), started_at=T0, min_runtime_s=60)
    s.running("b-keep", "b", (("n2", (0,)),), started_at=LATER - 1, min_runtime_s=3600)
    s.submit("a-gang", "a", gpus=4, gang="whole-nodes", at=LATER - 3600)
    s.set_usage({"b": 1_000_000.0})
    result = s.run(LATER)
    assert sorted(preempted_ids(result)) == ["b-0", "b-1"]
    assert placements(result) == {"a-gang": (("n0", (0, 1)), ("n1", (0, 1)))}


def test_a_whole_node_gang_that_cannot_fit_does_not_block_same_size_single_node_work() -> None:
    """Smaller work of the budget backfills around the waiting gang (a-one); work of the gang's
    size that fits on one node (a-two) must backfill as well: it is not "of a size that
    cannot fit"."""
    s = Scenario(nodes=(("n0", 4),))
    s.running("b-run", "b", (("n0", (0,)),), started_at=T0, min_runtime_s=3600)
    s.submit("a-gang", "a", gpus=2, gang="whole-nodes", at=T0 + 1)
    s.submit("a-two", "a", gpus=2, at=T0 + 2)
    s.submit("a-one", "a", gpus=1, at=T0 + 3)
    s.set_usage({"b": 1_000_000.0})
    result = s.run(T0 + 10)
    assert sorted(placed_ids(result)) == ["a-one", "a-two"]
    assert s.cluster.workloads["a-gang"].status == "pending"


def test_a_failed_search_for_a_smaller_gang_does_not_skip_a_bigger_whole_node_gang() -> None:
    """Mixed node sizes: no node can free 3 GPUs (the 4-GPU node is inside a contract), but
    three 2-GPU nodes can be emptied for a 5-GPU gang, which needs whole nodes. The 3-GPU
    request's failed search must not stop the 5-GPU one; with the order of the two swapped
    the gang is placed (control)."""

    def run(gang_priority: int) -> tuple[dict[str, object], list[str]]:
        s = Scenario(nodes=(("n4", 4), ("n5", 4), ("m0", 2), ("m1", 2), ("m2", 2)))
        for big in ("n4", "n5"):  # b holds 14 GPUs, 7 more than its entitlement
            s.running(f"b-{big}", "b", ((big, (0, 1, 2, 3)),), started_at=LATER - 100)
        for i in range(3):
            s.running(f"b-{i}", "b", ((f"m{i}", (0, 1)),), started_at=T0, min_runtime_s=60)
        s.submit("a-3", "a", gpus=3, at=T0 + 1)
        s.submit("a-5", "a", gpus=5, at=T0 + 2, priority=gang_priority)
        s.set_usage({"b": 1_000_000.0})
        result = s.run(LATER)
        return dict(placements(result)), sorted(preempted_ids(result))

    gang_first = run(gang_priority=10)
    assert gang_first == (
        {"a-5": (("m0", (0, 1)), ("m1", (0, 1)), ("m2", (0,)))},
        ["b-0", "b-1", "b-2"],
    )
    assert run(gang_priority=0) == gang_first


def test_a_workload_goes_to_an_acceptable_pool_that_has_room() -> None:
    s = Scenario(nodes=(("n0", 1),))
    s.add_node("q0", 2, pool="q")
    s.running("b-run", "b", (("n0", (0,)),), started_at=T0, min_runtime_s=3600)
    s.submit("a-any", "a", pools=("p", "q"))
    result = s.run(T0 + 1)
    (place,) = place_commands(result)
    assert place.pool == "q"
    assert placements(result) == {"a-any": (("q0", (0,)),)}
    assert s.cluster.workloads["a-any"].pool == "q"


# -- maintenance -----------------------------------------------------------------------------------
def test_cordon_drains_as_contracts_expire_and_reports_drained_once() -> None:
    s = Scenario(nodes=(("n0", 4), ("n1", 4)))
    s.running("w", "a", (("n0", (0, 1)),), started_at=T0, min_runtime_s=600)
    s.apply(NodeCordoned(node="n0", cordoned_by="ops"), T0 + 10)
    s.submit("x", "b", gpus=2, at=T0 + 20)
    first = s.run(T0 + 30)
    assert placements(first) == {"x": (("n1", (0, 1)),)}
    assert preempted_ids(first) == []
    assert of_type(first, NodeDrained) == []
    second = s.run(T0 + 600)
    (drain,) = preempt_commands(second)
    assert (drain.workload_id, drain.decision.reason, drain.requeue) == ("w", "drain", True)
    assert drain.decision.preemptor is None
    assert of_type(second, NodeDrained) == []  # w still holds its GPUs until it exits
    assert s.run(T0 + 610).all() == []  # the drain command is not repeated
    s.preempted("w", T0 + 630)
    third = s.run(T0 + 631)
    assert of_type(third, NodeDrained) == [NodeDrained(node="n0")]
    (requeued,) = of_type(third, WorkloadRequeued)
    assert requeued.workload_id == "w"
    assert placements(third) == {"w": (("n1", (2, 3)),)}  # never back on the cordoned node
    assert of_type(s.run(T0 + 700), NodeDrained) == []


def test_unallocated_work_on_a_cordoned_node_is_drained_at_once() -> None:
    s = Scenario(nodes=(("n0", 4),))
    s.running("u", "a", (("n0", (0,)),), started_at=T0, min_runtime_s=0, resumable=False)
    s.apply(NodeCordoned(node="n0", cordoned_by="ops"), T0 + 1)
    (drain,) = preempt_commands(s.run(T0 + 2))
    assert (drain.workload_id, drain.decision.reason, drain.requeue) == ("u", "drain", False)


def test_an_empty_cordoned_node_is_drained_in_the_next_pass() -> None:
    s = Scenario(nodes=(("n0", 4),))
    s.apply(NodeCordoned(node="n0", cordoned_by="ops"), T0)
    s.submit("a-1", "a")
    result = s.run(T0 + 1)
    assert result.all() == [NodeDrained(node="n0")]
    assert s.cluster.nodes["n0"].drained


def test_down_node_loses_its_work_charged_to_the_last_heartbeat_and_requeues_resumable() -> None:
    s = Scenario(nodes=(("n0", 4), ("n1", 4)))
    s.running("r", "a", (("n0", (0, 1)),), started_at=T0, min_runtime_s=3600)
    s.running("x", "b", (("n0", (2, 3)),), started_at=T0, min_runtime_s=3600, resumable=False)
    reading = GpuReading(index=0, occupant="r", attempt=1, utilisation_pct=50, memory_used_bytes=1)
    beat = GpuHeartbeat(node="n0", cluster="c1", sequence=1, gpus=(reading,))
    s.apply(beat, T0 + 50)
    s.apply(NodeDown(node="n0", last_heartbeat=utc(T0 + 50)), T0 + 200)
    result = s.run(T0 + 200)
    lost = {e.workload_id: e for e in of_type(result, WorkloadLost)}
    assert set(lost) == {"r", "x"}
    assert all(e.node == "n0" and e.attempt == 1 for e in lost.values())
    assert all(e.last_heartbeat == utc(T0 + 50) for e in lost.values())
    (requeued,) = of_type(result, WorkloadRequeued)
    assert (requeued.workload_id, requeued.attempt, requeued.reason) == ("r", 1, "lost")
    assert requeued.original_submit_time == utc(T0 - 10)
    assert s.cluster.workloads["x"].status == "lost"
    # The requeued run is placed again, on a live node, as attempt 2.
    (place,) = place_commands(result)
    assert (place.workload_id, place.attempt) == ("r", 2)
    assert placements(result) == {"r": (("n1", (0, 1)),)}
    assert s.cluster.workloads["r"].submitted_at == T0 - 10
    # Nothing is lost twice.
    assert of_type(s.run(T0 + 300), WorkloadLost) == []


def test_lost_time_is_never_after_the_pass_time() -> None:
    s = Scenario(nodes=(("n0", 1),))
    s.running("r", "a", (("n0", (0,)),), started_at=T0, min_runtime_s=60)
    s.apply(NodeDown(node="n0", last_heartbeat=utc(T0 + 500)), T0 + 100)
    (lost,) = of_type(s.run(T0 + 100), WorkloadLost)
    assert lost.last_heartbeat <= utc(T0 + 100)


def test_cancel_of_running_work_becomes_a_preempt_command() -> None:
    s = Scenario(nodes=(("n0", 1),))
    s.running("w", "a", (("n0", (0,)),), started_at=T0, min_runtime_s=3600)
    s.apply(WorkloadCancelled(workload_id="w", cancelled_by="tester"), T0 + 5)
    result = s.run(T0 + 6)
    (cancel,) = preempt_commands(result)
    assert (cancel.workload_id, cancel.decision.reason, cancel.requeue) == ("w", "cancel", False)
    assert cancel.decision.preemptor is None
    assert s.run(T0 + 7).commands == []  # issued once
    s.preempted("w", T0 + 36)
    result = s.run(T0 + 37)
    assert of_type(result, WorkloadRequeued) == []
    assert s.cluster.workloads["w"].status == "cancelled"


def test_cancel_of_placed_work_that_has_not_started_is_a_preempt_command() -> None:
    s = Scenario(nodes=(("n0", 1),))
    s.submit("w", "a")
    s.place("w", (("n0", (0,)),), T0)
    s.apply(WorkloadCancelled(workload_id="w", cancelled_by="tester"), T0 + 5)
    assert preempted_ids(s.run(T0 + 6)) == ["w"]


def test_work_cancelled_while_awaiting_requeue_is_not_run_again() -> None:
    """Preempted (resumable) work the submitter cancels before the next pass requeues it must
    stay cancelled: the cancel is not silently dropped."""
    s = Scenario(nodes=(("n0", 1),))
    s.running("w", "a", (("n0", (0,)),), started_at=T0, min_runtime_s=60)
    s.apply(
        PreemptCommand.model_validate(
            {
                "command_id": "preempt:w:1",
                "cluster": "c1",
                "pool": "p",
                "workload_id": "w",
                "attempt": 1,
                "requeue": True,
                "decision": {"pass_id": 1, "input_position": (), "reason": "drain"},
            }
        ),
        T0 + 100,
    )
    s.preempted("w", T0 + 130)
    s.apply(WorkloadCancelled(workload_id="w", cancelled_by="tester"), T0 + 131)
    result = s.run(T0 + 132)
    assert of_type(result, WorkloadRequeued) == []
    assert placed_ids(result) == []
    assert s.cluster.workloads["w"].status == "cancelled"


def test_cancelled_work_lost_with_its_node_is_not_run_again() -> None:
    """The cancel's preempt command is out when the node dies: the run is over, and the
    submitter's cancel still stands (no requeue, no new placement)."""
    s = Scenario(nodes=(("n0", 1), ("n1", 1)))
    s.running("w", "a", (("n0", (0,)),), started_at=T0, min_runtime_s=3600)
    s.apply(WorkloadCancelled(workload_id="w", cancelled_by="tester"), T0 + 5)
    assert preempted_ids(s.run(T0 + 6)) == ["w"]
    s.apply(NodeDown(node="n0", last_heartbeat=utc(T0 + 10)), T0 + 20)
    result = s.run(T0 + 21)
    assert [e.workload_id for e in of_type(result, WorkloadLost)] == ["w"]
    assert of_type(result, WorkloadRequeued) == []
    assert placed_ids(result) == []


def test_cancel_of_work_already_being_preempted_ends_it_as_cancelled() -> None:
    s = Scenario(nodes=(("n0", 2),))
    s.running("b-old", "b", (("n0", (0,)),), started_at=T0, min_runtime_s=60)
    s.running("b-other", "b", (("n0", (1,)),), started_at=LATER - 1, min_runtime_s=60)
    s.submit("a-new", "a")
    s.set_usage({"b": 1_000_000.0})
    assert preempted_ids(s.run(LATER)) == ["b-old"]
    s.apply(WorkloadCancelled(workload_id="b-old", cancelled_by="tester"), LATER + 1)
    assert s.run(LATER + 2).commands == []  # no second preempt command for the cancel
    s.preempted("b-old", LATER + 30)
    result = s.run(LATER + 31)
    assert s.cluster.workloads["b-old"].status == "cancelled"
    assert of_type(result, WorkloadRequeued) == []


def test_next_contract_expiry_is_the_earliest_running_contract_end() -> None:
    s = Scenario(nodes=(("n0", 4),))
    assert next_contract_expiry(s.cluster, T0) is None
    s.running("long", "a", (("n0", (0,)),), started_at=T0, min_runtime_s=3600)
    s.running("short", "b", (("n0", (1,)),), started_at=T0 + 10, min_runtime_s=600)
    s.running("free", "b", (("n0", (2,)),), started_at=T0, min_runtime_s=0)
    assert next_contract_expiry(s.cluster, T0 + 20) == T0 + 610
    assert next_contract_expiry(s.cluster, T0 + 610) == T0 + 3600
    assert next_contract_expiry(s.cluster, T0 + 3600) is None


# -- decision records and events -------------------------------------------------------------------
def test_every_emitted_event_is_a_valid_event_and_decisions_carry_the_pass() -> None:
    nodes = (("n0", 2), ("n1", 2), ("n2", 2))
    s = Scenario(budgets=(("a", 1.0), ("b", 1.0), ("c", 1.0)), nodes=nodes)
    s.running("b-old", "b", (("n0", (0, 1)),), started_at=T0, min_runtime_s=600)
    s.running("b-more", "b", (("n2", (0, 1)),), started_at=LATER - 1, min_runtime_s=600)
    s.running("c-free", "c", (("n1", (0,)),), started_at=T0, min_runtime_s=0)
    s.submit("a-new", "a", gpus=2)
    s.submit("a-free", "a", min_runtime_s=0)
    s.apply(NodeDown(node="n1", last_heartbeat=utc(T0 + 5)), LATER)
    s.set_usage({"b": 1_000_000.0})
    position = (InputPosition(topic="fairshare.workloads", partition=0, offset=17),)
    result = s.run(LATER, pass_id=9, input_position=position)
    kinds = {type(e).__name__ for e in result.all()}
    assert {"WorkloadLost", "PreemptCommand", "PlaceCommand", "WorkloadPlaced"} <= kinds
    for event in result.all():
        assert roundtrip(event) == event
    for command in result.commands:
        assert isinstance(command, PlaceCommand | PreemptCommand)
        assert command.decision.pass_id == 9
        assert command.decision.input_position == position
    for place in place_commands(result):
        assert place.decision.reason in ("fairshare", "burst")
        (placed,) = [
            e for e in of_type(result, WorkloadPlaced) if e.workload_id == place.workload_id
        ]
        assert placed.command_id == place.command_id
        assert placed.placement == place.placement
        assert place.budget == s.cluster.workloads[place.workload_id].budget
        assert [b.budget for b in place.decision.budgets] == [place.budget]


def test_decision_ranks_are_those_of_the_pool_decided_in() -> None:
    """Budget a is under-served in pool p1 and over-served in p2, b the other way round."""
    s = Scenario(nodes=())
    s.add_node("n1", 4, pool="p1")
    s.add_node("n2", 4, pool="p2")
    for i, (budget, pool) in enumerate((("a", "p1"), ("b", "p1"), ("a", "p2"), ("b", "p2"))):
        s.submit(f"{budget}-{pool}", budget, pools=(pool,), at=T0 + i)
    s.set_usage({"a": 0.0, "b": 100_000.0}, pool="p1")
    s.set_usage({"a": 100_000.0, "b": 0.0}, pool="p2")
    result = s.run(T0 + 10)
    ranks = {
        (place.pool, place.budget): place.decision.budgets[0].rank
        for place in place_commands(result)
    }
    assert ranks == {("p1", "a"): 1, ("p1", "b"): 2, ("p2", "b"): 1, ("p2", "a"): 2}


def test_command_ids_are_deterministic_per_workload_attempt() -> None:
    def decide() -> list[str]:
        s = Scenario(nodes=(("n0", 2),))
        s.running("b-old", "b", (("n0", (0,)),), started_at=T0, min_runtime_s=60)
        s.running("b-other", "b", (("n0", (1,)),), started_at=LATER - 1, min_runtime_s=60)
        s.submit("a-new", "a")
        s.set_usage({"b": 1_000_000.0})
        result = s.run(LATER)
        preempts = [c.command_id for c in preempt_commands(result)]
        return preempts + [c.command_id for c in place_commands(result)]

    first, second = decide(), decide()
    assert first == second
    assert len(set(first)) == 2


def test_the_pass_folds_its_decisions_into_the_state() -> None:
    s = Scenario(nodes=(("n0", 2),))
    s.submit("a-1", "a")
    s.run(T0)
    workload = s.cluster.workloads["a-1"]
    assert workload.status == "placed"
    assert workload.placement == (("n0", (0,)),)
    assert s.cluster.nodes["n0"].assigned == {0: "a-1"}
    assert s.run(T0 + 1).all() == []  # nothing left to decide


def test_pending_work_of_an_unknown_pool_is_left_alone() -> None:
    s = Scenario(nodes=(("n0", 2),))
    s.submit("a-1", "a", pools=("nowhere",))
    assert s.run(T0).all() == []
    assert s.cluster.workloads["a-1"].status == "pending"


# -- baselines -------------------------------------------------------------------------------------
def _baseline_scenario() -> Scenario:
    s = Scenario(budgets=(("a", 1.0), ("b", 3.0)), nodes=(("n0", 2),))
    s.running("a-old", "a", (("n0", (0,)),), started_at=T0, min_runtime_s=60)
    s.submit("a-1", "a", at=T0 + 1)
    s.submit("a-2", "a", at=T0 + 2)
    s.submit("b-1", "b", at=T0 + 3)
    s.set_usage({"a": 0.0, "b": 1_000_000.0})
    return s


def _baseline(name: str, s: Scenario, now: float = LATER) -> list[str]:
    result = baseline_policy(name)(s.cluster, s.tree, s.usage_source, PassContext(now=now))
    assert preempt_commands(result) == []  # baselines never preempt
    return placed_ids(result)


def test_fifo_baseline_places_in_arrival_order_across_budgets() -> None:
    assert _baseline("fifo", _baseline_scenario()) == ["a-1"]


def test_priority_baseline_prefers_the_larger_share() -> None:
    assert _baseline("priority", _baseline_scenario()) == ["b-1"]


def test_slurm_classic_baseline_prefers_the_least_used_budget() -> None:
    assert _baseline("slurm-classic", _baseline_scenario()) == ["a-1"]
    s = _baseline_scenario()
    s.set_usage({"a": 1_000_000.0, "b": 0.0})
    assert _baseline("slurm-classic", s) == ["b-1"]


def test_quota_baseline_keeps_a_budget_within_its_static_quota() -> None:
    # a's quota is round(0.25 x 2) = 1 GPU, which a-old already holds.
    assert _baseline("quota", _baseline_scenario()) == ["b-1"]


def test_baselines_are_listed_and_unknown_names_refused() -> None:
    assert set(BASELINES) == {"fifo", "priority", "quota", "slurm-classic"}
    with pytest.raises(ValueError, match="unknown baseline 'lottery'"):
        baseline_policy("lottery")
