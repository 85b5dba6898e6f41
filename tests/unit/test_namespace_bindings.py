"""Which Kubernetes namespaces may charge which budgets (projections/bindings.py): the fold of
GroupBound/GroupUnbound and the one rule an agent asks, ``namespace_budget``; checked case by
case and, on any sequence of binds, unbinds and closes, against a plain model of the rules
(docs/design.md 2.1: a later default replaces the earlier one; a closed budget's bindings no
longer count)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from events.envelope import Envelope, new_event
from events.models import (
    BudgetClosed,
    BudgetCreated,
    EventData,
    GroupBound,
    GroupUnbound,
)
from events.registry import default_registry
from projections.bindings import Charge, GroupBindings, Refusal, namespace_budget
from projections.budget_tree import BudgetTree, BudgetTreeError, MissingBudgetError
from projections.live_state import LiveState
from projections.trust import API, STATED_BY

T0 = 1_800_000_000.0


def _tree(*paths: str) -> BudgetTree:
    tree = BudgetTree()
    for path in paths:
        tree.apply(BudgetCreated(budget=path, created_by="admin"), T0)
    return tree


def bound(budget: str, ns: str = "ml", default: bool = False, cluster: str = "k1") -> GroupBound:
    return GroupBound(budget=budget, cluster=cluster, group=ns, default=default, bound_by="chen")


def unbound(budget: str, ns: str = "ml", cluster: str = "k1") -> GroupUnbound:
    return GroupUnbound(budget=budget, cluster=cluster, group=ns, unbound_by="chen")


def test_a_label_charges_a_bound_budget_and_no_label_the_default() -> None:
    tree = _tree("lab", "lab/a", "lab/b", "lab/c")
    b = GroupBindings()
    b.apply(bound("lab/a", default=True), T0, tree)
    b.apply(bound("lab/b"), T0, tree)
    assert namespace_budget(b, tree, "k1", "ml", None) == Charge("lab/a", by_default=True)
    assert namespace_budget(b, tree, "k1", "ml", "lab/b") == Charge("lab/b", by_default=False)
    # label values cannot hold '/': the same path with '.' names it too
    assert namespace_budget(b, tree, "k1", "ml", "lab.b") == Charge("lab/b", by_default=False)
    refused = namespace_budget(b, tree, "k1", "ml", "lab/c")
    assert isinstance(refused, Refusal)
    assert refused.code == "not-bound-to"
    assert "'lab/c', which namespace 'ml' of cluster 'k1' is not bound to" in refused.reason
    assert "lab/a, lab/b" in refused.reason


@pytest.mark.parametrize(
    ("cluster", "namespace", "label", "code", "needle"),
    [
        ("k2", "ml", None, "unbound", "bound to no budget"),  # another cluster's namespace
        ("k1", "web", "lab/a", "unbound", "bound to no budget"),
        ("k1", "Ml", None, "malformed", "DNS-1123"),
        ("k1", "ml", "lab a", "malformed", "is not a budget path"),
        ("k1", "ml", "", "malformed", "is not a budget path"),
        ("k1", "ml", "lab/c", "not-bound-to", "not bound to"),
    ],
)
def test_refusals_say_why(
    cluster: str, namespace: str, label: str | None, code: str, needle: str
) -> None:
    tree = _tree("lab", "lab/a", "lab/c")
    b = GroupBindings()
    b.apply(bound("lab/a"), T0, tree)
    refused = namespace_budget(b, tree, cluster, namespace, label)
    assert isinstance(refused, Refusal), refused
    assert (refused.code, refused.ok) == (code, False)
    assert needle in refused.reason
    assert refused.reason.endswith(".")
    assert "\n" not in refused.reason


def test_no_label_and_no_default_is_refused_naming_what_it_may_charge() -> None:
    tree = _tree("lab", "lab/a")
    b = GroupBindings()
    b.apply(bound("lab/a"), T0, tree)
    refused = namespace_budget(b, tree, "k1", "ml", None)
    assert isinstance(refused, Refusal)
    assert refused.code == "no-default"
    assert "no default budget; it may charge lab/a" in refused.reason


def test_a_later_default_replaces_the_earlier_which_stays_bound() -> None:
    tree = _tree("lab", "lab/a", "lab/b")
    b = GroupBindings()
    b.apply(bound("lab/a", default=True), T0, tree)
    b.apply(bound("lab/b", default=True), T0 + 1, tree)
    assert namespace_budget(b, tree, "k1", "ml", None) == Charge("lab/b", by_default=True)
    assert [(x.budget, x.default) for x in b.of_group("k1", "ml")] == [
        ("lab/a", False),
        ("lab/b", True),
    ]
    assert namespace_budget(b, tree, "k1", "ml", "lab/a") == Charge("lab/a", by_default=False)
    # unbinding the default leaves none: the earlier one does not come back
    b.apply(unbound("lab/b"), T0 + 2, tree)
    assert b.default_of("k1", "ml") is None
    # restating a binding without default takes the default away
    b.apply(bound("lab/a", default=True), T0 + 3, tree)
    b.apply(bound("lab/a", default=False), T0 + 4, tree)
    assert b.default_of("k1", "ml") is None


def test_bindings_to_a_closed_budget_stop_counting() -> None:
    tree = _tree("lab", "lab/a", "lab/b", "other", "other/x")
    b = GroupBindings()
    b.apply(bound("lab/a", default=True), T0, tree)
    b.apply(bound("other/x"), T0, tree)
    tree.apply(BudgetClosed(budget="lab/a", closed_by="chen"), T0 + 1)
    tree.apply(BudgetClosed(budget="other", closed_by="admin"), T0 + 1)
    refused = namespace_budget(b, tree, "k1", "ml", None)
    assert isinstance(refused, Refusal)
    assert refused.code == "closed"
    assert "default budget 'lab/a' is closed" in refused.reason
    refused = namespace_budget(b, tree, "k1", "ml", "other/x")
    assert isinstance(refused, Refusal)
    assert refused.code == "closed"
    assert "'other' was closed" in refused.reason
    # a closed budget takes no new binding
    with pytest.raises(BudgetTreeError, match="closed"):
        b.apply(bound("lab/a", ns="web"), T0 + 2, tree)


def test_a_budget_that_became_a_parent_no_longer_counts() -> None:
    tree = _tree("lab", "lab/a")
    b = GroupBindings()
    b.apply(bound("lab/a"), T0, tree)
    tree.apply(BudgetCreated(budget="lab/a/x", created_by="chen"), T0 + 1)
    refused = namespace_budget(b, tree, "k1", "ml", "lab/a")
    assert isinstance(refused, Refusal)
    assert "no longer a leaf" in refused.reason


def test_the_fold_refuses_a_parent_and_waits_for_an_unknown_budget() -> None:
    tree = _tree("lab", "lab/a")
    b = GroupBindings()
    with pytest.raises(BudgetTreeError, match="not a leaf"):
        b.apply(bound("lab"), T0, tree)
    with pytest.raises(MissingBudgetError):
        b.apply(bound("lab/zz"), T0, tree)
    with pytest.raises(MissingBudgetError):
        b.apply(unbound("lab/zz"), T0, tree)
    with pytest.raises(BudgetTreeError, match="not bound"):
        b.apply(unbound("lab/a"), T0, tree)
    assert b.all() == []


def test_the_event_checks_the_namespace_name_and_round_trips() -> None:
    for name in ("Ml", "-ml", "ml-", "m" * 64, "ml.x", "ml_x"):
        with pytest.raises(ValidationError, match="DNS-1123"):
            bound("lab/a", ns=name)
    data = bound("lab/a", ns="m" * 63, default=True)
    envelope = new_event(data, source="tests", time=datetime.fromtimestamp(T0, UTC))
    assert default_registry().model_for(envelope.type) is GroupBound
    assert envelope.subject == "lab/a"
    assert data.kind == "kubernetes-namespace"
    assert API in STATED_BY[GroupBound]
    assert API in STATED_BY[GroupUnbound]


def _at(data: EventData, seconds: float) -> Envelope[Any]:
    return new_event(
        data, source="tests", time=datetime.fromtimestamp(T0, UTC) + timedelta(seconds=seconds)
    )


def test_the_live_state_folds_bindings_after_their_budget() -> None:
    state = LiveState()
    # a binding read before its budget waits for it
    assert not state.apply(_at(bound("lab/a", default=True), 1))
    assert state.apply(_at(BudgetCreated(budget="lab", created_by="admin"), 2))
    assert state.apply(_at(BudgetCreated(budget="lab/a", created_by="admin"), 3))
    assert namespace_budget(state.bindings, state.tree, "k1", "ml", None) == Charge(
        "lab/a", by_default=True
    )
    # a binding of a parent is rejected, not held
    assert not state.apply(_at(bound("lab", ns="web"), 4))
    assert "not a leaf" in state.rejected[-1].reason
    assert state.waiting == []
    # an old checkpoint without bindings restores with none
    old = state.__getstate__()
    del old["bindings"]
    restored = LiveState.__new__(LiveState)
    restored.__setstate__(old)
    assert restored.bindings.all() == []


# -- any sequence against a plain model -----------------------------------------------------
LEAVES = ("t/a", "t/b", "u/c")
NAMESPACES = ("ml", "web")

Step = tuple[str, str, str, bool]  # (op, budget, namespace, default)
steps = st.lists(
    st.tuples(
        st.sampled_from(("bind", "unbind", "close")),
        st.sampled_from((*LEAVES, "u")),
        st.sampled_from(NAMESPACES),
        st.booleans(),
    ),
    max_size=25,
)
labels = st.sampled_from((None, *LEAVES, "t.a", "u.c", "t", "zz/z", "bad label"))


def _model(sequence: list[Step]) -> tuple[dict[str, set[str]], dict[str, str | None], set[str]]:
    """Bound budgets and default per namespace, and closed budgets, as the rules say."""
    bound_to: dict[str, set[str]] = {ns: set() for ns in NAMESPACES}
    default: dict[str, str | None] = dict.fromkeys(NAMESPACES)
    closed: set[str] = set()
    for op, budget, ns, is_default in sequence:
        budget_closed = any(budget == c or budget.startswith(c + "/") for c in closed)
        if op == "close":
            closed.add(budget)
        elif op == "bind" and budget in LEAVES and not budget_closed:
            bound_to[ns].add(budget)
            if is_default:
                default[ns] = budget
            elif default[ns] == budget:
                default[ns] = None
        elif op == "unbind" and budget in bound_to[ns]:
            bound_to[ns].discard(budget)
            if default[ns] == budget:
                default[ns] = None
    return bound_to, default, closed


def _expected(sequence: list[Step], ns: str, label: str | None) -> str | None:
    bound_to, default, closed = _model(sequence)
    if label is not None and " " in label:
        return None
    if not bound_to[ns]:
        return None
    wanted = default[ns] if label is None else label.replace(".", "/")
    if wanted not in bound_to[ns]:
        return None
    if any(wanted == c or wanted.startswith(c + "/") for c in closed):
        return None
    return wanted


@settings(max_examples=300, deadline=None)
@given(steps, st.sampled_from(NAMESPACES), labels)
def test_any_sequence_answers_as_the_model(
    sequence: list[Step], ns: str, label: str | None
) -> None:
    tree = _tree("t", "u", *LEAVES)
    b = GroupBindings()
    for i, (op, budget, name, is_default) in enumerate(sequence):
        try:
            if op == "close":
                tree.apply(BudgetClosed(budget=budget, closed_by="admin"), T0 + i)
            elif op == "bind":
                b.apply(bound(budget, ns=name, default=is_default), T0 + i, tree)
            else:
                b.apply(unbound(budget, ns=name), T0 + i, tree)
        except BudgetTreeError:
            pass  # refused by the fold: changes nothing (the model skips it too)
    answer = namespace_budget(b, tree, "k1", ns, label)
    expected = _expected(sequence, ns, label)
    if expected is None:
        assert isinstance(answer, Refusal), (answer, sequence)
    else:
        assert answer == Charge(expected, by_default=label is None), sequence
    bound_to, default, _ = _model(sequence)
    assert {x.budget for x in b.of_group("k1", ns)} == bound_to[ns]
    assert b.default_of("k1", ns) == default[ns]
