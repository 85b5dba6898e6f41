"""The budget tree as a fold over budget events: who funds what, with which share, when.

A node's share in a pool is its weight over its siblings' total, times its parent's share; the
top-level budgets are siblings under an implicit root of share 1. Weights are *histories*, not
values: a change takes effect from its event time onward, so the share at any past instant (an
audit, a replay) is the share that was in force then.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from dataclasses import dataclass, field

from events.models import (
    BudgetClosed,
    BudgetCreated,
    BudgetWeightChanged,
    EventData,
    MembershipGranted,
    MembershipRevoked,
    PriceSet,
)
from projections.errors import FoldError, MissingFact
from projections.price_book import PriceBook

ROOT = ""


class BudgetTreeError(FoldError):
    """An event or request that the tree cannot accept; the message says why."""


class MissingBudgetError(BudgetTreeError, MissingFact):
    """A budget (or the parent of a new one) the tree has not seen created."""


def parent_of(path: str) -> str:
    return path.rpartition("/")[0]


@dataclass(slots=True)
class BudgetNode:
    path: str
    children: list[str] = field(default_factory=list)
    #: (effective time as epoch seconds, weight), in time order.
    weights: list[tuple[float, float]] = field(default_factory=list)
    pool_weights: dict[str, list[tuple[float, float]]] = field(default_factory=dict)
    closed_at: float | None = None
    members: dict[str, set[str]] = field(default_factory=dict)

    @property
    def is_leaf(self) -> bool:
        return not self.children

    def weight_at(self, pool: str, at: float) -> float:
        history = self.pool_weights.get(pool)
        if history and history[0][0] <= at:
            return _value_at(history, at)
        return _value_at(self.weights, at)

    def open_at(self, at: float) -> bool:
        return self.closed_at is None or at < self.closed_at


def _value_at(history: list[tuple[float, float]], at: float) -> float:
    index = bisect_right(history, (at, float("inf"))) - 1
    return history[max(index, 0)][1]


def _insert(history: list[tuple[float, float]], at: float, weight: float) -> None:
    history.insert(bisect_right(history, (at, float("inf"))), (at, weight))


class BudgetTree:
    def __init__(self) -> None:
        self.nodes: dict[str, BudgetNode] = {ROOT: BudgetNode(ROOT, weights=[(float("-inf"), 1.0)])}
        self._change_times: list[float] = []
        self._share_cache: dict[tuple[str, int], dict[str, float]] = {}

    # -- the fold -------------------------------------------------------------------------
    def apply(self, data: EventData, at: float) -> None:
        """Fold one budget event in at ``at`` (epoch seconds, like every fold). Raises
        BudgetTreeError for an event the tree rejects (MissingBudgetError if it may apply later)."""
        when = at
        if isinstance(data, BudgetCreated):
            self.create(data.budget, data.weight, when, data.pool_weights)
        elif isinstance(data, BudgetWeightChanged):
            self.set_weight(data.budget, data.weight, when, data.pool)
        elif isinstance(data, BudgetClosed):
            self._node(data.budget).closed_at = when
            self._changed(when)
        elif isinstance(data, MembershipGranted):
            self._node(data.budget).members.setdefault(data.user, set()).add(data.role)
        elif isinstance(data, MembershipRevoked):
            self._node(data.budget).members.get(data.user, set()).discard(data.role)
        elif isinstance(data, PriceSet):
            self.prices.apply(data, when)

    @property
    def prices(self) -> PriceBook:
        """The prices in force (they travel on the budgets topic, beside the weights). Made on
        first use, so that a tree restored from a checkpoint written before prices has one."""
        book = self.__dict__.get("_prices")
        if book is None:
            book = self.__dict__["_prices"] = PriceBook()
        return book

    def create(
        self, path: str, weight: float, at: float, pool_weights: dict[str, float] | None = None
    ) -> None:
        if path in self.nodes:
            raise BudgetTreeError(f"budget: {path!r} already exists")
        parent = parent_of(path)
        if parent not in self.nodes:
            raise MissingBudgetError(f"budget: parent {parent!r} of {path!r} does not exist")
        _check_weight(weight)
        node = BudgetNode(path, weights=[(at, weight)])
        for pool, pool_weight in (pool_weights or {}).items():
            _check_weight(pool_weight)
            node.pool_weights[pool] = [(at, pool_weight)]
        self.nodes[path] = node
        siblings = self.nodes[parent].children
        siblings.append(path)
        siblings.sort()
        self._changed(at)

    def set_weight(self, path: str, weight: float, at: float, pool: str | None = None) -> None:
        node = self._node(path)
        _check_weight(weight)
        _insert(node.pool_weights.setdefault(pool, []) if pool else node.weights, at, weight)
        self._changed(at)

    # -- queries ---------------------------------------------------------------------------
    def change_times(self, lo: float, hi: float) -> list[float]:
        """Instants in ``(lo, hi)`` at which some share changes (a budget created or closed, a
        weight changed): between two of them every share is constant."""
        first = bisect_right(self._change_times, lo)
        last = bisect_left(self._change_times, hi)
        return self._change_times[first:last]

    def _node(self, path: str) -> BudgetNode:
        node = self.nodes.get(path)
        if node is None or path == ROOT:
            raise MissingBudgetError(f"budget: unknown budget {path!r}")
        return node

    def _changed(self, at: float) -> None:
        self._change_times.insert(bisect_right(self._change_times, at), at)
        self._share_cache.clear()

    def require_leaf(self, path: str, at: float | None = None) -> None:
        """A workload must be funded by an existing, open leaf budget."""
        node = self._node(path)
        if not node.is_leaf:
            raise BudgetTreeError(
                f"budget: {path!r} is not a leaf (it has {', '.join(node.children)}); "
                "submit to one of its children"
            )
        if at is not None:
            for ancestor in self.ancestors(path):
                if not self.nodes[ancestor].open_at(at):
                    raise BudgetTreeError(f"budget: {path!r} is closed ({ancestor!r} was closed)")

    def leaves(self) -> list[str]:
        return sorted(p for p, n in self.nodes.items() if p != ROOT and n.is_leaf)

    def ancestors(self, path: str) -> list[str]:
        """From the top-level budget down to ``path`` itself."""
        parts = path.split("/")
        return ["/".join(parts[: i + 1]) for i in range(len(parts))]

    def shares(self, pool: str, at: float) -> dict[str, float]:
        """Every open budget's share of ``pool`` at time ``at`` (the root's is 1)."""
        key = (pool, bisect_right(self._change_times, at))
        cached = self._share_cache.get(key)
        if cached is not None:
            return cached
        shares: dict[str, float] = {ROOT: 1.0}
        stack = [ROOT]
        while stack:
            parent = stack.pop()
            live = [
                (child, self.nodes[child].weight_at(pool, at))
                for child in self.nodes[parent].children
                if self.nodes[child].open_at(at) and self.nodes[child].weights[0][0] <= at
            ]
            total = sum(weight for _, weight in live)
            for child, weight in live:
                shares[child] = shares[parent] * weight / total if total > 0 else 0.0
                stack.append(child)
        self._share_cache[key] = shares
        return shares

    def is_member(self, user: str, path: str, role: str = "member") -> bool:
        """Whether ``user`` holds ``role`` on ``path`` or any ancestor (roles cover subtrees)."""
        for ancestor in self.ancestors(path):
            node = self.nodes.get(ancestor)
            if node is not None and role in node.members.get(user, set()):
                return True
        return False


def _check_weight(weight: float) -> None:
    if not weight > 0 or weight != weight or weight == float("inf"):
        raise BudgetTreeError(f"weight: must be positive and finite, got {weight!r}")
