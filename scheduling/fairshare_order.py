"""Hierarchical fair-share order (Slurm Fair Tree style) over windowed usage.

Among siblings, a budget ranks by ``U / (share x capacity x window)`` ascending: the budget that
used least of what it was entitled to comes first; no usage ranks first; ties go to the larger
share, then the path (deterministic). Walking the tree depth first in that order gives the order
of leaves, so everything under an under-served sibling precedes everything under an over-served
one. Within a pass, :meth:`FairShareOrder.charge` adds a placement's expected charge up the tree
before the next pick, so one budget cannot take every free GPU at once.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from functools import lru_cache

from projections.budget_tree import ROOT, BudgetTree, parent_of
from projections.cluster_state import ClusterState
from scheduling.gang_turn import Waiting, due

#: (0 while holding less than its entitlement else 1, usage ratio, -share, path)
Key = tuple[int, float, float, str]


class FairShareOrder:
    def __init__(
        self,
        tree: BudgetTree,
        pool: str,
        at: float,
        leaf_usage: Mapping[str, float],
        capacity: int,
        window_s: int,
        leaf_held: Mapping[str, float] | None = None,
        waiting: Mapping[str, Waiting] | None = None,
    ) -> None:
        """``waiting``: each leaf's pending allocated work (``gang_turn.waiting_by_leaf``),
        for the gang's turn; none: no budget is due one."""
        self.pool = pool
        self.at = at
        self.window_s = window_s
        self.waiting: Mapping[str, Waiting] = waiting or {}
        self.shares = tree.shares(pool, at)
        self.children: dict[str, list[str]] = {}
        for path in self.shares:
            if path != ROOT:
                self.children.setdefault(parent_of(path), []).append(path)
        self.scale = float(max(capacity, 1) * window_s)
        self.capacity = capacity
        #: Allocated GPUs each tree node holds in the pool now (see :meth:`hold`).
        self.held = self._subtree_sums(leaf_held or {})
        self.usage = self._subtree_sums(leaf_usage)
        # Keys are cached and refreshed up the path on every charge: picking the next leaf
        # then only compares tuples.
        self._keys: dict[str, Key] = {path: self.key(path) for path in self.shares}
        self._active: dict[str, int] = dict.fromkeys(self.shares, 0)
        self._ranks: dict[str, int] | None = None

    def _subtree_sums(self, by_leaf: Mapping[str, float]) -> dict[str, float]:
        sums: dict[str, float] = dict.fromkeys(self.shares, 0.0)
        for leaf, amount in by_leaf.items():
            if leaf in sums:
                sums[leaf] += amount
        for path in sorted(self.shares, key=lambda p: (-p.count("/"), p)):  # deepest first
            kids = self.children.get(path)
            if path != ROOT and kids:
                sums[path] = sum(sums[child] for child in kids)
        sums[ROOT] = sum(sums[child] for child in self.children.get(ROOT, ()))
        return sums

    def _add(self, leaf: str, amount: float) -> None:
        path = leaf
        while True:
            self.usage[path] += amount
            self._keys[path] = self.key(path)
            if path == ROOT:
                return
            path = parent_of(path)

    def ratio(self, path: str) -> float:
        share = self.shares.get(path, 0.0)
        if share <= 0:
            return float("inf")
        return self.usage.get(path, 0.0) / (share * self.scale)

    def key(self, path: str, extra: float = 0.0) -> Key:
        share = self.shares.get(path, 0.0)
        used = self.usage.get(path, 0.0) + extra
        ratio = used / (share * self.scale) if share > 0 else float("inf")
        below = share > 0 and (self.held.get(path, 0.0) < share * self.capacity or self.due(path))
        return (0 if below else 1, ratio, -share, path)

    def due_at(self, leaf: str) -> float | None:
        """When ``leaf`` becomes due its gang's turn by waiting alone (its usage and holdings
        as they are now), if it is not due now and will be within the window; else None."""
        waiting = self.waiting.get(leaf)
        entitled = self.entitled(leaf)
        if waiting is None or entitled <= 0 or self.due(leaf):
            return None
        held = self.held.get(leaf, 0.0)
        if waiting.smallest_gpus <= entitled - held or held >= waiting.smallest_gpus:
            return None
        waited = self.usage.get(leaf, 0.0) / entitled  # owed exceeds it after this long
        if waited >= self.window_s:
            return None
        return waiting.since + waited + 1.0

    def due(self, leaf: str) -> bool:
        """Whether ``leaf`` is due its gang's turn now (``gang_turn.py``): then it ranks with
        the budgets below their entitlement and its request is not counted against it."""
        waiting = self.waiting.get(leaf)
        if waiting is None:
            return False
        return due(
            waiting,
            self.entitled(leaf),
            self.held.get(leaf, 0.0),
            self.usage.get(leaf, 0.0),
            self.at,
            self.window_s,
        )

    # -- picking leaves with work, in order ---------------------------------------------------
    def activate(self, leaves: Iterable[str]) -> None:
        for leaf in leaves:
            if leaf in self.shares and not self.children.get(leaf):
                path = leaf
                while True:
                    self._active[path] += 1
                    if path == ROOT:
                        break
                    path = parent_of(path)

    def deactivate(self, leaf: str) -> None:
        path = leaf
        while True:
            self._active[path] -= 1
            if path == ROOT:
                return
            path = parent_of(path)

    def best_leaf(self) -> str | None:
        """The first active leaf in fair-share order (descending from the root)."""
        if self._active.get(ROOT, 0) <= 0:
            return None
        path = ROOT
        while True:
            kids = self.children.get(path)
            if not kids:
                return path
            best: str | None = None
            best_key: Key | None = None
            keys = self._keys
            for child in kids:
                if self._active[child] > 0:
                    child_key = keys[child]
                    if best_key is None or child_key < best_key:
                        best, best_key = child, child_key
            if best is None:
                return None
            path = best

    def charge(self, leaf: str, gpu_seconds: float) -> None:
        if leaf in self.usage:
            self._add(leaf, gpu_seconds)

    def hold(self, leaf: str, gpus: float) -> None:
        """Count ``gpus`` more (or fewer) allocated GPUs held by ``leaf`` and its ancestors."""
        if leaf not in self.held:
            return
        path = leaf
        while True:
            self.held[path] += gpus
            self._keys[path] = self.key(path)
            if path == ROOT:
                return
            path = parent_of(path)

    def side_of(self, victim_leaf: str, preemptor_leaf: str) -> tuple[str, str] | None:
        """The ancestors of the two leaves that are siblings (where their paths part), or None
        when one is an ancestor of the other."""
        return _sibling_sides(victim_leaf, preemptor_leaf)

    def entitled(self, path: str) -> float:
        """GPUs of the pool ``path`` is entitled to right now: ``share x capacity``."""
        return self.shares.get(path, 0.0) * self.capacity

    # -- comparisons for preemption and reporting -----------------------------------------
    def ranks_behind(self, victim_leaf: str, preemptor_leaf: str, preemptor_extra: float) -> bool:
        """Whether the victim's budget ranks behind the preemptor's once the preemptor's own
        request is counted (at the level where their paths part)."""
        if victim_leaf == preemptor_leaf:
            return False
        if victim_leaf not in self.shares:
            return True  # work of a budget that no longer has a share is behind everyone
        if preemptor_leaf not in self.shares:
            return False
        sides = _sibling_sides(victim_leaf, preemptor_leaf)
        if sides is None:
            return False  # one is an ancestor of the other: not siblings at any level
        victim_side, preemptor_side = sides
        return self._keys[victim_side] > self.key(preemptor_side, preemptor_extra)

    def slack(self, victim_leaf: str, preemptor_leaf: str, preemptor_extra: float) -> float:
        """How far the victim's budget ranks behind the preemptor's, relative, once the
        preemptor's own request is counted (at the level where their paths part): the victim
        side's usage ratio over the preemptor side's, minus 1. ``-inf`` where the victim may
        never be preempted for this preemptor (same budget, or not siblings at any level);
        ``inf`` where any usage is too much (a preemptor side with none, a victim without a
        share)."""
        never = float("-inf")
        if victim_leaf == preemptor_leaf or preemptor_leaf not in self.shares:
            return never
        if victim_leaf not in self.shares:
            return float("inf")
        sides = _sibling_sides(victim_leaf, preemptor_leaf)
        if sides is None:
            return never
        victim_side, preemptor_side = sides
        victim_ratio = self._keys[victim_side][1]
        preemptor_ratio = self.key(preemptor_side, preemptor_extra)[1]
        if preemptor_ratio == float("inf"):
            return never
        if preemptor_ratio <= 0:
            return float("inf") if victim_ratio > 0 else never
        return victim_ratio / preemptor_ratio - 1.0

    def ranks(self) -> dict[str, int]:
        """Rank (1 = first) of every leaf in this order, as it stood when first asked."""
        if self._ranks is None:
            self._ranks = {leaf: i + 1 for i, leaf in enumerate(self.leaf_order())}
        return self._ranks

    def leaf_order(self) -> list[str]:
        """All leaves, depth first in fair-share order."""
        ordered: list[str] = []
        stack = [ROOT]
        while stack:
            path = stack.pop()
            kids = self.children.get(path)
            if not kids:
                if path != ROOT:
                    ordered.append(path)
                continue
            stack.extend(sorted(kids, key=self.key, reverse=True))
        return ordered


