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

Key = tuple[float, float, str]


class FairShareOrder:
    def __init__(
        self,
        tree: BudgetTree,
        pool: str,
        at: float,
        leaf_usage: Mapping[str, float],
        capacity: int,
        window_s: int,
    ) -> None:
        self.shares = tree.shares(pool, at)
        self.children: dict[str, list[str]] = {}
        for path in self.shares:
            if path != ROOT:
                self.children.setdefault(parent_of(path), []).append(path)
        self.scale = float(max(capacity, 1) * window_s)
        self.usage: dict[str, float] = dict.fromkeys(self.shares, 0.0)
        for leaf, used in leaf_usage.items():
            if leaf in self.usage:
                self.usage[leaf] += used
        for path in sorted(self.shares, key=lambda p: (-p.count("/"), p)):  # deepest first
            kids = self.children.get(path)
            if path != ROOT and kids:
                self.usage[path] = sum(self.usage[child] for child in kids)
        self.usage[ROOT] = sum(self.usage[child] for child in self.children.get(ROOT, ()))
        # Keys are cached and refreshed up the path on every charge: picking the next leaf
        # then only compares tuples.
        self._keys: dict[str, Key] = {path: self.key(path) for path in self.shares}
        self._active: dict[str, int] = dict.fromkeys(self.shares, 0)
        self._ranks: dict[str, int] | None = None

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
        return (ratio, -share, path)

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
