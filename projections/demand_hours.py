"""Demand as the projector keeps it: per leaf budget, pool and hour, how many seconds it wanted
how many GPUs.

Owed is ``min(share x capacity, demand)`` moment by moment (:mod:`projections.owed`). Over an
hour in which no share and no capacity changes, the entitled GPUs are one number ``e``, and the
integral only needs how long demand sat at each level: ``sum(seconds x min(e, level))``. A
fleet's demand changes at every submission, placement and end, hundreds of times an hour, but
sits at far fewer levels; so the projector keeps these level histograms
(``demand_hours``) and ``/budgets`` reads one small row set per hour of its window instead of
every change (:func:`projections.figures.pool_figures` takes them as :class:`~projections.
figures.SettledHour`). Hours in which a share or capacity does change are read change by change.

Pure: the projector, the migration that builds the histograms from ``demand_intervals`` and the
tests all cut a level function into hours here, one way.
"""

from __future__ import annotations

from collections.abc import Iterator
from itertools import pairwise

from events.times import HOUR
from projections.steps import Steps

#: hour start -> GPUs wanted -> seconds at that level within the hour.
Histogram = dict[int, dict[int, int]]


def by_hour(lo: int, hi: int) -> Iterator[tuple[int, int]]:
    """``(hour start, seconds)`` of ``[lo, hi)`` cut on hour bounds."""
    at = lo
    while at < hi:
        hour = at // HOUR * HOUR
        end = min(hi, hour + HOUR)
        yield hour, end - at
        at = end


def add_level(histogram: Histogram, level: int, lo: int, hi: int) -> None:
    """Count ``[lo, hi)`` at ``level`` (nothing for level 0: it is owed nothing)."""
    if not level:
        return
    for hour, seconds in by_hour(lo, hi):
        levels = histogram.setdefault(hour, {})
        levels[level] = levels.get(level, 0) + seconds


def histogram(steps: Steps, lo: int, hi: int) -> Histogram:
    """Seconds per level per hour of ``steps`` over ``[lo, hi)`` (whole-second instants)."""
    found: Histogram = {}
    cuts = [lo, *(int(c) for c in steps.cuts(lo, hi)), hi]
    for a, b in pairwise(cuts):
        add_level(found, int(steps.at(a)), a, b)
    return found
