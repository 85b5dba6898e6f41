"""Why pending work waits: the queue of a pool in the order a pass considers it, and typed
reasons for each workload in it.

It sits next to the pass so that the explanation and the decision share one definition of the
order (:class:`FairShareOrder`, charged pick by pick as the pass charges a placement) and of a
fit (:mod:`placement`): an explanation computed elsewhere would drift from what the pass does.
Reasons are data, not sentences, so the HTTP API, the CLI and tests can each present or check
them without parsing text.

Read-only: nothing here changes the state it is given (the pass mutates its input, so it is
never run here). Pure like the rest of the core: ``now`` and the usage are arguments.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import ClassVar, Literal

from events.times import DEFAULT_WINDOW_S
from projections.budget_tree import BudgetTree
from projections.cluster_state import ClusterState
from projections.cluster_types import NodeState, QueueKey, WorkloadState
from projections.contract import contract_end
from scheduling.fairshare_order import FairShareOrder
from scheduling.pending_codes import PendingCode as PendingCode
from scheduling.placement import largest_node, needs_whole_nodes


@dataclass(frozen=True, slots=True)
class Offer:
    """What the pool offers one gang right now (on schedulable nodes only)."""

    fits_now: bool
    needs_whole_nodes: bool
    free_gpus: int
    largest_free_node: str | None
    largest_free_gpus: int
    #: Whole-node gangs only: GPUs on nodes with nothing assigned.
    free_gpus_on_idle_nodes: int | None
    capacity: int
    largest_node_gpus: int
    #: GPUs of those nodes held by work Fairshare did not place (design 2.8).
    foreign_gpus: int = 0


@dataclass(frozen=True, slots=True)
class NoShare:
    """The budget has no share of the pool (closed, or not in the tree): its work comes last."""

    code: ClassVar[PendingCode] = PendingCode.NO_SHARE
    budget: str
    pool: str


@dataclass(frozen=True, slots=True)
class NoNodes:
    code: ClassVar[PendingCode] = PendingCode.NO_NODES
    pool: str


@dataclass(frozen=True, slots=True)
class BudgetAhead:
    """A budget ranking ahead, with how many of its workloads come first."""

    budget: str
    rank: int | None
    #: ``inf`` for a budget without a share.
    usage_ratio: float
    workloads_ahead: int


@dataclass(frozen=True, slots=True)
class FairShare:
    """Work of the same kind (funded or burst) of other budgets comes first in the fair-share
    order. Not only budgets ranking ahead: each pick counts ``gpus x min_runtime`` against its
    budget, so budgets take turns, and a lower-ranked budget's work can come first."""

    code: ClassVar[PendingCode] = PendingCode.FAIR_SHARE
    budget: str
    rank: int | None
    usage_ratio: float
    #: In rank order.
    ahead: tuple[BudgetAhead, ...]

    @property
    def workloads_ahead(self) -> int:
        return sum(b.workloads_ahead for b in self.ahead)


@dataclass(frozen=True, slots=True)
class FundedFirst:
    """Burst (unallocated) work: every funded workload comes before any burst work, whatever
    the budgets' ranks."""

    code: ClassVar[PendingCode] = PendingCode.FUNDED_FIRST
    workloads_ahead: int
    #: Budgets of that funded work, sorted.
    budgets: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class BudgetQueue:
    """Work of the same budget comes first (higher priority, or submitted earlier)."""

    code: ClassVar[PendingCode] = PendingCode.BUDGET_QUEUE
    budget: str
    #: In queue order.
    workloads_ahead: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class TooLarge:
    """The gang can never fit: larger than the GPUs that are up in the pool (``limit`` pool),
    or than its largest node (``limit`` node, single-node gangs)."""

    code: ClassVar[PendingCode] = PendingCode.TOO_LARGE
    gpus: int
    pool: str
    limit: Literal["pool", "node"]
    limit_gpus: int
    offer: Offer


@dataclass(frozen=True, slots=True)
class FitsNow:
    """Free GPUs suffice: the next pass should place it unless work ahead takes them."""

    code: ClassVar[PendingCode] = PendingCode.FITS_NOW
    gpus: int
    pool: str
    offer: Offer


@dataclass(frozen=True, slots=True)
class InsufficientCapacity:
    code: ClassVar[PendingCode] = PendingCode.INSUFFICIENT_CAPACITY
    gpus: int
    pool: str
    offer: Offer


