"""The budget tree fold (docs/design.md section 2.1): shares, weight histories, errors."""

from __future__ import annotations

import math

import pytest

from events.models import (
    BudgetClosed,
    BudgetCreated,
    BudgetWeightChanged,
    MembershipGranted,
    MembershipRevoked,
)
from projections.budget_tree import ROOT, BudgetTree, BudgetTreeError, parent_of

T = 1_700_000_000.0


def tree_of(*budgets: tuple[str, float], at: float = T) -> BudgetTree:
    tree = BudgetTree()
    for path, weight in budgets:
        tree.create(path, weight, at)
    return tree


def when(ts: float) -> float:
    """An event time as the folds take it: epoch seconds."""
    return ts


# -- shares ----------------------------------------------------------------------------------------
def test_top_level_budgets_are_siblings_under_a_root_of_share_one() -> None:
    tree = tree_of(("a", 3.0), ("b", 1.0))
    shares = tree.shares("p", T)
    assert shares == {ROOT: 1.0, "a": 0.75, "b": 0.25}


def test_nested_share_is_weight_over_siblings_times_parent_share() -> None:
    tree = tree_of(
        ("lab", 1.0),
        ("lab/robotics", 3.0),
        ("lab/robotics/sim2real", 1.0),
        ("lab/robotics/grasp", 4.0),
        ("lab/vision", 1.0),
        ("ops", 1.0),
    )
    shares = tree.shares("p", T)
    assert shares["lab"] == pytest.approx(0.5)
    assert shares["ops"] == pytest.approx(0.5)
    assert shares["lab/robotics"] == pytest.approx(0.375)
    assert shares["lab/vision"] == pytest.approx(0.125)
    assert shares["lab/robotics/sim2real"] == pytest.approx(0.375 * 0.2)
    assert shares["lab/robotics/grasp"] == pytest.approx(0.375 * 0.8)
    leaves = tree.leaves()
    assert leaves == ["lab/robotics/grasp", "lab/robotics/sim2real", "lab/vision", "ops"]
    assert sum(shares[leaf] for leaf in leaves) == pytest.approx(1.0)


def test_only_relative_weights_matter() -> None:
    small = tree_of(("a", 1.0), ("b", 3.0)).shares("p", T)
    large = tree_of(("a", 100.0), ("b", 300.0)).shares("p", T)
    assert small == pytest.approx(large)


def test_per_pool_weight_override_applies_to_that_pool_only() -> None:
    tree = BudgetTree()
    tree.create("a", 1.0, T, pool_weights={"h100": 3.0})
    tree.create("b", 1.0, T)
    assert tree.shares("h100", T) == pytest.approx({ROOT: 1.0, "a": 0.75, "b": 0.25})
    assert tree.shares("a100", T) == pytest.approx({ROOT: 1.0, "a": 0.5, "b": 0.5})


def test_weight_change_takes_effect_from_its_time_onward() -> None:
    tree = tree_of(("a", 1.0), ("b", 1.0))
    tree.set_weight("a", 3.0, T + 100)
    assert tree.shares("p", T + 99)["a"] == pytest.approx(0.5)
    assert tree.shares("p", T + 100)["a"] == pytest.approx(0.75)
    assert tree.shares("p", T + 10_000)["a"] == pytest.approx(0.75)


def test_weight_changes_folded_out_of_order_still_apply_by_event_time() -> None:
    tree = tree_of(("a", 1.0), ("b", 1.0))
    tree.set_weight("a", 7.0, T + 200)  # arrives first, happened later
    tree.set_weight("a", 3.0, T + 100)
    assert tree.shares("p", T + 50)["a"] == pytest.approx(0.5)
    assert tree.shares("p", T + 150)["a"] == pytest.approx(0.75)
    assert tree.shares("p", T + 250)["a"] == pytest.approx(7 / 8)


def test_a_change_in_the_past_invalidates_shares_already_queried() -> None:
    tree = tree_of(("a", 1.0), ("b", 1.0))
    assert tree.shares("p", T + 500)["a"] == pytest.approx(0.5)
    tree.set_weight("a", 3.0, T + 100)  # a late event, earlier than the query above
    assert tree.shares("p", T + 500)["a"] == pytest.approx(0.75)
    assert tree.shares("p", T + 50)["a"] == pytest.approx(0.5)


