"""Demand, capacity, delivered and owed: the figures every surface shows, computed here once.

A reader sees the same budget on the API's ``/budgets``, the dashboard's charts and table,
``fairshare share``, the charges report and the simulator's metrics. They used to rebuild the
inputs each their own way and disagreed (a chart said 137% where the table said 48%). Now each
only *gathers* a :class:`PoolHistory` from where it reads (the read models, the live fold, a
simulation) and asks :func:`pool_figures`; the rules below are the only ones:

* **wanted** (:func:`wanted_gpus`): allocated work wants its GPUs in every acceptable pool
  while it waits (pending, or stopped and awaiting its requeue), in its own pool while it holds
  them, nowhere once it has ended; unallocated (burst) work is owed nothing, so wants nothing.
  A waiting workload wants nothing in a pool that could never hold it (more GPUs than every
  node ever registered there): a 100,000-GPU gang on a 16-GPU pool is refused at the door, and
  one already in the log (foreign work, an older release) must not dominate demand and owed.
* **capacity** (:func:`in_capacity`): a node's GPUs count unless it is down. A cordoned or
  drained node is still the pool's, out of service for a while; a down node is not there. The
  scheduler's entitlement (share x capacity) counts the same way.
* **delivered up to an instant**: what the ledger charged, plus what runs still holding GPUs
  have used since their charges stop (:meth:`OpenRun.uncharged`). Charges post per closed
  hour, so without the second part a full pool reads as every budget short-changed mid-hour.
* **owed over a range**: :func:`projections.owed.owed_pieces`, ``min(share x capacity, wanted)``
  moment by moment, counted to the same instant as delivered.

A reader gives each hour either change by change (charges, demand steps) or, for whole hours
over which no share and no capacity changes, summed (:class:`SettledSpan`: what the projector
keeps, so a long window costs its hours, not its runs); the rules above apply to both alike.

An inner budget's figures are the sums of its leaves'.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import pairwise

from events.times import HOUR
from projections.budget_tree import BudgetTree
from projections.cluster_state import ClusterState
from projections.cluster_types import WorkloadState
from projections.owed import owed_pieces
from projections.steps import Steps

#: Statuses in which a workload holds GPUs in its pool.
HOLDING = ("placed", "running")
#: The node state whose GPUs are not part of the pool's capacity.
NOT_IN_CAPACITY = "down"


def in_capacity(state: str) -> bool:
    """Whether a node in ``state`` ("up", "cordoned", "drained", "down") counts in capacity."""
    return state != NOT_IN_CAPACITY


def wanted_gpus(
    *,
    allocated: bool,
    status: str,
    gpus: int,
    pools: Sequence[str],
    pool: str | None,
    awaiting_requeue: bool,
    registered: Callable[[str], int] | None = None,
) -> dict[str, int]:
    """GPUs a workload wants now, per pool (the rule in the module docstring).

    ``awaiting_requeue``: it was stopped (preempted or lost), is resumable and its requeue has
    not been read yet; it still wants its GPUs. ``registered``: GPUs of every node ever
    registered in a pool (None: not known, every pool counts); a waiting workload wants none
    in a pool with fewer, once the pool has any."""
    if not allocated:
        return {}
    if status in HOLDING and pool is not None:
        return {pool: gpus}
    if status == "pending" or awaiting_requeue:
        return {p: gpus for p in pools if _could_hold(registered, p, gpus)}
    return {}


def _could_hold(registered: Callable[[str], int] | None, pool: str, gpus: int) -> bool:
    """A pool with no node registered yet is not judged (its nodes may be read later)."""
    if registered is None:
        return True
    ever = registered(pool)
    return ever == 0 or gpus <= ever


def registered_gpus(cluster: ClusterState, pool: str) -> int:
    """GPUs of every node ever registered in ``pool`` in the live fold: the largest gang it
    could ever hold, whatever the gang's shape (one larger than its largest node is spread over
    whole nodes, :func:`scheduling.placement.needs_whole_nodes`). The API refuses a gang above
    it (422), and it keeps such work out of demand (:func:`wanted_gpus`)."""
    index = cluster.indexes.pools.get(pool)
    return 0 if index is None else index.registered


def wanted(cluster: ClusterState, workload: WorkloadState | None) -> dict[str, int]:
    """:func:`wanted_gpus` of a workload of the live fold."""
    if workload is None:
        return {}
    return wanted_gpus(
        allocated=workload.allocated,
        status=workload.status,
        gpus=workload.gpus,
        pools=workload.pools,
        pool=workload.pool,
        awaiting_requeue=workload.workload_id in cluster.awaiting_requeue,
        registered=lambda pool: registered_gpus(cluster, pool),
    )


@dataclass(frozen=True, slots=True)
class OpenRun:
    """A run whose charges do not reach its end yet (it still runs, or its last hour is not
    charged yet), and where its charges stop."""

    leaf: str
    allocated: bool
    gpus: int
    started_at: float
    #: The end of its latest charge (its start if none yet).
    charged_until: float
    #: None while it runs.
    ended_at: float | None = None

    @property
    def uncharged_from(self) -> float:
        return max(self.started_at, self.charged_until)

    def uncharged(self, lo: float, hi: float) -> float:
        """GPU-seconds it used in ``[lo, hi)`` that no charge holds yet."""
        since = max(lo, self.uncharged_from)
        until = hi if self.ended_at is None else min(hi, self.ended_at)
        return self.gpus * max(0.0, until - since)


@dataclass(frozen=True, slots=True)
class Charge:
    """GPU-seconds the ledger charged to one run in one hour (corrections included, signed),
    and when in that hour the run held its GPUs (``None``: not known, spread over the hour)."""

    leaf: str
    allocated: bool
    bucket_start: int
    gpu_s: float
    ran_from: float | None = None
    ran_to: float | None = None

    def span(self) -> tuple[float, float]:
        lo, hi = float(self.bucket_start), float(self.bucket_start + HOUR)
        a = lo if self.ran_from is None else min(max(self.ran_from, lo), hi)
        b = hi if self.ran_to is None else min(max(self.ran_to, a), hi)
        return (a, b) if b > a else (lo, hi)


@dataclass(frozen=True, slots=True)
class SettledSpan:
    """One leaf's whole hours ``[start, end)``, summed: its charges (corrections included,
    signed), and how long it wanted how many GPUs (:mod:`projections.demand_hours`). Only for
    hours within one bin over which no share and no capacity changes: then ``min(share x
    capacity, level)`` is one number per level, and owed is exact from the histogram alone.
    The hour in progress may come so too, up to the instant read at (``end`` is then that
    instant's second, its level seconds fractional), where its charges all end by then."""

    leaf: str
    start: int
    end: int
    delivered: float = 0.0
    free: float = 0.0
    #: ``(GPUs wanted, seconds at that level)`` within the span.
    demand: tuple[tuple[int, float], ...] = ()


@dataclass(frozen=True, slots=True)
class OpenSum:
    """What a leaf's open runs (:class:`OpenRun`) used and no charge holds yet, summed by the
    reader over the one bin it reads (``/budgets``' window): delivered (allocated) or free."""

    leaf: str
    allocated: bool
    gpu_s: float


@dataclass
class PoolHistory:
    """What one pool's figures are computed from, gathered by a reader for a range."""

    pool: str
    #: GPUs of the nodes that count in capacity (:func:`in_capacity`).
    capacity: Steps = field(default_factory=Steps)
    #: Leaf budget -> GPUs its allocated work wants (:func:`wanted_gpus`).
    demand: dict[str, Steps] = field(default_factory=dict)
    charges: list[Charge] = field(default_factory=list)
    open_runs: list[OpenRun] = field(default_factory=list)
    #: Whole hours given summed; ``charges`` and ``demand`` then hold nothing of them.
    settled: list[SettledSpan] = field(default_factory=list)
    #: The open runs summed, for a read of one bin (``open_runs`` then holds none).
    open_sums: list[OpenSum] = field(default_factory=list)


@dataclass(frozen=True)
class Bins:
    """Consecutive ``[bounds[i], bounds[i + 1])``; nothing counts after ``at`` (the instant the
    figures are read at: delivered and owed stop at the same moment)."""

    bounds: tuple[float, ...]
    at: float

    @classmethod
    def one(cls, lo: float, at: float) -> Bins:
        return cls((lo, max(lo, at)), at)

    @property
    def count(self) -> int:
        return len(self.bounds) - 1

    @property
    def stop(self) -> float:
        return max(self.bounds[0], min(self.bounds[-1], self.at))

    def covered(self) -> list[float]:
        stop = self.stop
        return [max(0.0, min(b, stop) - a) for a, b in pairwise(self.bounds)]

    def spread(self, series: list[float], lo: float, hi: float, amount: float) -> None:
        """Add ``amount``, spread evenly over ``[lo, hi)``, to the bins it overlaps (before
        :attr:`stop`)."""
        if hi <= lo or not amount:
            return
        rate = amount / (hi - lo)
        lo, hi = max(lo, self.bounds[0]), min(hi, self.stop)
        i = max(0, bisect_right(self.bounds, lo) - 1)
        while lo < hi and i < self.count:
            end = min(hi, self.bounds[i + 1])
            if end > lo:
                series[i] += rate * (end - lo)
            lo = max(lo, end)
            i += 1

    def index(self, moment: float) -> int:
        return min(self.count - 1, max(0, bisect_right(self.bounds, moment) - 1))


@dataclass
class BudgetSeries:
    """One budget in one pool, GPU-seconds per bin."""

    #: Allocated use: charged, plus running work not charged yet.
    delivered: list[float]
    #: The part of ``delivered`` no charge holds yet.
    uncharged: list[float]
    #: Unallocated (burst) use: free, not delivered against what is owed.
    free: list[float]
    owed: list[float]
    #: share x capacity.
    entitled: list[float]
    demand: list[float]

    @classmethod
    def zeros(cls, count: int) -> BudgetSeries:
        return cls(*([0.0] * count for _ in range(6)))

    def add(self, other: BudgetSeries) -> None:
        for mine, theirs in zip(self.columns(), other.columns(), strict=True):
            for i, value in enumerate(theirs):
                mine[i] += value

    def columns(self) -> tuple[list[float], ...]:
        return (self.delivered, self.uncharged, self.free, self.owed, self.entitled, self.demand)

    @property
    def delivered_total(self) -> float:
        return sum(self.delivered)

    @property
    def owed_total(self) -> float:
        return sum(self.owed)

    def ratio(self) -> float | None:
        """Delivered / owed over all the bins (None when nothing is owed)."""
        owed = self.owed_total
        return None if owed <= 0 else self.delivered_total / owed


@dataclass
class PoolFigures:
    pool: str
    bins: Bins
    #: GPU-seconds of capacity per bin.
    capacity: list[float]
    #: Every budget with figures (leaves and the inner budgets above them).
    budgets: dict[str, BudgetSeries]
    #: The pool as a whole (every leaf summed).
    total: BudgetSeries


def pool_figures(
    history: PoolHistory, tree: BudgetTree, bins: Bins, leaves: Iterable[str] = ()
) -> PoolFigures:
    """Delivered, free, owed, entitled and demand per budget and bin, and capacity per bin.
    ``leaves``: budgets to report even with nothing in the range (the tree's open leaves)."""
    count = bins.count
    per_leaf: dict[str, BudgetSeries] = {}

    def of(leaf: str) -> BudgetSeries:
        found = per_leaf.get(leaf)
        if found is None:
            found = per_leaf[leaf] = BudgetSeries.zeros(count)
        return found

    for leaf in leaves:
        of(leaf)
    for charge in history.charges:
        series = of(charge.leaf)
        a, b = charge.span()
        bins.spread(series.delivered if charge.allocated else series.free, a, b, charge.gpu_s)
    for run in history.open_runs:
        series = of(run.leaf)
        since = run.uncharged_from
        until = bins.stop if run.ended_at is None else min(bins.stop, run.ended_at)
        amount = run.uncharged(since, until)
        bins.spread(series.delivered if run.allocated else series.free, since, until, amount)
        if run.allocated:
            bins.spread(series.uncharged, since, until, amount)
    if history.open_sums and bins.count != 1:
        raise ValueError("open runs come summed only for a read of one bin")
    for summed in history.open_sums:
        series = of(summed.leaf)
        if summed.allocated:
            series.delivered[0] += summed.gpu_s
            series.uncharged[0] += summed.gpu_s
        else:
            series.free[0] += summed.gpu_s
    for leaf, steps in history.demand.items():
        _integrate_into(of(leaf).demand, steps, bins)
    capacity = [0.0] * count
    _integrate_into(capacity, history.capacity, bins)
    for span in history.settled:
        of(span.leaf)
    _entitled_into(per_leaf, history, tree, bins)
    _owed_into(per_leaf, history, tree, bins)
    _settled_into(per_leaf, history, tree, bins)
    budgets: dict[str, BudgetSeries] = {}
    total = BudgetSeries.zeros(count)
    for leaf in sorted(per_leaf):
        own = per_leaf[leaf]
        for path in tree.ancestors(leaf):
            if path not in budgets:
                budgets[path] = BudgetSeries.zeros(count)
            budgets[path].add(own)
        total.add(own)
    return PoolFigures(history.pool, bins, capacity, budgets, total)


def _integrate_into(series: list[float], steps: Steps, bins: Bins) -> None:
    stop = bins.stop
    for i in range(bins.count):
        a, b = bins.bounds[i], min(bins.bounds[i + 1], stop)
        if b > a:
            series[i] += steps.integral(a, b)


def _cuts(
    history: PoolHistory, tree: BudgetTree, bins: Bins, *, demand: bool = True
) -> list[float]:
    """Every bin bound and every instant where a share or capacity changes (the entitlement),
    and with ``demand`` where demand does (what is owed)."""
    lo, hi = bins.bounds[0], bins.stop
    cuts = {lo, hi, *(b for b in bins.bounds if lo < b < hi)}
    cuts.update(tree.change_times(lo, hi))
    cuts.update(history.capacity.cuts(lo, hi))
    if demand:
        for steps in history.demand.values():
            cuts.update(steps.cuts(lo, hi))
    return sorted(cuts)


class _EntitledAt:
    """share x capacity per leaf at an instant (constant between the cuts)."""

    def __init__(self, history: PoolHistory, tree: BudgetTree, leaves: tuple[str, ...]) -> None:
        self.history, self.tree, self.leaves = history, tree, leaves

    def __call__(self, at: float) -> Mapping[str, float]:
        shares = self.tree.shares(self.history.pool, at)
        gpus = self.history.capacity.at(at)
        return {leaf: shares.get(leaf, 0.0) * gpus for leaf in self.leaves}


def _entitled_into(
    per_leaf: dict[str, BudgetSeries], history: PoolHistory, tree: BudgetTree, bins: Bins
) -> None:
    if bins.stop <= bins.bounds[0]:
        return
    entitled = _EntitledAt(history, tree, tuple(per_leaf))
    for a, b in pairwise(_cuts(history, tree, bins, demand=False)):
        i = bins.index(a)
        for leaf, gpus in entitled(a).items():
            per_leaf[leaf].entitled[i] += gpus * (b - a)


def _owed_into(
    per_leaf: dict[str, BudgetSeries], history: PoolHistory, tree: BudgetTree, bins: Bins
) -> None:
    if bins.stop <= bins.bounds[0] or not history.demand:
        return
    demand = history.demand

    def wanted(a: float, b: float) -> dict[str, float]:
        return {leaf: steps.at(a) * (b - a) for leaf, steps in demand.items()}

    entitled = _EntitledAt(history, tree, tuple(demand))
    for a, _b, piece in owed_pieces(_cuts(history, tree, bins), wanted, entitled):
        i = bins.index(a)
        for leaf, gpu_s in piece.items():
            per_leaf[leaf].owed[i] += gpu_s


def _settled_into(
    per_leaf: dict[str, BudgetSeries],
    history: PoolHistory,
    tree: BudgetTree,
    bins: Bins,
) -> None:
    """The summed spans: delivered and free as charged; demand and owed from the level
    histogram, owed per level ``min(entitled x seconds, level x seconds)`` as
    :func:`~projections.owed.owed_pieces` counts each piece (entitled is constant over the
    span, so the pieces at one level add up to the same)."""
    entitled: dict[int, Mapping[str, float]] = {}
    for span in history.settled:
        if not bins.bounds[0] <= span.start < bins.stop:
            continue
        i = bins.index(span.start)
        series = per_leaf[span.leaf]
        series.delivered[i] += span.delivered
        series.free[i] += span.free
        series.demand[i] += sum(level * seconds for level, seconds in span.demand)
        wanted = [(level * seconds, seconds) for level, seconds in span.demand if level > 0]
        if not wanted:
            continue
        if span.start not in entitled:
            shares = tree.shares(history.pool, span.start)
            gpus = history.capacity.at(span.start)
            entitled[span.start] = {leaf: share * gpus for leaf, share in shares.items()}
        gpus_entitled = entitled[span.start].get(span.leaf, 0.0)
        series.owed[i] += sum(min(gpus_entitled * seconds, w) for w, seconds in wanted)