@dataclass(frozen=True, slots=True)
class Unallocated:
    """Burst work (min_runtime 0) never preempts: it waits for idle GPUs."""

    code: ClassVar[PendingCode] = PendingCode.UNALLOCATED


@dataclass(frozen=True, slots=True)
class Hold:
    """Running work protected by its contract until ``ends_at``."""

    workload_id: str
    budget: str
    gpus: int
    min_runtime_s: int
    ends_at: float
    #: A node on which its GPUs and the free ones would fit the waiting gang (single-node
    #: gangs), else None: freeing it alone is not enough, or the gang takes whole nodes.
    frees: str | None = None
    #: Whether, once its contract is over, its budget ranks behind the waiting workload's (as
    #: the ranking stands now): only then may a pass preempt it.
    preemptible: bool = True


@dataclass(frozen=True, slots=True)
class Contract:
    """Preemption is blocked by contracts (min_runtime) of work that could make room."""

    code: ClassVar[PendingCode] = PendingCode.CONTRACT
    #: Soonest end first; never empty.
    holds: tuple[Hold, ...]

    @property
    def waits_on(self) -> Hold:
        return self.holds[0]


@dataclass(frozen=True, slots=True)
class Starting:
    """Placed work that could make room has not started: its contract has not begun."""

    code: ClassVar[PendingCode] = PendingCode.STARTING
    workloads: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class RankedWork:
    workload_id: str
    budget: str
    rank: int | None


@dataclass(frozen=True, slots=True)
class RanksAhead:
    """Running work past its contract whose budget ranks ahead even after counting this
    request, so it may not be preempted for it."""

    code: ClassVar[PendingCode] = PendingCode.RANKS_AHEAD
    budget: str
    workloads: tuple[RankedWork, ...]


@dataclass(frozen=True, slots=True)
class CordonedNodes:
    code: ClassVar[PendingCode] = PendingCode.CORDONED_NODES
    pool: str
    nodes: tuple[str, ...]
    gpus: int


@dataclass(frozen=True, slots=True)
class DownNodes:
    code: ClassVar[PendingCode] = PendingCode.DOWN_NODES
    pool: str
    nodes: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class ArrayLimit:
    """Its job array has as many elements placed or running as its limit allows (``%K``):
    it is not in the queue until one of them ends (Slurm's ``JobArrayTaskLimit``)."""

    code: ClassVar[PendingCode] = PendingCode.ARRAY_LIMIT
    array_id: str
    limit: int
    running: int


PendingReason = (
    ArrayLimit
    | NoShare
    | NoNodes
    | FairShare
    | FundedFirst
    | BudgetQueue
    | TooLarge
    | FitsNow
    | InsufficientCapacity
    | Unallocated
    | Contract
    | Starting
    | RanksAhead
    | CordonedNodes
    | DownNodes
)


# -- the order ----------------------------------------------------------------------------------
def queue_order(
    cluster: ClusterState,
    tree: BudgetTree,
    pool: str,
    now: float,
    usage: Mapping[str, float],
    window_s: int = DEFAULT_WINDOW_S,
) -> list[WorkloadState]:
    """Pending work of ``pool`` in the order a scheduling pass considers it: allocated work in
    hierarchical fair-share order (each pick charging its budget ``gpus x min_runtime`` before
    the next, as the pass does for a placement), then unallocated work in the same order.
    Work of budgets without a share (closed, or unknown) comes last. Elements an array's
    limit holds back are not in it (:func:`held_by_arrays`)."""
    queues = cluster.indexes.pending.get(pool, {})
    order = FairShareOrder(tree, pool, now, usage, cluster.capacity(pool), window_s)
    ordered: list[WorkloadState] = []
    for allocated in (True, False):
        per_leaf: dict[str, deque[QueueKey]] = {}
        for budget, kinds in queues.items():
            keys = sorted(key for kind, q in kinds.items() if kind[0] == allocated for key in q)
            if keys:
                per_leaf[budget] = deque(keys)
        orphans = sorted(b for b in per_leaf if b not in order.shares or order.children.get(b))
        order.activate(sorted(b for b in per_leaf if b not in orphans))
        while (leaf := order.best_leaf()) is not None:
            waiting = per_leaf[leaf]
            workload = cluster.workloads[waiting.popleft()[3]]
            ordered.append(workload)
            if allocated:
                order.charge(leaf, float(workload.gpus * workload.min_runtime_s))
            if not waiting:
                order.deactivate(leaf)
        for budget in orphans:
            ordered.extend(cluster.workloads[key[3]] for key in per_leaf[budget])
    return ordered