def test_pool_weight_change_later_overrides_base_weight_in_that_pool_from_its_time() -> None:
    tree = tree_of(("a", 1.0), ("b", 1.0))
    tree.set_weight("a", 3.0, T + 100, pool="h100")
    assert tree.shares("h100", T + 50)["a"] == pytest.approx(0.5)
    assert tree.shares("h100", T + 100)["a"] == pytest.approx(0.75)
    assert tree.shares("a100", T + 100)["a"] == pytest.approx(0.5)
    # A later base change does not replace the pool override in that pool.
    tree.set_weight("a", 9.0, T + 200)
    assert tree.shares("h100", T + 300)["a"] == pytest.approx(0.75)
    assert tree.shares("a100", T + 300)["a"] == pytest.approx(0.9)


def test_a_budget_has_no_share_before_it_is_created() -> None:
    tree = tree_of(("a", 1.0))
    tree.create("b", 1.0, T + 100)
    assert tree.shares("p", T + 50) == {ROOT: 1.0, "a": 1.0}
    assert tree.shares("p", T + 100) == {ROOT: 1.0, "a": 0.5, "b": 0.5}


def test_closed_budget_and_its_subtree_drop_out_from_the_close_time() -> None:
    tree = tree_of(("a", 1.0), ("b", 1.0), ("b/x", 1.0), ("c", 2.0))
    tree.apply(BudgetClosed(budget="b", closed_by="ana"), when(T + 100))
    before = tree.shares("p", T + 99)
    assert before["b"] == pytest.approx(0.25)
    assert before["b/x"] == pytest.approx(0.25)
    after = tree.shares("p", T + 100)
    assert "b" not in after
    assert "b/x" not in after
    assert after["a"] == pytest.approx(1 / 3)
    assert after["c"] == pytest.approx(2 / 3)


def test_apply_folds_created_and_weight_changed_events_at_their_event_time() -> None:
    tree = BudgetTree()
    tree.apply(BudgetCreated(budget="lab", created_by="ana"), when(T))
    tree.apply(
        BudgetCreated(budget="lab/a", weight=2.0, pool_weights={"h100": 1.0}, created_by="ana"),
        when(T),
    )
    tree.apply(BudgetCreated(budget="lab/b", weight=2.0, created_by="ana"), when(T))
    tree.apply(BudgetWeightChanged(budget="lab/b", weight=6.0, changed_by="ana"), when(T + 60))
    assert tree.shares("a100", T + 30)["lab/a"] == pytest.approx(0.5)
    assert tree.shares("a100", T + 60)["lab/a"] == pytest.approx(0.25)
    assert tree.shares("h100", T + 30)["lab/a"] == pytest.approx(1 / 3)
    assert tree.shares("h100", T + 60)["lab/a"] == pytest.approx(1 / 7)


def test_sibling_order_does_not_depend_on_creation_order() -> None:
    forward = tree_of(("a", 1.0), ("b", 2.0), ("c", 3.0))
    backward = tree_of(("c", 3.0), ("b", 2.0), ("a", 1.0))
    assert forward.nodes[ROOT].children == backward.nodes[ROOT].children == ["a", "b", "c"]
    assert forward.shares("p", T) == pytest.approx(backward.shares("p", T))


# -- validation ------------------------------------------------------------------------------------
def test_child_before_its_parent_is_refused_so_no_cycle_can_form() -> None:
    tree = BudgetTree()
    with pytest.raises(BudgetTreeError, match=r"parent 'lab' of 'lab/a' does not exist"):
        tree.create("lab/a", 1.0, T)
    assert "lab/a" not in tree.nodes
    tree.create("lab", 1.0, T)
    tree.create("lab/a", 1.0, T)
    assert tree.nodes["lab"].children == ["lab/a"]
    assert parent_of("lab/a") == "lab"
    assert parent_of("lab") == ROOT


def test_duplicate_budget_is_refused_and_keeps_the_first_weight() -> None:
    tree = tree_of(("a", 1.0), ("b", 1.0))
    with pytest.raises(BudgetTreeError, match=r"'a' already exists"):
        tree.create("a", 5.0, T + 10)
    assert tree.shares("p", T + 20)["a"] == pytest.approx(0.5)
    assert tree.nodes[ROOT].children == ["a", "b"]


def test_the_root_cannot_be_created_or_addressed() -> None:
    tree = BudgetTree()
    with pytest.raises(BudgetTreeError, match="already exists"):
        tree.create(ROOT, 1.0, T)
    with pytest.raises(BudgetTreeError, match="unknown budget"):
        tree.set_weight(ROOT, 2.0, T)


