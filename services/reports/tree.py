"""The budget tree as the read models know it: each budget from its creation to its closing,
with the weights it had over time, so a past period is priced with the shares then in force."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable

from events.models import BudgetClosed
from projections.budget_tree import BudgetTree, BudgetTreeError
from services.reports.source import Budget, WeightChange


def build_tree(found: Iterable[Budget], weights: Iterable[WeightChange]) -> BudgetTree:
    """The budget tree of the read models, each budget from its creation to its closing, with
    the weights it had over time (its current weights where no history was recorded)."""
    history: dict[str, list[tuple[int, str, float]]] = defaultdict(list)
    for change in weights:
        history[change.budget].append((change.effective_at, change.pool, change.weight))
    tree = BudgetTree()
    budgets = sorted(found, key=lambda b: b.budget)
    for budget in budgets:
        weight, pool_weights = budget.weight, budget.pool_weights
        initial = [(pool, w) for at, pool, w in history[budget.budget] if at <= budget.created_at]
        if initial:
            weight = next((w for pool, w in reversed(initial) if pool == ""), weight)
            pool_weights = {pool: w for pool, w in initial if pool}
        try:
            tree.create(budget.budget, weight, float(budget.created_at), pool_weights)
        except BudgetTreeError:
            continue  # a parent missing from the table: no share can be computed under it
        for at, pool, w in history[budget.budget]:
            if at > budget.created_at:
                tree.set_weight(budget.budget, w, float(at), pool or None)
    for budget in budgets:
        if budget.closed_at is not None and budget.budget in tree.nodes:
            closed = BudgetClosed(budget=budget.budget, closed_by="read-models")
            tree.apply(closed, float(budget.closed_at))
    return tree


def open_during(tree: BudgetTree, path: str, start: float, end: float) -> bool:
    """Whether budget ``path`` was open at some moment of ``[start, end)``."""
    node = tree.nodes[path]
    created = node.weights[0][0] if node.weights else float("-inf")
    return created < end and (node.closed_at is None or node.closed_at > start)