def held_by_arrays(cluster: ClusterState, pool: str) -> list[WorkloadState]:
    """Pending elements of ``pool`` that their arrays' limits hold back, array by array (by
    id), each array's in the order they will be queued."""
    held: list[WorkloadState] = []
    for array_id in sorted(cluster.indexes.gates):
        gate = cluster.indexes.gates[array_id]
        held.extend(
            workload
            for *_order, workload_id in gate.held
            if pool in (workload := gate.pending[workload_id]).pools
        )
    return held


class PoolQueue:
    """One pool's pending work in pass order at ``now``, and why each workload waits.

    ``ordered`` is the queue a pass considers, then the elements their arrays' limits hold
    back (``considered`` of them are the former). ``ranking`` is the fair-share order as it
    stands (never charged): ranks and usage ratios are reported from it, and preemption is
    judged against it as the pass judges its first pick."""

    def __init__(
        self,
        cluster: ClusterState,
        tree: BudgetTree,
        pool: str,
        now: float,
        usage: Mapping[str, float],
        window_s: int = DEFAULT_WINDOW_S,
    ) -> None:
        self.cluster = cluster
        self.pool = pool
        self.now = now
        considered = queue_order(cluster, tree, pool, now, usage, window_s)
        self.considered = len(considered)
        self.ordered = (*considered, *held_by_arrays(cluster, pool))
        self.ranking = FairShareOrder(tree, pool, now, usage, cluster.capacity(pool), window_s)

    def rank(self, budget: str) -> int | None:
        return self.ranking.ranks().get(budget)

    def usage_ratio(self, budget: str) -> float:
        """``inf`` for a budget without a share."""
        return self.ranking.ratio(budget)

    def reasons(self, position: int) -> tuple[PendingReason, ...]:
        """Why the workload at ``position`` (1-based) is still pending, most decisive first."""
        workload = self.ordered[position - 1]
        if position > self.considered:
            return self._held(workload)
        ahead = Ahead.of(self.ordered[: position - 1])
        return _explain(self.cluster, self.pool, workload, ahead, self.ranking, self.now, {})

    def each(
        self, wanted: Callable[[WorkloadState], bool] | None = None
    ) -> Iterator[tuple[int, WorkloadState, tuple[PendingReason, ...]]]:
        """(position, workload, :meth:`reasons`) of every ``wanted`` workload, in one walk of
        the queue: what is ahead is summed as it goes and what the pool offers is worked out
        once per shape of work, so a queue of 10,000 costs 10,000 steps, not 50 million."""
        ahead = Ahead()
        rooms: dict[_Shape, _Room] = {}
        for position, workload in enumerate(self.ordered, start=1):
            if wanted is None or wanted(workload):
                if position > self.considered:
                    found = self._held(workload)
                else:
                    found = _explain(
                        self.cluster, self.pool, workload, ahead, self.ranking, self.now, rooms
                    )
                yield position, workload, found
            ahead.add(workload)

    def _held(self, workload: WorkloadState) -> tuple[PendingReason, ...]:
        gate = self.cluster.indexes.gates[workload.array_id or ""]
        return (ArrayLimit(workload.array_id or "", gate.limit, gate.running),)


# -- the reasons --------------------------------------------------------------------------------
class Ahead:
    """The work ahead of a workload in its queue, as its standing reasons read it, summed as
    the queue is walked (:meth:`PoolQueue.each`)."""

    def __init__(self) -> None:
        #: Funded (allocated) workloads, and their budgets.
        self.funded = 0
        self.funded_budgets: set[str] = set()
        #: Per (allocated, budget): how many; per budget: the ids, in queue order.
        self.of_kind: dict[tuple[bool, str], int] = {}
        self.of_budget: dict[str, list[str]] = {}

    @classmethod
    def of(cls, workloads: Iterable[WorkloadState]) -> Ahead:
        ahead = cls()
        for workload in workloads:
            ahead.add(workload)
        return ahead

    def add(self, workload: WorkloadState) -> None:
        if workload.allocated:
            self.funded += 1
            self.funded_budgets.add(workload.budget)
        key = (workload.allocated, workload.budget)
        self.of_kind[key] = self.of_kind.get(key, 0) + 1
        self.of_budget.setdefault(workload.budget, []).append(workload.workload_id)

    def standing(self, workload: WorkloadState, ranking: FairShareOrder) -> list[PendingReason]:
        """Funded work ahead of burst work, then work of its kind of other budgets (fair
        share), then of its own budget."""
        ranks = ranking.ranks()
        mine = workload.budget
        reasons: list[PendingReason] = []
        if self.funded and not workload.allocated:
            reasons.append(FundedFirst(self.funded, tuple(sorted(self.funded_budgets))))
        counts = {
            budget: count
            for (allocated, budget), count in self.of_kind.items()
            if allocated == workload.allocated and budget != mine and count
        }
        if counts:
            ordered = sorted(counts, key=lambda b: (ranks.get(b, len(ranks) + 1), b))
            reasons.append(
                FairShare(
                    mine,
                    ranks.get(mine),
                    ranking.ratio(mine),
                    tuple(
                        BudgetAhead(b, ranks.get(b), ranking.ratio(b), counts[b]) for b in ordered
                    ),
                )
            )
        same = tuple(self.of_budget.get(mine, ()))
        if same:
            reasons.append(BudgetQueue(mine, same))
        return reasons


