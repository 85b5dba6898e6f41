"""The debug lane: small, short work starts within seconds, and is still charged to its budget.

Someone debugging submits a 1-GPU job of a few minutes, reads its output, and submits again; a
wait of an hour behind a week of fair-share debt breaks that loop, while what the job costs
the cluster is negligible. Per pool, work the lane admits (allocated, at most ``max_gpus`` GPUs,
a contract of at most ``max_min_runtime_s``) gets, as long as the pool's lane work in use stays
under ``max_lane_fraction`` of its capacity (a bound on what the lane can take from fair share):

1. **first pick** of the pass, in fair-share order among lane work, onto any free GPU;
2. **a reserve** of free GPUs that no other work may take, sized from recent lane demand: the
   lane GPU-seconds submitted to the pool in the last ``lookback_s`` give a mean concurrency
   ``lambda``, and the reserve is the smallest ``r`` with ``P(Poisson(lambda) < r) >=
   service_level`` (an arriving debug job then finds a reserved GPU free that often), at most
   ``max_reserve_fraction`` of capacity, and 0 when no lane work came in the lookback. Lane
   work running counts against it: only ``reserve - lane GPUs in use`` stay free;
3. **preemption regardless of rank** when no GPU has come free within ``patience_s`` of its
   submission (GPUs come free often in a busy pool, and a stop costs the victim its work since
   its last checkpoint): of unallocated work, or of allocated work past its contract, its own
   budget's included (its debug work goes before its own long runs, as a priority would),
   never work inside its contract and never other lane work; the victim whose stop wastes
   least.

Everything here is a function of the state and ``now``. The :class:`LaneIndex` of lane
workloads, one of the scheduler's memos (``memos.py``), is brought up to date from the workloads
the state holds (which only grow between two forgets of ended work: a forget starts it over)
and those the fold lists as changed since, so it is exact whatever passes ran before
(``tests/unit/test_incremental_scheduler.py`` checks it against a fresh one after every pass of
random histories, and after the fold forgets).
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass, field
from itertools import islice

from sortedcontainers import SortedList

from projections.cluster_state import ClusterState
from projections.cluster_types import WorkloadState

_ENDED = frozenset({"succeeded", "failed", "cancelled"})


@dataclass(frozen=True)
class DebugLane:
    """The lane of one pool (defaults: 1 GPU, a contract of at most 15 min)."""

    enabled: bool = True
    max_gpus: int = 1
    max_min_runtime_s: int = 15 * 60
    #: Recent lane demand is what was submitted in this long (about one lane job's life).
    lookback_s: int = 15 * 60
    #: Share of lane arrivals the reserve should find a free GPU for at once.
    service_level: float = 0.9
    max_reserve_fraction: float = 0.1
    #: Lane work beyond this share of the pool waits its turn like other work. Half: floods of
    #: hundreds of short jobs do come (lane work is charged, and ranks its budget lower).
    max_lane_fraction: float = 0.5
    #: Seconds lane work waits for a GPU to come free before it preempts.
    patience_s: float = 15.0

    def __post_init__(self) -> None:
        if self.patience_s < 0:
            raise ValueError("a debug lane's patience must not be negative")
        if self.max_gpus < 1 or self.max_min_runtime_s < 1 or self.lookback_s < 1:
            raise ValueError("a debug lane needs max_gpus, max_min_runtime_s, lookback_s >= 1")
        if not 0.0 <= self.service_level < 1.0:
            raise ValueError("service_level must be in [0, 1)")
        if not (0.0 <= self.max_reserve_fraction <= 1.0 and 0.0 <= self.max_lane_fraction <= 1.0):
            raise ValueError("lane fractions must be in [0, 1]")

    def admits(self, workload: WorkloadState) -> bool:
        """Lane-shaped: allocated, small and short (unallocated work is never in the lane),
        and no job array's element: an array is batch work, and a thousand short elements in
        the lane would take half the pool ahead of fair share and preempt for it."""
        return (
            self.enabled
            and 0 < workload.min_runtime_s <= self.max_min_runtime_s
            and workload.gpus <= self.max_gpus
            and workload.array_id is None
        )

    def max_in_use(self, capacity: int) -> int:
        return max(1, math.floor(self.max_lane_fraction * capacity)) if self.enabled else 0

    def reserve_for(self, demand_gpu_s: float, capacity: int) -> int:
        """GPUs to hold for lane work, from the lane GPU-seconds submitted in the lookback."""
        if not self.enabled or demand_gpu_s <= 0 or capacity <= 0:
            return 0
        cap = max(1, math.floor(self.max_reserve_fraction * capacity))
        return min(cap, poisson_quantile(demand_gpu_s / self.lookback_s, self.service_level))


@dataclass(frozen=True)
class DebugLanes:
    """The lane of every pool: ``default``, unless ``pools`` names one for it."""

    default: DebugLane = field(default_factory=DebugLane)
    pools: tuple[tuple[str, DebugLane], ...] = ()

    def for_pool(self, pool: str) -> DebugLane:
        for name, lane in self.pools:
            if name == pool:
                return lane
        return self.default


def poisson_quantile(mean: float, level: float) -> int:
    """The smallest ``r >= 1`` with ``P(N < r) >= level`` for ``N ~ Poisson(mean)``."""
    term = cumulative = math.exp(-mean)
    r = 1
    while cumulative < level and r < 10_000:
        term *= mean / r
        cumulative += term
        r += 1
    return r


def _ended(workload: WorkloadState) -> bool:
    return workload.status in _ENDED or (
        workload.status in ("preempted", "lost") and not workload.resumable
    )


@dataclass
class _PoolLane:
    """One pool's lane workloads that may still run, and what they add up to."""

    #: Lane workloads of the pool not ended for good, each with the GPUs it holds there
    #: (placed or running in the pool, no preempt command out; else 0).
    live: dict[str, int] = field(default_factory=dict)
    #: Those waiting to be placed.
    pending: set[str] = field(default_factory=set)
    in_use: int = 0

    def follow(self, workload: WorkloadState, pool: str) -> None:
        """Count ``workload`` as it stands now (it is one of the pool's lane workloads)."""
        workload_id = workload.workload_id
        self.in_use -= self.live.pop(workload_id, 0)
        self.pending.discard(workload_id)
        if _ended(workload):
            return
        holds = 0
        if workload.status == "pending":
            self.pending.add(workload_id)
        elif workload.pool == pool and workload.status in ("placed", "running"):
            holds = 0 if workload.preempting else workload.gpus
        self.live[workload_id] = holds
        self.in_use += holds


