"""The whole hours of a window, read summed: what the projector keeps per pool, leaf and hour
(``hourly_usage``: charged; ``demand_hours`` and ``demand_levels``: how long demand sat at each
level), as :class:`projections.figures.SettledHour`. One small row set per hour and leaf, so a
week's ``/budgets`` costs its 168 hours whatever a fleet ran in them.

Which hours: those of the range that are whole by the instant read at, and in which no share
and no capacity changes (there ``min(share x capacity, demand)`` needs demand moment by
moment, so :mod:`services.reports.history` reads those hours change by change, like the
partial hour at the end).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable
from typing import Any

from sqlalchemy import Connection, select

from events.times import HOUR
from projections.demand_hours import by_hour
from projections.figures import SettledHour
from services.read_models.tables import demand_hours, demand_levels, hourly_usage


def exact_hours(lo: int, at: float, changes: Iterable[float]) -> set[int]:
    """The hours of ``[lo, at)`` read change by change: the partial one at ``at``, and each
    with a share or capacity change strictly inside it."""
    end = int(at) // HOUR * HOUR
    found = {end} if lo <= end < at else set()
    found.update(int(c) // HOUR * HOUR for c in changes if lo < c < at and c % HOUR)
    return found


def summed_hours(
    connection: Connection, lo: int, at: float, exact: Callable[[str], set[int]]
) -> dict[str, list[SettledHour]]:
    """Per pool, the whole hours of ``[lo, at)`` but its ``exact`` ones, summed."""
    end = max(lo, int(at) // HOUR * HOUR)
    usage = hourly_usage.c
    charged: dict[tuple[str, str, int], tuple[int, int]] = {}
    columns: list[Any] = [usage.pool, usage.budget, usage.bucket_start, usage.allocated_gpu_s]
    query = select(*columns, usage.unallocated_gpu_s)
    query = query.where(usage.bucket_start >= lo, usage.bucket_start < end)
    rows: Iterable[Any] = connection.execute(query)
    for pool, budget, hour, allocated, unallocated in rows:
        charged[(pool, budget, hour)] = (allocated, unallocated)
    kept = demand_hours.c
    histograms: dict[tuple[str, str, int], dict[int, int]] = defaultdict(dict)
    columns = [kept.pool, kept.budget, kept.hour, kept.level, kept.seconds]
    rows = connection.execute(select(*columns).where(kept.hour >= lo, kept.hour < end))
    for pool, budget, hour, level, seconds in rows:
        histograms[(pool, budget, hour)][level] = seconds
    rows = connection.execute(select(demand_levels))
    for pool, budget, level, since in rows:
        for hour, seconds in by_hour(max(lo, since), end) if level else ():
            histogram = histograms[(pool, budget, hour)]
            histogram[level] = histogram.get(level, 0) + seconds
    found: dict[str, list[SettledHour]] = defaultdict(list)
    for key in sorted(charged.keys() | histograms.keys()):
        pool, leaf, hour = key
        if hour in exact(pool):
            continue
        allocated, unallocated = charged.get(key, (0, 0))
        demand = tuple(sorted(histograms.get(key, {}).items()))
        found[pool].append(SettledHour(leaf, hour, float(allocated), float(unallocated), demand))
    return dict(found)
