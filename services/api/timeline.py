"""The dashboard's timeline: one pool over a range, in bins sized to the range.

Pure: the range a request asks for (:func:`resolve_range`), and the answer made of the one
computation of the figures (:func:`projections.figures.pool_figures`, which the route reads
through :mod:`services.reports.window`): capacity, occupancy, demand, and per budget delivered
vs owed, as bin averages in GPUs. So the chart says what ``/budgets``, ``fairshare share`` and
the charges report say for the same range.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from events.times import DAY, HOUR, WEEK
from projections.budget_tree import ROOT, BudgetTree, parent_of
from projections.figures import Bins, BudgetSeries, OpenRun, PoolFigures, PoolHistory, wanted
from projections.live_state import LiveState
from projections.steps import Steps
from services.api.models import Answer
from services.api.sentences import iso
from services.reports import times as report_times

#: The bin lengths the timeline offers, in seconds: 10 s up to a week.
BINS = (10, 60, 300, 900, HOUR, 3 * HOUR, 6 * HOUR, 12 * HOUR, DAY, WEEK)
#: Without ``bin``: the shortest of these that cuts the range into at most :data:`AUTO_BINS`
#: (10-second bins for 5 minutes, 1-minute ones for an hour, 15-minute ones for a day, hourly
#: ones for a week, daily ones for 10 weeks). Half days are left out: they draw day and night
#: as a zigzag.
AUTO_LADDER = (10, 60, 300, 900, HOUR, 6 * HOUR, DAY, WEEK)
AUTO_BINS = 180
#: The most bins one answer may hold (a chart has no use for more; like the reports'
#: ``MAX_BUCKETS``, it bounds the work and the answer before anything is read).
MAX_BINS = 2_000
#: The longest range a chart covers (the reports cover longer ones).
MAX_SPAN_S = 3 * 366 * DAY
#: The default range is what the data covers, from the pool's first submission to now, but at
#: least this long (a demo that has run a minute)...
MIN_DEFAULT_SPAN_S = 300
#: ... and at most this long (older history: ask for it with ``from``).
MAX_DEFAULT_SPAN_S = 92 * DAY


class BudgetTimeline(Answer):
    """One budget in the pool, bin by bin, in GPUs (averages over each bin's elapsed part; None
    for bins after ``as_of``); an inner budget's figures are the sums of its leaves'."""

    budget: str
    parent: str | None
    leaf: bool
    #: Allocated GPUs in use (what is charged to it).
    delivered_gpus: list[float | None]
    #: Unallocated (burst) GPUs in use: free, and not delivered against what it is owed.
    unallocated_gpus: list[float | None]
    #: min(share x capacity, demand), moment by moment (the definition of docs/api.md).
    owed_gpus: list[float | None]
    #: share x capacity at the start of each bin.
    entitled_gpus: list[float | None]


class Timeline(Answer):
    as_of: str
    pool: str
    #: The first bin's start and the last bin's end.
    start: str
    end: str
    bin_s: int
    #: Start of each bin.
    bins: list[str]
    #: Seconds of each bin up to ``as_of`` (the last one may be partial, later ones are 0).
    covered_s: list[float]
    #: The pool's first submission: where "what the data covers" starts (None: no work yet).
    data_from: str | None
    source: str
    #: GPUs of the pool's nodes that are up (cordoned ones included), bin averages.
    capacity_gpus: list[float | None]
    allocated_gpus: list[float | None]
    unallocated_gpus: list[float | None]
    #: GPUs wanted by allocated work (pending or holding GPUs), bin averages.
    demand_gpus: list[float | None]
    #: (allocated + unallocated) / capacity per bin, and over the whole range.
    occupancy: list[float | None]
    occupancy_over_range: float | None
    budgets: list[BudgetTimeline]


@dataclass(frozen=True)
class Window:
    """``count`` bins of ``bin_s`` seconds from ``start`` (on a multiple of ``bin_s``), read
    at ``now``."""

    start: int
    bin_s: int
    count: int
    now: float

    @property
    def end(self) -> int:
        return self.start + self.bin_s * self.count

    @property
    def stop(self) -> float:
        """Where the data stops: the end, or now if that is earlier."""
        return max(float(self.start), min(float(self.end), self.now))

    def bounds(self) -> list[int]:
        return [self.start + i * self.bin_s for i in range(self.count + 1)]

    def bins(self) -> Bins:
        """The figures' bins (:class:`projections.figures.Bins`): nothing counts after now."""
        return Bins(tuple(float(b) for b in self.bounds()), self.now)


def first_activity(state: LiveState, pool: str) -> float | None:
    """When the pool's first workload was submitted (where its data starts)."""
    times = [w.submitted_at for w in state.cluster.workloads.values() if pool in w.pools]
    return min(times) if times else None


def auto_bin(span: float) -> int:
    """The shortest of :data:`AUTO_LADDER` cutting ``span`` seconds into at most
    :data:`AUTO_BINS`."""
    return next((b for b in AUTO_LADDER if math.ceil(span / b) <= AUTO_BINS), AUTO_LADDER[-1])