@dataclass
class LaneIndex:
    """Lane workloads of every pool, kept between passes: each pass reads only the workloads
    submitted since the last (``seen`` of them were read already) and those a fact was about
    since (the fold's ``workload_changes`` from ``cursor`` on), not every lane workload."""

    #: The lanes the index sorted workloads by (another configuration starts it over).
    lanes: DebugLanes | None = None
    seen: int = 0
    #: How far the fold's change list was read, and how often it had been dropped then.
    cursor: int = 0
    dropped: int = 0
    #: How many workloads the fold had forgotten when ``seen`` was counted.
    forgotten: int = 0
    #: Per pool: (submit time, lane GPU-seconds, id) of every lane workload ever submitted.
    submitted: dict[str, SortedList[tuple[float, float, str]]] = field(default_factory=dict)
    #: Per pool: lane workloads that may still run, and what they add up to.
    pools: dict[str, _PoolLane] = field(default_factory=dict)
    #: Per lane workload not ended for good: the pools whose lane admits it.
    lanes_of: dict[str, tuple[str, ...]] = field(default_factory=dict)

    def catch_up(self, cluster: ClusterState, lanes: DebugLanes) -> None:
        indexes = cluster.indexes
        changes = indexes.workload_changes
        if self.lanes != lanes or self.forgotten != indexes.workloads_forgotten:
            # Another configuration, or the fold forgot ended workloads since (a live fold,
            # ``LiveState``, does once a day of event time; the simulator's never does): then
            # ``seen`` no longer counts a prefix of ``cluster.workloads``, and the newest are
            # not the last ``len - seen``. Counting on, the index missed the lane jobs submitted
            # until the count caught up again (no reserve held for them, no first pick), so the
            # live scheduler and the audit, which fold with forgetting, decided otherwise than a
            # fresh index and the simulator do. Read every workload again (once a day).
            self.lanes, self.seen, self.submitted, self.pools, self.lanes_of = (
                lanes, 0, {}, {}, {}
            )  # fmt: skip
            self.cursor = len(changes)
            self.forgotten = indexes.workloads_forgotten
        if self.dropped != indexes.workload_changes_dropped:
            # the fold dropped its list since (a burst): look at every live lane workload
            changed = set(self.lanes_of)
            self.dropped = indexes.workload_changes_dropped
        else:
            changed = {w for w in changes[self.cursor :] if w in self.lanes_of}
        self.cursor = len(changes)
        new = len(cluster.workloads) - self.seen
        if new > 0:
            # Workloads are added in fold order and none was forgotten since ``seen`` was
            # counted (see above): the newest are the last ``new``.
            for workload in islice(reversed(cluster.workloads.values()), new):
                admitted = tuple(p for p in workload.pools if lanes.for_pool(p).admits(workload))
                if not admitted:
                    continue
                demand = float(workload.gpus * workload.min_runtime_s)
                for pool in admitted:
                    self.submitted.setdefault(pool, SortedList()).add(
                        (workload.submitted_at, demand, workload.workload_id)
                    )
                self.lanes_of[workload.workload_id] = admitted
                changed.add(workload.workload_id)
            self.seen = len(cluster.workloads)
        for workload_id in changed:
            workload = cluster.workloads[workload_id]
            for pool in self.lanes_of[workload_id]:
                self.pools.setdefault(pool, _PoolLane()).follow(workload, pool)
            if _ended(workload):
                del self.lanes_of[workload_id]


