"""The whole hours of a window, read summed: what the projector keeps per pool, leaf and hour
(``hourly_usage``: charged; ``demand_hours`` and ``demand_levels``: how long demand sat at each
level), as :class:`projections.figures.SettledSpan`: the hours of one bin over which no share
and no capacity changes, summed by the database into one histogram per leaf. So a week's
``/budgets`` costs its 168 hours (and the few levels its demand sat at), whatever a fleet ran
in them.

Which hours: those of the range that are whole by the instant read at, and in which no share
and no capacity changes (there ``min(share x capacity, demand)`` needs demand moment by
moment, so :mod:`services.reports.history` reads those hours change by change, like the
partial hour at the end).
"""

from __future__ import annotations

from bisect import bisect_right
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from itertools import pairwise
from typing import Any

from sqlalchemy import Connection, and_, case, func, literal, not_, select

from events.times import HOUR
from projections.figures import SettledSpan
from services.read_models.tables import (
    demand_hours,
    demand_levels,
    hourly_usage,
    ledger_entries,
    runs,
)


def exact_hours(lo: int, at: float, changes: Iterable[float]) -> set[int]:
    """The hours of ``[lo, at)`` read change by change: the partial one at ``at``, and each
    with a share or capacity change strictly inside it."""
    end = int(at) // HOUR * HOUR
    found = {end} if lo <= end < at else set()
    found.update(int(c) // HOUR * HOUR for c in changes if lo < c < at and c % HOUR)
    return found


#: Spans up to this many are summed by the database (one CASE branch each); beyond, hour by
#: hour there and into spans here (a timeline's hourly bins: each hour is its own span anyway).
_MOST_CASES = 48


@dataclass(frozen=True)
class Spans:
    """``[lo, end)`` cut at ``starts`` (``None``: hour by hour; a report over all the data
    does not list every hour since 1970)."""

    lo: int
    end: int
    starts: list[int] | None

    @classmethod
    def of(cls, lo: int, end: int, cuts: Iterable[float] | None) -> Spans:
        """Cut at every cut on an hour inside the range."""
        if cuts is None:
            return cls(lo, end, None)
        inside = {int(c) for c in cuts if lo < c < end and c % HOUR == 0}
        return cls(lo, end, sorted({lo, *inside}))

    def column(self, column: Any) -> Any:
        """What the database groups ``column`` (an hour) by: its span's start, or the hour."""
        starts = self.starts
        if starts is None or len(starts) > _MOST_CASES:
            return column
        branches = [(column < b, a) for a, b in pairwise(starts)]
        return case(*branches, else_=starts[-1]) if branches else literal(starts[0])

    def start_of(self, hour: int) -> int:
        if self.starts is None:
            return hour // HOUR * HOUR
        return self.starts[bisect_right(self.starts, hour) - 1]

    def end_of(self, start: int) -> int:
        if self.starts is None:
            return min(start + HOUR, self.end)
        i = bisect_right(self.starts, start)
        return self.starts[i] if i < len(self.starts) else self.end

    def after(self, since: int) -> Iterator[tuple[int, int]]:
        """``(span start, its seconds from since on)`` of every span that ends after it."""
        if since >= self.end:
            return
        start = self.start_of(max(self.lo, since))
        while start < self.end:
            stop = self.end_of(start)
            yield start, stop - max(start, since)
            start = stop


def summed_spans(
    connection: Connection,
    lo: int,
    at: float,
    exact: Callable[[str], set[int]],
    cuts: Iterable[float] | None = None,
) -> dict[str, list[SettledSpan]]:
    """Per pool, the whole hours of ``[lo, at)`` but its ``exact`` ones, summed over spans cut
    at ``cuts`` (bin bounds, every instant a share or capacity changes, the exact hours and
    their ends; ``None``: hour by hour)."""
    spans = Spans.of(lo, max(lo, int(at) // HOUR * HOUR), cuts)
    usage = hourly_usage.c
    span = spans.column(usage.bucket_start).label("span")
    rows: Iterable[Any] = connection.execute(
        select(usage.pool, usage.budget, span)
        .add_columns(func.sum(usage.allocated_gpu_s), func.sum(usage.unallocated_gpu_s))
        .where(usage.bucket_start >= spans.lo, usage.bucket_start < spans.end)
        .group_by(usage.pool, usage.budget, span)
    )
    charged: dict[tuple[str, str, int], list[int]] = defaultdict(lambda: [0, 0])
    for pool, budget, hour, allocated, unallocated in rows:
        sums = charged[(pool, budget, spans.start_of(hour))]
        sums[0] += int(allocated)
        sums[1] += int(unallocated)
    kept = demand_hours.c
    span = spans.column(kept.hour).label("span")
    rows = connection.execute(
        select(kept.pool, kept.budget, span, kept.level)
        .add_columns(func.sum(kept.seconds))
        .where(kept.hour >= spans.lo, kept.hour < spans.end)
        .group_by(kept.pool, kept.budget, span, kept.level)
    )
    histograms: dict[tuple[str, str, int], dict[int, float]] = defaultdict(dict)
    for pool, budget, hour, level, seconds in rows:
        _count(histograms[(pool, budget, spans.start_of(hour))], level, int(seconds))
    for pool, budget, level, since in connection.execute(select(demand_levels)):
        for start, seconds in spans.after(since) if level else ():
            _count(histograms[(pool, budget, start)], level, seconds)
    found: dict[str, list[SettledSpan]] = defaultdict(list)
    for key in sorted(charged.keys() | histograms.keys()):
        pool, leaf, start = key
        if start in exact(pool):
            continue
        allocated, unallocated = charged.get(key, (0, 0))
        demand = tuple(sorted(histograms.get(key, {}).items()))
        settled = SettledSpan(leaf, start, spans.end_of(start), allocated, unallocated, demand)
        found[pool].append(settled)
    return dict(found)


def partial_hour(
    connection: Connection, hour: int, at: float, steady: Callable[[str], bool]
) -> dict[str, list[SettledSpan]] | None:
    """The hour in progress ``[hour, at)``, summed as the whole hours are: per pool, its
    charges so far (``hourly_usage``), its demand (``demand_hours``, and each leaf's current
    level from its ``since`` up to ``at``). All pools or none: None when a pool with anything
    in that hour is not ``steady`` (a share or its capacity changes inside the hour), when a
    charge of that hour does not end by ``at`` (:func:`charges_end_by`), or when some leaf's
    demand changed after ``at`` (a read of an instant behind the read models: the kept levels
    do not say what it was then). The caller then reads the hour change by change."""
    levels = list(connection.execute(select(demand_levels)))
    if any(since > at for _pool, _budget, _level, since in levels):
        return None
    if not charges_end_by(connection, hour, at):
        return None
    charged: dict[tuple[str, str], tuple[int, int]] = {}
    usage = hourly_usage.c
    for pool, budget, allocated, unallocated in connection.execute(
        select(usage.pool, usage.budget, usage.allocated_gpu_s, usage.unallocated_gpu_s).where(
            usage.bucket_start == hour
        )
    ):
        charged[(str(pool), str(budget))] = (int(allocated), int(unallocated))
    histograms: dict[tuple[str, str], dict[int, float]] = defaultdict(dict)
    kept = demand_hours.c
    for pool, budget, level, seconds in connection.execute(
        select(kept.pool, kept.budget, kept.level, kept.seconds).where(kept.hour == hour)
    ):
        _count(histograms[(str(pool), str(budget))], int(level), int(seconds))
    for pool, budget, level, since in levels:
        seconds = at - max(hour, int(since))
        if level and seconds > 0:
            _count(histograms[(str(pool), str(budget))], int(level), seconds)
    found: dict[str, list[SettledSpan]] = defaultdict(list)
    for key in sorted(charged.keys() | histograms.keys()):
        pool, leaf = key
        if not steady(pool):
            return None
        allocated, unallocated = charged.get(key, (0, 0))
        demand = tuple(sorted(histograms.get(key, {}).items()))
        found[pool].append(SettledSpan(leaf, hour, int(at), allocated, unallocated, demand))
    return dict(found)


def charges_end_by(connection: Connection, hour: int, at: float) -> bool:
    """Whether every charge of ``hour`` is of a run that ended in that hour by ``at``: read
    change by change, such a charge counts whole up to ``at``, as it does summed (one of a
    run still going, or not known, is spread over the whole hour, and only its part up to
    ``at`` counts)."""
    run, entry = runs.c, ledger_entries.c
    ends_by = and_(
        run.ended_at.is_not(None),
        run.ended_at <= at,
        run.ended_at > hour,
        run.ended_at > run.started_at,
    )
    spread = connection.execute(
        select(entry.charge_id)
        .select_from(
            ledger_entries.outerjoin(
                runs, and_(run.workload_id == entry.workload_id, run.attempt == entry.attempt)
            )
        )
        .where(entry.bucket_start == hour, not_(ends_by))
        .limit(1)
    ).first()
    return spread is None


def _count(histogram: dict[int, float], level: int, seconds: float) -> None:
    """Add ``seconds`` at ``level`` to a level histogram."""
    histogram[level] = histogram.get(level, 0) + seconds
