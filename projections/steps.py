"""A quantity that holds a level between instants: GPUs wanted, GPUs of a pool's nodes that are up.

Demand and capacity change at facts (a submission, a placement, a node going down) and stay put
in between, so every figure built on them is an integral of a step function. This is the one
type for it: the live fold, the read models' readers and the simulator all describe demand and
capacity as :class:`Steps`, and :mod:`projections.figures` integrates them one way.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from itertools import pairwise


@dataclass
class Steps:
    """``points``: ``(instant, level from then on)`` in time order; 0 before the first."""

    points: list[tuple[float, float]] = field(default_factory=list)

    @classmethod
    def constant(cls, level: float, since: float = float("-inf")) -> Steps:
        return cls([(since, level)])

    @classmethod
    def of_changes(cls, changes: Iterable[tuple[float, float]]) -> Steps:
        """From ``(instant, delta)`` changes in any order, from level 0."""
        steps = cls()
        for at, delta in sorted(changes):
            steps.change(at, delta)
        return steps

    def at(self, moment: float) -> float:
        i = bisect_right(self.points, (moment, float("inf")))
        return self.points[i - 1][1] if i else 0.0

    def change(self, at: float, delta: float) -> None:
        """Add ``delta`` from ``at`` on. A change earlier than the last one (a late fact)
        shifts every later level, so the points stay in time order."""
        if not delta:
            return
        points = self.points
        if points and at < points[-1][0]:
            i = bisect_right(points, (at, float("inf")))
            level = points[i - 1][1] if i else 0.0
            points.insert(i, (at, level + delta))
            for j in range(i + 1, len(points)):
                points[j] = (points[j][0], points[j][1] + delta)
            return
        level = points[-1][1] if points else 0.0
        if points and points[-1][0] == at:
            points[-1] = (at, level + delta)
        else:
            points.append((at, level + delta))

    def cuts(self, lo: float, hi: float) -> Iterator[float]:
        """The instants strictly inside ``(lo, hi)`` where the level changes."""
        i = bisect_right(self.points, (lo, float("inf")))
        for at, _ in self.points[i:]:
            if at >= hi:
                return
            yield at

    def integral(self, lo: float, hi: float) -> float:
        """Level x seconds over ``[lo, hi)``."""
        if hi <= lo:
            return 0.0
        cuts = [lo, *self.cuts(lo, hi), hi]
        return sum(self.at(a) * (b - a) for a, b in pairwise(cuts))