@pytest.mark.parametrize("weight", [0.0, -1.0, math.nan, math.inf, -math.inf])
def test_non_positive_or_non_finite_weight_is_refused(weight: float) -> None:
    tree = tree_of(("a", 1.0))
    with pytest.raises(BudgetTreeError, match="weight: must be positive and finite"):
        tree.create("b", weight, T)
    assert "b" not in tree.nodes
    with pytest.raises(BudgetTreeError, match="weight: must be positive and finite"):
        tree.set_weight("a", weight, T + 1)
    with pytest.raises(BudgetTreeError, match="weight: must be positive and finite"):
        tree.set_weight("a", weight, T + 1, pool="h100")
    assert tree.shares("p", T + 2) == {ROOT: 1.0, "a": 1.0}
    assert tree.shares("h100", T + 2) == {ROOT: 1.0, "a": 1.0}


def test_bad_pool_weight_refuses_the_whole_creation() -> None:
    tree = tree_of(("a", 1.0))
    with pytest.raises(BudgetTreeError, match="weight"):
        tree.create("b", 1.0, T, pool_weights={"h100": 2.0, "a100": 0.0})
    assert "b" not in tree.nodes
    assert tree.nodes[ROOT].children == ["a"]


def test_unknown_budget_is_refused_with_its_name() -> None:
    tree = tree_of(("a", 1.0))
    with pytest.raises(BudgetTreeError, match=r"unknown budget 'nope'"):
        tree.set_weight("nope", 2.0, T)
    with pytest.raises(BudgetTreeError, match=r"unknown budget 'nope'"):
        tree.require_leaf("nope")
    with pytest.raises(BudgetTreeError, match=r"unknown budget 'nope'"):
        tree.apply(BudgetClosed(budget="nope", closed_by="ana"), when(T))


def test_work_must_be_funded_by_a_leaf() -> None:
    tree = tree_of(("lab", 1.0), ("lab/a", 1.0), ("lab/b", 1.0))
    tree.require_leaf("lab/a", T)
    with pytest.raises(BudgetTreeError, match=r"'lab' is not a leaf \(it has lab/a, lab/b\)"):
        tree.require_leaf("lab", T)


def test_closed_budget_refuses_work_from_its_close_time() -> None:
    tree = tree_of(("a", 1.0))
    tree.apply(BudgetClosed(budget="a", closed_by="ana"), when(T + 100))
    tree.require_leaf("a", T + 99)
    with pytest.raises(BudgetTreeError, match=r"'a' is closed"):
        tree.require_leaf("a", T + 100)


def test_leaf_under_a_closed_budget_refuses_work() -> None:
    """Closing a budget closes its subtree: the leaves under it have no share any more (see
    above), so work submitted to them could never run and must be refused."""
    tree = tree_of(("lab", 1.0), ("lab/a", 1.0), ("ops", 1.0))
    tree.apply(BudgetClosed(budget="lab", closed_by="ana"), when(T + 100))
    assert "lab/a" not in tree.shares("p", T + 100)
    tree.require_leaf("lab/a", T + 99)
    with pytest.raises(BudgetTreeError, match="closed"):
        tree.require_leaf("lab/a", T + 100)


def test_budget_tree_error_is_a_value_error() -> None:
    assert issubclass(BudgetTreeError, ValueError)


# -- memberships -----------------------------------------------------------------------------------
def test_membership_covers_the_subtree_and_can_be_revoked() -> None:
    tree = tree_of(("lab", 1.0), ("lab/a", 1.0), ("ops", 1.0))
    tree.apply(MembershipGranted(budget="lab", user="bo", role="member", granted_by="ana"), when(T))
    tree.apply(
        MembershipGranted(budget="lab/a", user="cy", role="manager", granted_by="ana"), when(T)
    )
    assert tree.is_member("bo", "lab/a")
    assert tree.is_member("bo", "lab")
    assert not tree.is_member("bo", "ops")
    assert not tree.is_member("bo", "lab/a", role="manager")
    assert tree.is_member("cy", "lab/a", role="manager")
    assert not tree.is_member("cy", "lab", role="manager")
    tree.apply(MembershipRevoked(budget="lab", user="bo", role="member", revoked_by="ana"), when(T))
    assert not tree.is_member("bo", "lab/a")


def test_ancestors_run_from_top_to_the_budget_itself() -> None:
    assert BudgetTree().ancestors("lab/robotics/sim2real") == [
        "lab",
        "lab/robotics",
        "lab/robotics/sim2real",
    ]
