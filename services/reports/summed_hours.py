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
from collections.abc import Callable, Iterable
from itertools import pairwise
from typing import Any

from sqlalchemy import Connection, case, func, literal, select

from events.times import HOUR
from projections.figures import SettledSpan
from services.read_models.tables import demand_hours, demand_levels, hourly_usage


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


def span_starts(lo: int, end: int, cuts: Iterable[float] | None) -> list[int]:
    """Where the spans of ``[lo, end)`` start: at ``lo`` and every cut on an hour inside it
    (``None``: every hour)."""
    if cuts is None:
        return list(range(lo, end, HOUR)) or [lo]
    inside = {int(c) for c in cuts if lo < c < end and c % HOUR == 0}
    return sorted({lo, *inside})


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
    end = max(lo, int(at) // HOUR * HOUR)
    starts = span_starts(lo, end, cuts)
    grouped = len(starts) <= _MOST_CASES

    def span_of(column: Any) -> Any:
        if not grouped:
            return column
        branches = [(column < b, a) for a, b in pairwise(starts)]
        return case(*branches, else_=starts[-1]) if branches else literal(starts[0])

    def start_of(value: int) -> int:
        return starts[bisect_right(starts, value) - 1]

    usage = hourly_usage.c
    span = span_of(usage.bucket_start).label("span")
    rows: Iterable[Any] = connection.execute(
        select(usage.pool, usage.budget, span)
        .add_columns(func.sum(usage.allocated_gpu_s), func.sum(usage.unallocated_gpu_s))
        .where(usage.bucket_start >= lo, usage.bucket_start < end)
        .group_by(usage.pool, usage.budget, span)
    )
    charged: dict[tuple[str, str, int], list[int]] = defaultdict(lambda: [0, 0])
    for pool, budget, at_, allocated, unallocated in rows:
        sums = charged[(pool, budget, start_of(at_))]
        sums[0] += int(allocated)
        sums[1] += int(unallocated)
    kept = demand_hours.c
    span = span_of(kept.hour).label("span")
    rows = connection.execute(
        select(kept.pool, kept.budget, span, kept.level)
        .add_columns(func.sum(kept.seconds))
        .where(kept.hour >= lo, kept.hour < end)
        .group_by(kept.pool, kept.budget, span, kept.level)
    )
    histograms: dict[tuple[str, str, int], dict[int, int]] = defaultdict(dict)
    for pool, budget, at_, level, seconds in rows:
        histogram = histograms[(pool, budget, start_of(at_))]
        histogram[level] = histogram.get(level, 0) + int(seconds)
    bounds = [*starts, end]
    for pool, budget, level, since in connection.execute(select(demand_levels)):
        for a, b in pairwise(bounds) if level else ():
            if b > since:
                histogram = histograms[(pool, budget, a)]
                histogram[level] = histogram.get(level, 0) + b - max(a, since)
    found: dict[str, list[SettledSpan]] = defaultdict(list)
    ends = dict(pairwise(bounds))
    for key in sorted(charged.keys() | histograms.keys()):
        pool, leaf, start = key
        if start in exact(pool):
            continue
        allocated, unallocated = charged.get(key, (0, 0))
        demand = tuple(sorted(histograms.get(key, {}).items()))
        found[pool].append(
            SettledSpan(leaf, start, ends[start], float(allocated), float(unallocated), demand)
        )
    return dict(found)
