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

from sqlalchemy import Connection, select

from events.times import HOUR
from projections.demand_hours import by_hour
from projections.figures import SettledHour
from services.read_models.tables import demand_hours, demand_levels, hourly_usage

#: (pool, leaf, hour) -> [delivered, free, {level: seconds}]
_Sums = dict[tuple[str, str, int], tuple[list[float], dict[int, int]]]


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
    sums: _Sums = {}

    def of(pool: str, leaf: str, hour: int) -> tuple[list[float], dict[int, int]]:
        found = sums.get((pool, leaf, hour))
        if found is None:
            found = sums[(pool, leaf, hour)] = ([0.0, 0.0], {})
        return found

    usage = select(hourly_usage).where(
        hourly_usage.c.bucket_start >= lo, hourly_usage.c.bucket_start < end
    )
    for row in connection.execute(usage):
        charged = of(str(row.pool), str(row.budget), int(row.bucket_start))[0]
        charged[0] += float(row.allocated_gpu_s)
        charged[1] += float(row.unallocated_gpu_s)
    levels = select(demand_hours).where(demand_hours.c.hour >= lo, demand_hours.c.hour < end)
    for row in connection.execute(levels):
        histogram = of(str(row.pool), str(row.budget), int(row.hour))[1]
        histogram[int(row.level)] = histogram.get(int(row.level), 0) + int(row.seconds)
    for row in connection.execute(select(demand_levels)):
        if int(row.level):
            for hour, seconds in by_hour(max(lo, int(row.since)), end):
                histogram = of(str(row.pool), str(row.budget), hour)[1]
                histogram[int(row.level)] = histogram.get(int(row.level), 0) + seconds
    found: dict[str, list[SettledHour]] = defaultdict(list)
    for (pool, leaf, hour), (charged, histogram) in sorted(sums.items()):
        if hour in exact(pool):
            continue
        demand = tuple(sorted((level, s) for level, s in histogram.items() if s))
        found[pool].append(SettledHour(leaf, hour, charged[0], charged[1], demand))
    return dict(found)