def held_by_leaf(cluster: ClusterState, pool: str) -> dict[str, float]:
    """Allocated GPUs each leaf budget holds in ``pool`` now (placed or running, not being
    preempted): what :class:`FairShareOrder` compares with entitlements. The fold keeps the
    count (``ClusterIndexes.held``); :func:`count_held` is the reference it is tested against."""
    return {
        budget: float(gpus) for budget, gpus in cluster.indexes.held.get(pool, {}).items() if gpus
    }


def count_held(cluster: ClusterState, pool: str) -> dict[str, float]:
    """The same figure counted from the pool's runs (the definition; slow at scale)."""
    held: dict[str, float] = {}
    for workload_id in cluster.indexes.active.get(pool, ()):
        workload = cluster.workloads[workload_id]
        if workload.allocated and not workload.preempting:
            held[workload.budget] = held.get(workload.budget, 0.0) + workload.gpus
    return held


@lru_cache(maxsize=65536)
def _sibling_sides(first: str, second: str) -> tuple[str, str] | None:
    """The ancestors of ``first`` and ``second`` that are siblings (children of their lowest
    common ancestor), or None when one path is an ancestor of the other."""
    a, b = first.split("/"), second.split("/")
    depth = 0
    while depth < min(len(a), len(b)) and a[depth] == b[depth]:
        depth += 1
    if depth >= len(a) or depth >= len(b):
        return None
    return "/".join(a[: depth + 1]), "/".join(b[: depth + 1])