def resolve_range(
    now: float,
    data_from: float | None,
    start: str | None,
    end: str | None,
    last: int | None,
    bin_s: int | None,
) -> Window:
    """The bins for a request, or ValueError saying what is refused: ``last`` with
    ``from``/``to``, a ``to`` not after ``from``, a time outside the reports' range, a range
    over :data:`MAX_SPAN_S`, a ``bin`` not offered, more than :data:`MAX_BINS` bins."""
    if bin_s is not None and bin_s not in BINS:
        raise ValueError(f"bin: one of {', '.join(map(str, BINS))} seconds, not {bin_s}")
    if last is not None and (start is not None or end is not None):
        raise ValueError("give either last or from/to, not both")
    if last is not None:
        lo, hi = now - last, now
    elif start is not None or end is not None:
        hi = now if end is None else float(report_times.parse_time(end))
        if start is not None:
            lo = float(report_times.parse_time(start))
        else:
            lo = min(hi - MIN_DEFAULT_SPAN_S, data_from if data_from is not None else hi)
    else:
        hi = now
        lo = now - MIN_DEFAULT_SPAN_S if data_from is None else data_from
        lo = max(min(lo, hi - MIN_DEFAULT_SPAN_S), hi - MAX_DEFAULT_SPAN_S)
    if hi <= lo:
        raise ValueError(f"to ({iso(hi)}) must be after from ({iso(lo)})")
    for moment in (lo, hi):
        if not report_times.EARLIEST <= moment <= report_times.LATEST:
            raise ValueError(
                f"{iso(max(moment, 0.0))} is outside the times a chart may cover "
                f"({report_times.iso(report_times.EARLIEST)} to "
                f"{report_times.iso(report_times.LATEST)})"
            )
    if hi - lo > MAX_SPAN_S:
        raise ValueError(
            f"from..to covers {(hi - lo) / DAY:.0f} days; a chart covers at most 3 years "
            "(the reports cover longer ranges)"
        )
    size = auto_bin(hi - lo) if bin_s is None else bin_s
    first = int(lo) // size * size
    count = max(1, -(-(math.ceil(hi) - first) // size))
    if count > MAX_BINS:
        raise ValueError(
            f"from..to covers {count} bins of {size} s; a chart holds at most {MAX_BINS}: "
            "narrow the range or choose a longer bin"
        )
    return Window(first, size, count, now)


#: The answer's ``source`` without read models.
LIVE_ONLY = "live view only: running work and what is wanted now (no read models, so no history)"
FROM_READ_MODELS = (
    "read models: charges placed where their runs were, plus running work since its last "
    "charge; demand and capacity over time (projections.figures)"
)


def live_history(state: LiveState, pool: str, now: float) -> PoolHistory:
    """What the live view alone knows of a pool: its capacity and demand now, its running
    work since it started (nothing is charged as far as it knows)."""
    history = PoolHistory(pool, capacity=Steps.constant(float(state.cluster.capacity(pool))))
    for workload in state.cluster.workloads.values():
        gpus = wanted(state.cluster, workload).get(pool)
        if gpus:
            steps = history.demand.setdefault(workload.budget, Steps())
            steps.change(now, gpus)
    for workload_id in sorted(state.cluster.active.get(pool, ())):
        workload = state.cluster.workloads[workload_id]
        if workload.started_at is not None and workload.pool == pool:
            history.open_runs.append(
                OpenRun(
                    workload.budget,
                    workload.allocated,
                    workload.gpus,
                    workload.started_at,
                    workload.started_at,
                )
            )
    return history


def _means(values: list[float], covered: list[float]) -> list[float | None]:
    return [
        round(v / seconds, 4) if seconds > 0 else None
        for v, seconds in zip(values, covered, strict=True)
    ]


def _budget(
    tree: BudgetTree, path: str, series: BudgetSeries, covered: list[float]
) -> dict[str, Any]:
    node = tree.nodes.get(path)
    return {
        "budget": path,
        "parent": (parent_of(path) or None) if node is not None else None,
        "leaf": node is None or node.is_leaf,
        "delivered_gpus": _means(series.delivered, covered),
        "unallocated_gpus": _means(series.free, covered),
        "owed_gpus": _means(series.owed, covered),
        "entitled_gpus": _means(series.entitled, covered),
    }


def timeline(
    figures: PoolFigures,
    tree: BudgetTree,
    window: Window,
    source: str,
    data_from: float | None,
) -> dict[str, Any]:
    """The pool over ``window``: see :class:`Timeline`."""
    covered = window.bins().covered()
    total = figures.total
    busy = [a + u for a, u in zip(total.delivered, total.free, strict=True)]
    capacity = figures.capacity
    bounds = window.bounds()
    budgets = [
        _budget(tree, path, series, covered)
        for path, series in sorted(figures.budgets.items())
        if path != ROOT
    ]
    total_capacity = sum(capacity)
    return {
        "as_of": iso(window.now),
        "pool": figures.pool,
        "start": iso(window.start),
        "end": iso(window.end),
        "bin_s": window.bin_s,
        "bins": [iso(a) for a in bounds[: window.count]],
        "covered_s": [round(c, 3) for c in covered],
        "data_from": None if data_from is None else iso(data_from),
        "source": source,
        "capacity_gpus": _means(capacity, covered),
        "allocated_gpus": _means(total.delivered, covered),
        "unallocated_gpus": _means(total.free, covered),
        "demand_gpus": _means(total.demand, covered),
        "occupancy": [
            round(b / c, 4) if c > 0 else None for b, c in zip(busy, capacity, strict=True)
        ],
        "occupancy_over_range": round(sum(busy) / total_capacity, 4) if total_capacity else None,
        "budgets": budgets,
    }