#: What the pool's side of the reasons depends on: budget, GPUs, gang, allocated, contract.
_Shape = tuple[str, int, str, bool, int]
#: The pool's side: whether it has nodes, whether and how the work fits, nodes out of service.
_Room = tuple[bool, tuple[PendingReason, ...], tuple[PendingReason, ...]]


def explain(
    cluster: ClusterState,
    pool: str,
    workload: WorkloadState,
    ahead: Sequence[WorkloadState],
    ranking: FairShareOrder,
    now: float,
) -> tuple[PendingReason, ...]:
    """Why ``workload`` is still pending in ``pool`` behind ``ahead``, most decisive first:
    its standing in the order, then whether it fits (and if not, what keeps preemption from
    making room), then nodes of the pool that take no new work."""
    return _explain(cluster, pool, workload, Ahead.of(ahead), ranking, now, {})


def _explain(
    cluster: ClusterState,
    pool: str,
    workload: WorkloadState,
    ahead: Ahead,
    ranking: FairShareOrder,
    now: float,
    rooms: dict[_Shape, _Room],
) -> tuple[PendingReason, ...]:
    reasons: list[PendingReason] = []
    if workload.budget not in ranking.shares:
        reasons.append(NoShare(workload.budget, pool))
    shape = (
        workload.budget,
        workload.gpus,
        workload.gang,
        workload.allocated,
        workload.min_runtime_s,
    )
    room = rooms.get(shape)
    if room is None:
        room = rooms[shape] = _pool_side(cluster, pool, workload, ranking, now)
    has_nodes, fit, out_of_service = room
    if not has_nodes:
        return (*reasons, NoNodes(pool))
    reasons.extend(ahead.standing(workload, ranking))
    return (*reasons, *fit, *out_of_service)


def _pool_side(
    cluster: ClusterState,
    pool: str,
    workload: WorkloadState,
    ranking: FairShareOrder,
    now: float,
) -> _Room:
    """What the pool says of a workload of this shape: whether it has nodes, whether and how
    the work fits, and which nodes take no new work."""
    pool_nodes = [n for n in cluster.nodes.values() if n.pool == pool]
    if not pool_nodes:
        return False, (), ()
    fit = tuple(_room(cluster, pool, workload, pool_nodes, ranking, now))
    out: list[PendingReason] = []
    cordoned = tuple(sorted(n.name for n in pool_nodes if n.cordoned and not n.down))
    if cordoned:
        gpus = sum(cluster.nodes[n].gpus for n in cordoned)
        out.append(CordonedNodes(pool, cordoned, gpus))
    down = tuple(sorted(n.name for n in pool_nodes if n.down))
    if down:
        out.append(DownNodes(pool, down))
    return True, fit, tuple(out)


def offer(cluster: ClusterState, pool: str, workload: WorkloadState) -> Offer:
    """What ``pool`` offers ``workload``'s gang right now."""
    usable = [n for n in cluster.nodes.values() if n.pool == pool and n.schedulable]
    node_size = largest_node(cluster, pool)
    whole = needs_whole_nodes(workload.gpus, workload.gang, node_size)
    largest = max(usable, key=lambda n: (n.free, n.name), default=None)
    free_whole: int | None = None
    if whole:
        free_whole = sum(n.gpus for n in usable if n.free == n.gpus)
        fits = free_whole >= workload.gpus
    else:
        fits = largest is not None and largest.free >= workload.gpus
    return Offer(
        fits_now=fits,
        needs_whole_nodes=whole,
        free_gpus=sum(n.free for n in usable),
        largest_free_node=None if largest is None else largest.name,
        largest_free_gpus=0 if largest is None else largest.free,
        free_gpus_on_idle_nodes=free_whole,
        capacity=sum(n.gpus for n in usable),
        largest_node_gpus=node_size,
        foreign_gpus=sum(n.foreign for n in usable),
    )


