"""When pending work will start, like ``squeue --start``: the pass run forward on the state now.

Nobody knows when running work will really end. It ends at the latest at its start plus its
time limit (``time_limits.py``), but limits are what work may last, rarely what it does: a run
is expected to last the mean of its submitter's last two runs that finished by themselves
(``ClusterState.recent_runtimes``; Tsafrir, Etsion and Feitelson 2007), else the median of
its pool's last runs (``recent_pool_runtimes``), else, on a system where no run has finished
yet, its contract; always between its contract and its limit. A run that has outlived its
prediction is expected to last as long again as it has (a run's age is the best guess of what
is left when nothing else is known), never past its limit. The limit stays a bound: the
default 24 hours once put every one-minute job of a fresh system a day out.

Each estimate says what it rests on (:class:`Basis`), the weakest prediction among the runs it
waited on: ``now`` (it fits now), ``history`` (every such run predicted from its submitter's
own runs), ``pool`` (some from the pool's), ``guess`` (some from a contract or a run's age
alone: likely early).
Run forward from ``now`` on a copy of what matters of the state (each pool's free GPUs per
node), work ends at those instants, and
at ``now`` and at each end the pass's rules place what fits: per pool, debug-lane work first,
then allocated work, then unallocated work, each in fair-share order (the core's
:class:`FairShareOrder`, each placement charged before the next pick, GPUs held counted against
entitlements), a gang on one node best-fit, a larger one on whole free nodes (the rules of
``placement.py``). A placed workload runs its own expected run. The instant a workload is
placed there is its estimated start; one not placed within ``horizon_s`` (7 days) has none.
Holds and backfill in the pass itself keep reading the limits: a promise needs the latest end.

What the estimate leaves out, so that it can answer an API request in milliseconds: work that
will be submitted later (it can only delay the estimate when it ranks higher), runs ending
before their expected end (they only bring starts forward), preemptions, the debug lane's reserve
and held nodes, and usage accruing while the forward run goes (the order changes only by the
pass's own charges). Those make it a forecast, not a promise; the simulator measures how far
it is off (``services/simulator/estimates.py``, docs/simulation/README.md).

Pure: no clock, no I/O; iteration in sorted orders only; ``cluster`` is read, never changed.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from enum import IntEnum
from statistics import median

from events.times import DEFAULT_WINDOW_S
from projections.budget_tree import BudgetTree
from projections.cluster_state import ClusterState
from projections.cluster_types import WorkloadState
from scheduling.debug_lane import DebugLanes
from scheduling.fairshare_order import FairShareOrder, held_by_leaf
from scheduling.placement import largest_node, needs_whole_nodes
from scheduling.scheduling_pass import UsageSource
from scheduling.time_limits import TimeLimits, expected_end, limit_s

#: How far ahead an estimate looks (a week: beyond it, too much else will have happened).
HORIZON_S = 7 * 86400.0


class Basis(IntEnum):
    """What an estimate rests on, surest first (a larger value is a weaker prediction)."""

    NOW = 0
    HISTORY = 1
    POOL = 2
    GUESS = 3

    @property
    def word(self) -> str:
        return self.name.lower()


@dataclass(frozen=True, slots=True)
class StartEstimate:
    """When a pending workload should start (None: not within the horizon) and how sure."""

    at: float | None
    basis: Basis


#: What a workload placed in a step holds until the caller sets its instant.
_PLACED = StartEstimate(None, Basis.NOW)

#: Where a run sits: (index of the node in its pool, GPUs taken there).
_Parts = tuple[tuple[int, int], ...]


@dataclass
class _Queue:
    """A leaf's pending work of one shape (GPUs, gang) in queue order: work of one shape fits
    alike, so only its first unplaced workload is ever tried (the pass's queue kinds)."""

    waiting: list[WorkloadState]
    head: int = 0

    def first(self, started: Mapping[str, object]) -> WorkloadState | None:
        waiting = self.waiting
        while self.head < len(waiting) and waiting[self.head].workload_id in started:
            self.head += 1  # placed (here, or in another pool it lists)
        return waiting[self.head] if self.head < len(waiting) else None


#: Per phase (lane, allocated, unallocated), per leaf, its queues by shape.
_Phase = dict[str, dict[tuple[int, str], _Queue]]


@dataclass
class _Pool:
    """One pool as the forward run sees it: free GPUs per schedulable node, the order, and the
    pending work of each leaf per phase (lane, allocated, unallocated), by shape."""

    name: str
    names: list[str]
    sizes: list[int]
    free: list[int]
    node_size: int
    order: FairShareOrder
    phases: tuple[_Phase, ...]
    index: dict[str, int] = field(default_factory=dict)

    def free_total(self) -> int:
        return sum(self.free)

    def fit(self, gpus: int, gang: str) -> _Parts | None:
        """Where ``gpus`` would go now, by the rules of ``placement.py``."""
        if not needs_whole_nodes(gpus, gang, self.node_size):
            best: tuple[int, str] | None = None
            chosen = -1
            for i, free in enumerate(self.free):
                if free >= gpus and (best is None or (free, self.names[i]) < best):
                    best, chosen = (free, self.names[i]), i
            return None if chosen < 0 else ((chosen, gpus),)
        whole = [i for i, free in enumerate(self.free) if free == self.sizes[i]]
        whole.sort(key=lambda i: (-self.sizes[i], self.names[i]))
        parts: list[tuple[int, int]] = []
        left = gpus
        for i in whole:
            take = min(self.sizes[i], left)
            parts.append((i, take))
            left -= take
            if left == 0:
                return tuple(parts)
        return None

    def take(self, parts: _Parts, sign: int) -> None:
        for i, gpus in parts:
            self.free[i] -= sign * gpus


@dataclass(order=True)
class _End:
    at: float
    seq: int
    pool: str = field(compare=False)
    parts: _Parts = field(compare=False)
    leaf: str = field(compare=False)
    held: int = field(compare=False)
    basis: Basis = field(compare=False, default=Basis.HISTORY)


def estimate_starts(
    cluster: ClusterState,
    tree: BudgetTree,
    usage: UsageSource,
    now: float,
    *,
    limits: TimeLimits | None = None,
    debug_lanes: DebugLanes | None = None,
    window_s: int = DEFAULT_WINDOW_S,
    targets: Collection[str] | None = None,
    horizon_s: float = HORIZON_S,
    to_limits: bool = False,
) -> dict[str, StartEstimate]:
    """Estimated start of each pending workload in ``targets`` (every pending one when None):
    the instant the forward run places it, ``now`` at the earliest; None when that is beyond
    ``now + horizon_s`` or never (no pool it lists could hold it), each with its basis.
    Workloads that are not pending are left out. ``to_limits``: every run lasts its limit
    (the latest each could start, unless work that ranks higher arrives)."""
    limits = limits or TimeLimits()
    lanes = debug_lanes or DebugLanes()
    pending = _pending(cluster, targets)
    wanted = set(pending) if targets is None else {t for t in targets if t in pending}
    if not wanted:
        return {}
    pools = _pools(cluster, tree, usage, now, lanes, window_s)
    ends: list[_End] = []
    seq = itertools.count()
    known = None if to_limits else _Known(cluster.recent_runtimes, cluster.recent_pool_runtimes)
    for workload in _running(cluster):
        pool = pools.get(workload.pool or "")
        predicted = _predicted_end(workload, limits, now, known)
        if pool is None or predicted is None:
            continue
        at, basis = predicted
        parts = tuple(
            (pool.index[node], len(gpus)) for node, gpus in workload.placement if node in pool.index
        )
        held = workload.gpus if workload.allocated and not workload.preempting else 0
        ends.append(_End(at, next(seq), pool.name, parts, workload.budget, held, basis))
    heapq.heapify(ends)
    started: dict[str, StartEstimate] = {}
    at = now
    weakest = Basis.NOW  # the weakest prediction of the ends waited on so far
    while True:
        for name in sorted(pools):
            for workload, parts in _step(pools[name], started):
                started[workload.workload_id] = StartEstimate(at, weakest)
                run, basis = _predicted_run(workload, name, limits, known)
                held = workload.gpus if workload.allocated else 0
                heapq.heappush(
                    ends, _End(at + run, next(seq), name, parts, workload.budget, held, basis)
                )
        if wanted.issubset(started) or not ends or ends[0].at > now + horizon_s:
            break
        at = ends[0].at
        while ends and ends[0].at == at:
            done = heapq.heappop(ends)
            weakest = max(weakest, done.basis)
            pool = pools[done.pool]
            pool.take(done.parts, -1)
            if done.held:
                pool.order.hold(done.leaf, -done.held)
    return {w: started.get(w) or StartEstimate(None, Basis.GUESS) for w in sorted(wanted)}


@dataclass(frozen=True, slots=True)
class _Known:
    """What finished runs say: per submitter (their last runs) and per pool (anyone's)."""

    by_submitter: Mapping[str, tuple[float, ...]]
    by_pool: Mapping[str, tuple[float, ...]]


def _predicted_run(
    workload: WorkloadState, pool: str, limits: TimeLimits, known: _Known | None
) -> tuple[float, Basis]:
    """How long a run of ``workload`` is expected to last, within [its contract, its limit]:
    the mean of its submitter's last runs that finished by themselves; else the median of the
    pool's last runs; else (no run has finished there yet) its contract. Its limit where
    nothing is ``known`` (the bound)."""
    limit = float(limit_s(workload, pool, limits))
    if known is None:
        return limit, Basis.HISTORY
    floor = float(workload.min_runtime_s)
    own = known.by_submitter.get(workload.submitter)
    if own:
        return min(limit, max(floor, sum(own) / len(own))), Basis.HISTORY
    pooled = known.by_pool.get(pool)
    if pooled:
        return min(limit, max(floor, median(pooled))), Basis.POOL
    return min(limit, max(floor, MIN_GUESS_S)), Basis.GUESS


#: The shortest run a guess expects (a run with no contract and nothing known still takes a
#: while to end).
MIN_GUESS_S = 60.0


def _predicted_end(
    workload: WorkloadState, limits: TimeLimits, now: float, known: _Known | None
) -> tuple[float, Basis] | None:
    """When a run holding GPUs is expected to end: its start plus its predicted run. A run
    that has outlived its own submitter's runs is not like them: to its latest end
    (:func:`expected_end`). One that has outlived its pool's runs or its contract, as long
    again as it has run (a guess), never past its latest end: on a fresh system a run past
    its contract would otherwise be expected to last the default limit (a day)."""
    latest = expected_end(workload, limits, now)
    if latest is None or workload.pool is None:
        return None
    if known is None:
        return latest, Basis.HISTORY
    start = workload.started_at if workload.started_at is not None else now
    run, basis = _predicted_run(workload, workload.pool, limits, known)
    if start + run > now:
        return start + run, basis
    if basis is Basis.HISTORY:
        return latest, basis
    return min(latest, now + max(now - start, MIN_GUESS_S)), Basis.GUESS


def _pending(cluster: ClusterState, targets: Collection[str] | None) -> dict[str, WorkloadState]:
    ids = cluster.workloads if targets is None else targets
    return {
        w: cluster.workloads[w]
        for w in sorted(ids)
        if w in cluster.workloads and cluster.workloads[w].status == "pending"
    }


def _running(cluster: ClusterState) -> list[WorkloadState]:
    found: list[WorkloadState] = []
    for pool in sorted(cluster.indexes.active):
        for workload_id in sorted(cluster.indexes.active[pool]):
            workload = cluster.workloads[workload_id]
            if not workload.preempting:  # a stopping run's GPUs are free in the state already
                found.append(workload)
    return found


def _pools(
    cluster: ClusterState,
    tree: BudgetTree,
    usage: UsageSource,
    now: float,
    lanes: DebugLanes,
    window_s: int,
) -> dict[str, _Pool]:
    pools: dict[str, _Pool] = {}
    for name in sorted(cluster.indexes.pools):
        nodes = sorted(
            (n for n in cluster.nodes.values() if n.pool == name and n.schedulable),
            key=lambda n: n.name,
        )
        capacity = cluster.capacity(name)
        if not nodes or capacity <= 0:
            continue
        order = FairShareOrder(
            tree, name, now, usage(name), capacity, window_s, held_by_leaf(cluster, name)
        )
        lane = lanes.for_pool(name)
        phases: tuple[dict[str, dict[tuple[int, str], list[WorkloadState]]], ...] = ({}, {}, {})
        for by_kind in cluster.indexes.pending.get(name, {}).values():
            for queue in by_kind.values():
                for *_order, workload_id in queue:
                    workload = cluster.workloads[workload_id]
                    leaf = workload.budget
                    if leaf not in order.shares or order.children.get(leaf):
                        continue  # the pass never places work of a budget without a share
                    phase = 0 if lane.admits(workload) else 1 if workload.allocated else 2
                    shape = (workload.gpus, workload.gang)
                    phases[phase].setdefault(leaf, {}).setdefault(shape, []).append(workload)
        pools[name] = _Pool(
            name=name,
            names=[n.name for n in nodes],
            sizes=[n.gpus for n in nodes],
            # ``room``: below 0 while foreign work holds GPUs Fairshare assigned, so the
            # runs' ends there give back only what is really there.
            free=[n.room for n in nodes],
            node_size=largest_node(cluster, name),
            order=order,
            phases=tuple(
                {
                    leaf: {
                        shape: _Queue(sorted(waiting, key=WorkloadState.queue_key))
                        for shape, waiting in sorted(shapes.items())
                    }
                    for leaf, shapes in by_leaf.items()
                }
                for by_leaf in phases
            ),
            index={n.name: i for i, n in enumerate(nodes)},
        )
    return pools


def _step(pool: _Pool, started: dict[str, StartEstimate]) -> list[tuple[WorkloadState, _Parts]]:
    """One pass of the forward run over ``pool``: what it places, in order. Each pick is the
    best leaf's first workload in queue order that fits; only the first of each shape needs
    trying, so a pick costs the leaf's shapes, not its queue."""
    placed: list[tuple[WorkloadState, _Parts]] = []
    order = pool.order
    for phase in pool.phases:
        if pool.free_total() == 0:
            break
        leaves = sorted(
            leaf
            for leaf, queues in phase.items()
            if any(queue.first(started) is not None for queue in queues.values())
        )
        order.activate(leaves)
        active = set(leaves)
        #: The fewest GPUs that did not fit, per kind of gang (single node, whole nodes): more
        #: of the same kind does not fit either until something ends.
        failed = {False: 1 << 30, True: 1 << 30}
        while (leaf := order.best_leaf()) is not None:
            found = _first_fit(pool, phase[leaf], started, failed)
            if found is None:
                order.deactivate(leaf)
                active.discard(leaf)
                continue
            workload, parts = found
            pool.take(parts, 1)
            placed.append((workload, parts))
            started[workload.workload_id] = _PLACED  # its instant is set by the caller
            if workload.allocated:
                order.charge(leaf, float(workload.gpus * workload.min_runtime_s))
                order.hold(leaf, workload.gpus)
            if pool.free_total() == 0:
                break
        for leaf in sorted(active):
            order.deactivate(leaf)
    return placed


def _first_fit(
    pool: _Pool,
    queues: dict[tuple[int, str], _Queue],
    started: Mapping[str, object],
    failed: dict[bool, int],
) -> tuple[WorkloadState, _Parts] | None:
    """The leaf's first workload in queue order that fits now, and where."""
    heads = sorted(
        (workload.queue_key(), workload)
        for queue in queues.values()
        if (workload := queue.first(started)) is not None
    )
    for _key, workload in heads:
        whole = needs_whole_nodes(workload.gpus, workload.gang, pool.node_size)
        if workload.gpus >= failed[whole]:
            continue
        parts = pool.fit(workload.gpus, workload.gang)
        if parts is None:
            failed[whole] = workload.gpus
            continue
        return workload, parts
    return None