@dataclass(frozen=True)
class LaneState:
    """The lane of one pool at one instant."""

    lane: DebugLane
    #: Lane workloads of the pool waiting to be placed, by id.
    pending: tuple[str, ...]
    #: GPUs held by lane work in the pool (placed or running, not being preempted).
    in_use: int
    #: GPUs to hold for lane work (in use or free).
    reserve: int
    #: The most GPUs lane work may hold at once with the lane's privileges.
    max_in_use: int

    def withheld(self, in_use: int | None = None) -> int:
        """Free GPUs that work outside the lane must leave free."""
        return max(0, self.reserve - (self.in_use if in_use is None else in_use))


def lane_state(
    cluster: ClusterState, lanes: DebugLanes, pool: str, now: float, index: LaneIndex
) -> LaneState:
    """``index``: the lane workloads the caller's earlier passes over ``cluster`` indexed."""
    lane = lanes.for_pool(pool)
    capacity = cluster.capacity(pool)
    if not lane.enabled:
        return LaneState(lane, (), 0, 0, 0)
    index.catch_up(cluster, lanes)
    lane_work = index.pools.get(pool) or _PoolLane()
    pending = sorted(lane_work.pending)  # only the waiting few need an order (by id)
    in_use = lane_work.in_use
    demand = sum(
        gpu_s
        for submitted_at, gpu_s, _id in _recent(index.submitted.get(pool), now - lane.lookback_s)
        if submitted_at <= now
    )
    return LaneState(
        lane,
        tuple(pending),
        in_use,
        lane.reserve_for(demand, capacity),
        lane.max_in_use(capacity),
    )


def _recent(
    submitted: SortedList[tuple[float, float, str]] | None, since: float
) -> Iterator[tuple[float, float, str]]:
    if submitted is None:
        return iter(())
    found: Iterator[tuple[float, float, str]] = submitted.irange((since, -1.0, ""))
    return found