def _room(
    cluster: ClusterState,
    pool: str,
    workload: WorkloadState,
    pool_nodes: list[NodeState],
    ranking: FairShareOrder,
    now: float,
) -> list[PendingReason]:
    """Whether it could fit at all, fits now, or what keeps it from fitting."""
    fit = offer(cluster, pool, workload)
    up_gpus = sum(n.gpus for n in pool_nodes if not n.down)
    if workload.gpus > up_gpus:
        return [TooLarge(workload.gpus, pool, "pool", up_gpus, fit)]
    if not fit.needs_whole_nodes and workload.gpus > fit.largest_node_gpus:
        return [TooLarge(workload.gpus, pool, "node", fit.largest_node_gpus, fit)]
    if fit.fits_now:
        return [FitsNow(workload.gpus, pool, fit)]
    return [
        InsufficientCapacity(workload.gpus, pool, fit),
        *blockers(cluster, pool, workload, ranking, now),
    ]


def blockers(
    cluster: ClusterState,
    pool: str,
    workload: WorkloadState,
    ranking: FairShareOrder,
    now: float,
) -> list[PendingReason]:
    """Why preemption does not free room: contracts (min_runtime) of running work, work not yet
    started, and running work whose budget ranks ahead even after counting this request. Only
    work on a node that could take the gang counts (freeing the rest would not help)."""
    if not workload.allocated:
        return [Unallocated()]
    whole = needs_whole_nodes(workload.gpus, workload.gang, largest_node(cluster, pool))
    protected: list[Hold] = []
    not_started: list[str] = []
    ahead: list[WorkloadState] = []
    extra = float(workload.gpus * workload.min_runtime_s)
    for running in cluster.active_in(pool):
        if running.preempting or not running.allocated:
            continue  # already going, or unallocated (always preemptible)
        nodes = [cluster.nodes.get(node) for node, _gpus in running.placement]
        if not any(
            n is not None and n.schedulable and (whole or n.gpus >= workload.gpus) for n in nodes
        ):
            continue
        behind = ranking.ranks_behind(running.budget, workload.budget, extra)
        if running.started_at is None:
            not_started.append(running.workload_id)
        elif not running.contract_over(now):
            end = contract_end(running.started_at, running.min_runtime_s)
            frees = None if whole else _frees(cluster, running, workload.gpus)
            protected.append(
                Hold(
                    running.workload_id,
                    running.budget,
                    running.gpus,
                    running.min_runtime_s,
                    end,
                    frees,
                    behind,
                )
            )
        elif not behind:
            ahead.append(running)
    reasons: list[PendingReason] = []
    if protected:
        reasons.append(Contract(tuple(sorted(protected, key=lambda h: (h.ends_at, h.workload_id)))))
    if not_started:
        reasons.append(Starting(tuple(not_started)))
    if ahead:
        ranks = ranking.ranks()
        ranked = tuple(RankedWork(w.workload_id, w.budget, ranks.get(w.budget)) for w in ahead)
        reasons.append(RanksAhead(workload.budget, ranked))
    return reasons


def _frees(cluster: ClusterState, running: WorkloadState, gpus: int) -> str | None:
    """The node (by name) on which ``running``'s GPUs and the free ones would hold ``gpus``."""
    for name, held in running.placement:
        node = cluster.nodes.get(name)
        if node is not None and node.schedulable and node.free + len(held) >= gpus:
            return name
    return None


#: Most decisive first: what must change before the workload can start. Capacity and what
#: blocks preemption come before the order: one that does not fit waits whatever its
#: position, one that fits is placed by the next pass unless work ahead takes the GPUs.
_PRIMARY: tuple[type, ...] = (
    ArrayLimit,
    NoNodes,
    TooLarge,
    Contract,
    Starting,
    RanksAhead,
    Unallocated,
    InsufficientCapacity,
    FitsNow,
    NoShare,
    FundedFirst,
    FairShare,
    BudgetQueue,
    CordonedNodes,
    DownNodes,
)


def primary(reasons: Sequence[PendingReason]) -> PendingReason | None:
    """The one reason that decides, like squeue's REASON column; None for no reasons."""
    for kind in _PRIMARY:
        for reason in reasons:
            if isinstance(reason, kind):
                return reason
    return reasons[0] if reasons else None
