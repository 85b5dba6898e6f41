"""Writes of ``/budgets``: create a budget, close one, set its weight (members:
:mod:`.members`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from events.envelope import Envelope
from events.models import BudgetClosed, BudgetCreated, BudgetWeightChanged
from projections.budget_tree import ROOT, BudgetNode, BudgetTree, parent_of
from projections.live_state import LiveState
from services.api import auth, queries
from services.api import models as m
from services.api.application import Application, Result
from services.api.auth import Principal
from services.api.errors import Conflict, Forbidden, Invalid, NotFound
from services.api.writes.skeleton import Publish, Unchanged, write


def accepted_on(budget: str) -> Callable[[Envelope[Any]], m.BudgetAccepted]:
    """The answer of a write to ``budget`` (or its members) recorded but not yet visible."""
    return lambda envelope: m.BudgetAccepted(event_id=envelope.id, budget=budget)


#: A rule of who may write to a budget (:mod:`services.api.auth`): None, or why not.
Permission = Callable[[Principal, BudgetTree, str], str | None]


def allowed_on(
    state: LiveState, who: Principal, budget: str, may: Permission = auth.may_manage
) -> None:
    """``budget`` exists (404) and ``who`` may write to it by ``may`` (403): the first check of
    every write to a budget, its members or its namespaces."""
    queries.budget_or_404(state, budget)
    refusal = may(who, state.tree, budget)
    if refusal is not None:
        raise Forbidden(refusal, user=who.user)


def set_weight(
    app: Application, who: Principal, budget: str, body: m.WeightRequest
) -> Result[m.WeightAnswer]:
    """Set a budget's weight (in every pool, or in ``body.pool``): a manager of its parent."""

    def check(state: LiveState) -> Unchanged[m.WeightAnswer] | Publish[m.WeightAnswer]:
        allowed_on(state, who, budget, auth.may_set_weight)
        if not state.tree.nodes[budget].open_at(app.clock()):
            raise Conflict(f"budget {budget} is closed", user=who.user)
        if body.pool is not None and body.pool not in state.cluster.pools:
            known = ", ".join(sorted(state.cluster.pools)) or "none"
            raise Invalid("pool", f"unknown pool {body.pool!r} (known: {known})", user=who.user)
        data = BudgetWeightChanged(
            budget=budget,
            weight=body.weight,
            pool=body.pool,
            changed_by=who.user,
            reason=body.reason,
        )
        return Publish(
            data,
            lambda envelope: m.WeightSet(
                budget=budget, weight=body.weight, pool=body.pool, event_id=envelope.id
            ),
        )

    return write(app, who, check, accepted_on(budget))


def create_budget(
    app: Application, who: Principal, body: m.BudgetCreateRequest
) -> Result[m.BudgetAnswer]:
    """A new budget under an open parent: a manager of the parent (top-level: admins).
    UNCHANGED if it exists with these weights; a parent that funds work gets no children (its
    work would lose its leaf)."""

    def check(state: LiveState) -> Unchanged[m.BudgetAnswer] | Publish[m.BudgetAnswer]:
        now = app.clock()
        existing = _check_new_budget(state, who, body, now)
        if existing is not None:
            return Unchanged(_budget_state(body.budget, existing, now, False))
        data = BudgetCreated(
            budget=body.budget,
            weight=body.weight,
            pool_weights=dict(body.pool_weights),
            created_by=who.user,
            description=body.description,
        )
        return Publish(data, lambda _: _budget_now(app, body.budget))

    return write(app, who, check, accepted_on(body.budget), lock=app.budget_lock)


def _check_new_budget(
    state: LiveState, who: Principal, body: m.BudgetCreateRequest, now: float
) -> BudgetNode | None:
    """The existing budget if it is the same (None: create it); refusals raised in the API's
    order: 404, 422, 403, 409."""
    tree, budget = state.tree, body.budget
    parent = parent_of(budget)
    if parent != ROOT and parent not in tree.nodes:
        raise NotFound(f"unknown budget {parent!r} (the parent of {budget})", user=who.user)
    for pool in body.pool_weights:
        if pool not in state.cluster.pools:
            known = ", ".join(sorted(state.cluster.pools)) or "none"
            raise Invalid(("pool_weights", pool), f"unknown pool {pool!r} (known: {known})")
    refusal = auth.may_set_weight(who, tree, budget)
    if refusal is not None:
        raise Forbidden(refusal, user=who.user)
    existing = tree.nodes.get(budget)
    if existing is not None:
        if not existing.open_at(now):
            raise Conflict(f"budget {budget} was closed; a budget's path is never reused")
        weights = {p: existing.weight_at(p, now) for p in existing.pool_weights}
        if existing.weight_at("", now) == body.weight and weights == dict(body.pool_weights):
            return existing
        raise Conflict(
            f"budget {budget} exists with other weights; change them with PUT "
            f"/budgets/{budget}/weight",
            user=who.user,
        )
    if parent != ROOT:
        closed = [a for a in tree.ancestors(parent) if not tree.nodes[a].open_at(now)]
        if closed:
            raise Conflict(f"budget {parent} is closed ({closed[0]} was closed)", user=who.user)
        working = _unfinished_work(state, parent)
        if tree.nodes[parent].is_leaf and working:
            raise Conflict(
                f"{parent} funds work that has not ended ({working[0]}"
                f"{' and more' if len(working) > 1 else ''}): a budget with work cannot get "
                "children, its work would no longer be funded by a leaf",
                user=who.user,
            )
    return None


def _unfinished_work(state: LiveState, budget: str) -> list[str]:
    return sorted(
        w.workload_id
        for w in state.cluster.workloads.values()
        if w.budget == budget and not queries.finished(state, w)
    )


def close_budget(
    app: Application, who: Principal, budget: str, body: m.BudgetCloseRequest
) -> Result[m.BudgetAnswer]:
    """Close a budget (its subtree takes no new work, its work waits last): a manager of its
    parent (top-level: admins). UNCHANGED if it is closed already."""

    def check(state: LiveState) -> Unchanged[m.BudgetAnswer] | Publish[m.BudgetAnswer]:
        now = app.clock()
        allowed_on(state, who, budget, auth.may_set_weight)
        node = state.tree.nodes[budget]
        if not node.open_at(now):
            return Unchanged(_budget_state(budget, node, now, False))
        data = BudgetClosed(budget=budget, closed_by=who.user, reason=body.reason)
        return Publish(data, lambda _: _budget_now(app, budget))

    return write(app, who, check, accepted_on(budget), lock=app.budget_lock)


def _budget_now(app: Application, budget: str) -> m.BudgetState:
    """The budget as the view shows it once the write is visible."""
    now = app.clock()
    with app.view.read() as state:
        return _budget_state(budget, state.tree.nodes[budget], now, True)


def _budget_state(budget: str, node: BudgetNode, now: float, changed: bool) -> m.BudgetState:
    return m.BudgetState(
        budget=budget,
        parent=parent_of(budget) or None,
        leaf=node.is_leaf,
        closed=not node.open_at(now),
        weight=node.weight_at("", now),
        pool_weights={p: node.weight_at(p, now) for p in sorted(node.pool_weights)},
        changed=changed,
    )
