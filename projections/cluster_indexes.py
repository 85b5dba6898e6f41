"""What the cluster fold derives from its facts as it goes: the scheduler's lookup indexes.

Pending queues, free-GPU buckets, active runs, contract ends, held GPUs and change marks are
each a function of the facts in :class:`~projections.cluster_state.ClusterState`; the fold keeps
them current because rebuilding them every pass would cost as much as the pass. A fresh fold of
the same events builds the same indexes; none is ever replayed.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from sortedcontainers import SortedList

from projections.array_gates import ArrayGate
from projections.cluster_types import NodeState, QueueKey, QueueKind, WorkloadState
from projections.contract import contract_end
from projections.queue_heads import QueueHeads, queue_heads


class PoolIndex:
    """Schedulable nodes of one pool bucketed by free GPU count, for O(1) fit checks and
    deterministic best-fit choice (fewest free GPUs that suffice, then node name)."""

    def __init__(self) -> None:
        self.by_free: dict[int, SortedList[str]] = {}
        self.capacity = 0  # GPUs on nodes that are up (cordoned ones still count)
        self.free_total = 0  # free GPUs on schedulable nodes
        #: GPUs of the pool's largest node, up or not (a node keeps its pool and GPUs).
        self.largest_node = 0
        #: GPUs of every node ever registered in the pool, up or not: the largest gang the
        #: pool could ever hold (a node keeps its pool and GPUs, and none is unregistered).
        self.registered = 0
        self._max_free: int | None = 0

    def add(self, node: NodeState) -> None:
        free = node.free
        self.by_free.setdefault(free, SortedList()).add(node.name)
        self.free_total += free
        if self._max_free is not None and free > self._max_free:
            self._max_free = free

    def remove(self, node: NodeState, free: int) -> None:
        bucket = self.by_free.get(free)
        if bucket is None:
            return
        try:
            bucket.remove(node.name)
        except ValueError:
            return  # not indexed under that count
        self.free_total -= free
        if not bucket and free == self._max_free:
            self._max_free = None  # recomputed when next asked

    def max_free(self) -> int:
        if self._max_free is None:
            self._max_free = max((f for f, names in self.by_free.items() if names), default=0)
        return self._max_free

    def best_fit(self, gpus: int) -> str | None:
        for free in sorted(self.by_free):
            if free >= gpus and self.by_free[free]:
                return str(self.by_free[free][0])
        return None

    def nodes_with_free(self, free: int) -> SortedList[str]:
        return self.by_free.get(free, SortedList())


class ClusterIndexes:
    """What the fold derives from the facts as it goes, so that a pass finds by pool, kind or
    deadline what it would otherwise scan every node and workload for.

    Derived data only: each field is a function of the facts (the change marks, of the order
    the fold saw them in too). Only the fold (``ClusterState``) writes here, as it changes the
    facts, mostly through the methods below; everyone else reads.
    """

    #: Changes kept per pool before the list is dropped (a reader then rebuilds).
    VICTIM_CHANGES_KEPT = 100_000

    def __init__(self) -> None:
        # -- lookups -----------------------------------------------------------------------
        #: Schedulable nodes per pool by free GPUs, and the pool's capacity.
        self.pools: dict[str, PoolIndex] = {}
        #: What runs each pool's work (its nodes' executors; a node keeps the one it first
        #: registered with): every submission's spec is checked against them, and scanning
        #: every node of the pool each time cost a submission O(nodes).
        self.executors: dict[str, set[str]] = {}
        #: Pending workloads per pool, per budget, per kind (allocated, GPUs, gang shape), in
        #: queue order: the scheduler's candidates. Entries are ``queue_key()`` tuples.
        self.pending: dict[str, dict[str, dict[QueueKind, SortedList[QueueKey]]]] = {}
        #: Per pool, per budget with someone queued there, what its queues come to
        #: (``queue_heads.py``): recomputed for the budget whose queue changed, read by every
        #: pass instead of every queue.
        self.heads: dict[str, dict[str, QueueHeads]] = {}
        #: Workloads holding GPUs (placed/running), by pool.
        self.active: dict[str, set[str]] = {}
        #: Preempted or lost resumable workloads that the scheduler must requeue.
        self.awaiting_requeue: set[str] = set()
        #: Per throttled array, its pending elements split between the queues above and
        #: those its limit holds back (``array_gates.py``).
        self.gates: dict[str, ArrayGate] = {}
        #: Active workloads whose submitter asked to cancel them.
        self.cancelling: set[str] = set()
        #: Nodes out of service (cordoned, or down): maintenance works through these.
        self.cordoned_nodes: set[str] = set()
        self.down_nodes: set[str] = set()
        #: Possible preemption victims, per pool: running allocated work by the time its
        #: contract ends (``contract_end``: victims once ``now`` has reached it, exactly when
        #: ``WorkloadState.contract_over``), and active unallocated work.
        self.contract_ends: dict[str, SortedList[tuple[float, str]]] = {}
        self.unallocated_active: dict[str, set[str]] = {}
        #: Allocated GPUs each budget holds per pool (placed or running, no preempt command
        #: out): what fair share compares with entitlements every pass, which counting the
        #: pool's runs would cost as much as the pass itself.
        self.held: dict[str, dict[str, int]] = {}
        #: Per node, the latest contract end among the started allocated runs assigned GPUs
        #: there (-inf when none): no run there frees its GPUs by contract before it.
        self.contract_bounds: dict[str, float] = {}
        #: Per pool, every node by its contract bound: the nodes whose runs' contracts all end
        #: by a deadline, without looking at the others (holding nodes for a gang).
        self.by_ready: dict[str, SortedList[tuple[float, str]]] = {}
        # -- change marks: how a reader that keeps its own derived data knows it is stale ----
        #: Bumped on every change of GPU assignment or node availability in a pool.
        self.layout_version: dict[str, int] = {}
        #: Bumped when a node of the pool registers or changes availability.
        self.node_version: dict[str, int] = {}
        #: Per pool, the workloads whose standing as a possible victim may have changed, in
        #: fold order (placed, started, preempt command, released), and how often the list was
        #: dropped: a victim index catches up from here instead of being rebuilt every pass.
        self.victim_changes: dict[str, list[str]] = {}
        self.victim_changes_dropped: dict[str, int] = {}
        #: Every workload a fact was about (its status, placement or flags may have changed),
        #: in fold order, and how often the list was dropped: a reader that keeps something
        #: per workload catches up from here (the debug lane's index) instead of looking at
        #: every workload each pass. New workloads are not listed: they come last in
        #: ``ClusterState.workloads``.
        self.workload_changes: list[str] = []
        self.workload_changes_dropped = 0
        #: How many workloads the fold has forgotten (``ClusterState.forget_ended_before``):
        #: ``ClusterState.workloads`` then no longer only grows, so a reader that counts the
        #: workloads it has read to find the new ones (the debug lane's index) must start over.
        self.workloads_forgotten = 0

    # -- nodes -----------------------------------------------------------------------------
    def pool_index(self, pool: str) -> PoolIndex:
        index = self.pools.get(pool)
        if index is None:
            index = self.pools[pool] = PoolIndex()
        return index

    def layout_changed(self, pool: str) -> None:
        self.layout_version[pool] = self.layout_version.get(pool, 0) + 1

    def _nodes_changed(self, pool: str) -> None:
        self.node_version[pool] = self.node_version.get(pool, 0) + 1

    def node_registered(self, node: NodeState) -> None:
        self._nodes_changed(node.pool)
        index = self.pool_index(node.pool)
        index.add(node)
        index.capacity += node.gpus
        index.largest_node = max(index.largest_node, node.gpus)
        index.registered += node.gpus
        self.executors.setdefault(node.pool, set()).add(node.executor)
        bound = self.contract_bounds[node.name] = -math.inf
        self.by_ready.setdefault(node.pool, SortedList()).add((bound, node.name))
        self.active.setdefault(node.pool, set())
        self.pending.setdefault(node.pool, {})

    def topology_changed(self, node: NodeState) -> None:
        """A re-registration moved the node to another block or rack: placements may differ."""
        self._nodes_changed(node.pool)
        self.layout_changed(node.pool)

    def availability_changing(self, node: NodeState) -> None:
        """Before ``node`` is cordoned, uncordoned, down or up: out of the pool's index as it
        stood (:meth:`availability_changed` puts it back as it stands after)."""
        self.layout_changed(node.pool)
        self._nodes_changed(node.pool)
        index = self.pool_index(node.pool)
        if node.schedulable:
            index.remove(node, node.free)
        if not node.down:
            index.capacity -= node.gpus

    def availability_changed(self, node: NodeState) -> None:
        for flag, names in ((node.cordoned, self.cordoned_nodes), (node.down, self.down_nodes)):
            if flag:
                names.add(node.name)
            else:
                names.discard(node.name)
        index = self.pool_index(node.pool)
        if node.schedulable:
            index.add(node)
        if not node.down:
            index.capacity += node.gpus

    def rebound(self, node: NodeState, workloads: Mapping[str, WorkloadState]) -> None:
        """Recompute ``node``'s contract bound from the runs assigned GPUs there."""
        bound = -math.inf
        for holder in set(node.assigned.values()):
            run = workloads.get(holder)
            if run is not None and run.allocated and run.started_at is not None:
                bound = max(bound, contract_end(run.started_at, run.min_runtime_s))
        was = self.contract_bounds.get(node.name, -math.inf)
        if bound != was:
            ready = self.by_ready.setdefault(node.pool, SortedList())
            ready.discard((was, node.name))
            self.contract_bounds[node.name] = bound
            ready.add((bound, node.name))

    # -- workloads -------------------------------------------------------------------------
    def _queue(self, workload: WorkloadState, pool: str) -> SortedList[QueueKey]:
        by_budget = self.pending.setdefault(pool, {})
        by_kind = by_budget.setdefault(workload.budget, {})
        kind = (workload.allocated, workload.gpus, workload.gang)
        queue = by_kind.get(kind)
        if queue is None:
            queue = by_kind[kind] = SortedList()
        return queue

    def enqueue(self, workload: WorkloadState) -> None:
        """A workload is pending: queued in each of its pools, or held by its array's gate."""
        gate = self._gate(workload)
        if gate is None:
            self._enqueue(workload)
        else:
            gate.add(workload)
            self._balance(gate)

    def dequeue(self, workload: WorkloadState, balance: bool = True) -> None:
        """A workload is pending no more. ``balance`` False: the caller balances its gate once
        it has counted the run this starts (a placement moves no element in)."""
        gate = self._gate(workload)
        if gate is None:
            self._dequeue(workload)
            return
        if gate.remove(workload):
            self._dequeue(workload)
        if balance:
            self._balance(gate)

    def array_run(self, workload: WorkloadState, change: int) -> None:
        """An element of a throttled array started (+1) or stopped (-1) holding GPUs."""
        gate = self._gate(workload)
        if gate is not None:
            gate.running += change
            self._balance(gate)

    def held_by_array(self, workload: WorkloadState) -> bool:
        """Whether ``workload`` is pending but held back by its array's limit."""
        gate = self._gate(workload)
        return gate is not None and gate.is_held(workload)

    def _gate(self, workload: WorkloadState) -> ArrayGate | None:
        return None if workload.array_id is None else self.gates.get(workload.array_id)

    def _balance(self, gate: ArrayGate) -> None:
        enter, leave = gate.balance()
        for workload in leave:
            self._dequeue(workload)
        for workload in enter:
            self._enqueue(workload)

    def _enqueue(self, workload: WorkloadState) -> None:
        for pool in workload.pools:
            self._queue(workload, pool).add(workload.queue_key())
            self._summarise(pool, workload.budget)

    def _dequeue(self, workload: WorkloadState) -> None:
        for pool in workload.pools:
            self._queue(workload, pool).discard(workload.queue_key())
            self._summarise(pool, workload.budget)

    def _summarise(self, pool: str, budget: str) -> None:
        heads = queue_heads(self.pending[pool][budget])
        by_budget = self.heads.setdefault(pool, {})
        if heads is None:
            by_budget.pop(budget, None)
        else:
            by_budget[budget] = heads

    def count_held(self, workload: WorkloadState, sign: int) -> None:
        if workload.allocated and not workload.preempting:
            held = self.held.setdefault(workload.pool or "", {})
            held[workload.budget] = held.get(workload.budget, 0) + sign * workload.gpus

    def _listed(self, changes: list[str], workload_id: str) -> bool:
        """Append to a change list; True when it was full and dropped first (its readers
        then catch up another way)."""
        dropped = len(changes) >= self.VICTIM_CHANGES_KEPT
        if dropped:
            changes.clear()
        changes.append(workload_id)
        return dropped

    def workload_changed(self, workload_id: str) -> None:
        if self._listed(self.workload_changes, workload_id):
            self.workload_changes_dropped += 1

    def victim_changed(self, workload: WorkloadState) -> None:
        pool = workload.pool or ""
        if self._listed(self.victim_changes.setdefault(pool, []), workload.workload_id):
            self.victim_changes_dropped[pool] = self.victim_changes_dropped.get(pool, 0) + 1

    def contract_started(self, workload: WorkloadState, now: float) -> None:
        if workload.allocated and not workload.preempting:
            self.contract_ends.setdefault(workload.pool or "", SortedList()).add(
                (contract_end(now, workload.min_runtime_s), workload.workload_id)
            )

    def unallocated_placed(self, workload: WorkloadState) -> None:
        if not workload.allocated:
            self.unallocated_active.setdefault(workload.pool or "", set()).add(workload.workload_id)

    def forget_victim(self, workload: WorkloadState) -> None:
        pool = workload.pool or ""
        if workload.allocated:
            if workload.started_at is not None and pool in self.contract_ends:
                end = contract_end(workload.started_at, workload.min_runtime_s)
                self.contract_ends[pool].discard((end, workload.workload_id))
        else:
            self.unallocated_active.get(pool, set()).discard(workload.workload_id)
