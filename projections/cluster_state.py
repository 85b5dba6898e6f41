"""Nodes and workloads as a fold over cluster, workload and command events.

The scheduler decides from this state, the simulator drives it, and the read models (next issue)
host it. It keeps two views of each GPU on purpose:

* *assigned*: the scheduler's view. A GPU is released the moment a preempt command is issued for
  its holder, so the same pass (or the next) can hand it to the preemptor: the agent starts the
  new workload only once the victim has exited, so nothing is ever over-committed physically.
* *holders*: what physically runs on a node, until the agent reports the end. A cordoned node is
  drained only when this is empty.
* *foreign*: how many GPUs of a node work Fairshare did not place holds (``NodeForeignGpus``):
  a count off the node's free GPUs, never indices (design 2.8).

Commands are fenced by the issuing leader's lease epoch: a command whose epoch is below the
highest already seen on a command for its cluster and pool comes from a deposed scheduler, and
is refused (``FencedCommandError``, counted in ``fenced_commands``). Commands of a cluster share
one partition, so every reader refuses the same ones. A refused place command also voids the
deposed leader's matching ``WorkloadPlaced`` (on another topic, read before or after it). Why
per pool, see :meth:`ClusterState._fence`.

**Facts and indexes.** ``ClusterState`` holds what the events said: the nodes, the workloads,
the fencing marks. Everything the scheduler looks up by pool, kind or deadline (pending queues,
free-GPU buckets, active runs, contract ends, held GPUs, change marks) is derived from those
facts and lives apart, in :class:`ClusterIndexes` (``ClusterState.indexes``): the fold keeps it
up to date as it goes, because rebuilding it from the facts every pass would cost as much as the
pass. A fresh fold of the same events builds the same indexes; none is ever replayed. What the
scheduler remembers between its passes is no part of either (``scheduling/memos.py``).

Fields are plain slotted dataclasses rather than pydantic models: the simulator folds millions
of these transitions, and the events at the boundary are already validated.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Any

from sortedcontainers import SortedList

from events.models import (
    EventData,
    NodeCordoned,
    NodeDown,
    NodeDrained,
    NodeForeignGpus,
    NodeRegistered,
    NodeUncordoned,
    NodeUp,
    PlaceCommand,
    Placement,
    PreemptCommand,
    WorkloadArraySubmitted,
    WorkloadCancelled,
    WorkloadFinished,
    WorkloadLost,
    WorkloadPlaced,
    WorkloadPreempted,
    WorkloadRequeued,
    WorkloadStarted,
    WorkloadSubmitted,
)
from events.models.arrays import elements
from events.models.heartbeats import GpuHeartbeat
from events.models.liveness import NodeAlive
from projections.array_gates import ArrayGate
from projections.cluster_indexes import ClusterIndexes, PoolIndex
from projections.cluster_types import (
    ACTIVE,
    TERMINAL,
    ArrayState,
    NodeState,
    PlacementSpec,
    QueueKey,
    QueueKind,
    Status,
    WorkloadState,
)
from projections.errors import FoldError, MissingFact


class ClusterStateError(FoldError):
    """A fact about nodes or workloads that the cluster cannot accept."""


class MissingClusterFactError(ClusterStateError, MissingFact):
    """A node or workload not registered or submitted yet, or GPUs still held by a run whose
    release (a preemption, an end, on another topic) has not been read yet."""


class FencedCommandError(ClusterStateError):
    """A command of a deposed leader (an epoch below one already seen for its cluster).

    Raised rather than silently ignored so that a composition of folds (``LiveState``) does not
    record the command as issued either: an agent looks up preempt commands there, and a later
    leader may issue a command with the same derived id that must not count as a repeat.
    """


#: How many of a submitter's last runtimes start estimates average (Tsafrir, Etsion and
#: Feitelson, "Backfilling using system-generated predictions rather than user runtime
#: estimates", IEEE TPDS 2007: the mean of a user's last two jobs predicts better than the
#: limits users declare).
RECENT_RUNTIMES = 2
#: How many of a pool's last runtimes (any submitter) stand in for a submitter with none yet.
RECENT_POOL_RUNTIMES = 20


class ClusterState:
    """Nodes, workloads and the fencing marks; ``apply`` folds one event in, keeping
    ``indexes`` (derived data) up to date as it goes."""

    def __init__(self) -> None:
        # -- facts -----------------------------------------------------------------------
        self.nodes: dict[str, NodeState] = {}
        self.workloads: dict[str, WorkloadState] = {}
        #: Job arrays by id (their elements are in ``workloads``).
        self.arrays: dict[str, ArrayState] = {}
        #: The highest lease epoch seen on a command, per (cluster, pool): the fencing mark.
        self.command_epochs: dict[tuple[str, str], int] = {}
        #: Commands refused as a deposed leader's.
        self.fenced_commands = 0
        #: Placements of refused place commands, by command id: the deposed leader's matching
        #: ``WorkloadPlaced`` places nothing (unless a leader's place command with that id is
        #: admitted later, which clears the entry).
        self.fenced_places: dict[str, PlacementSpec] = {}
        #: Events folded so far: a reader's cheap test that nothing changed.
        self.version = 0
        # -- derived -----------------------------------------------------------------------
        self.indexes = ClusterIndexes()

    # The indexes that readers outside the scheduler (the read models, the API, the
    # simulator) know by these names: the very objects in ``indexes``, not copies.
    @property
    def pools(self) -> dict[str, PoolIndex]:
        return self.indexes.pools

    @property
    def pending(self) -> dict[str, dict[str, dict[QueueKind, SortedList[QueueKey]]]]:
        return self.indexes.pending

    @property
    def active(self) -> dict[str, set[str]]:
        return self.indexes.active

    @property
    def awaiting_requeue(self) -> set[str]:
        return self.indexes.awaiting_requeue

    # -- the fold --------------------------------------------------------------------------
    def apply(self, data: EventData, at: float) -> None:
        """Fold one fact in at ``at`` (epoch seconds, like every fold)."""
        self.version += 1
        handler = _HANDLERS.get(type(data))
        if handler is not None:
            workload_id = getattr(data, "workload_id", None)
            if workload_id is not None:  # listed first: a handler that refuses may have begun
                self.indexes.workload_changed(workload_id)
            handler(self, data, float(at))

    # -- nodes -----------------------------------------------------------------------------
    def _set_assigned(self, node: NodeState, changes: Mapping[int, str | None]) -> None:
        indexes = self.indexes
        indexes.layout_changed(node.pool)
        listed = node.schedulable
        if listed:
            indexes.pool_index(node.pool).remove(node, node.free)
        for gpu, holder in changes.items():
            if holder is None:
                node.assigned.pop(gpu, None)
            else:
                if gpu in node.assigned and node.assigned[gpu] != holder:
                    raise MissingClusterFactError(
                        f"placement: GPU {gpu} of {node.name} is already assigned to "
                        f"{node.assigned[gpu]}"
                    )
                node.assigned[gpu] = holder
        if listed:
            indexes.pool_index(node.pool).add(node)
        indexes.rebound(node, self.workloads)

    def _set_schedulable(self, node: NodeState, cordoned: bool, down: bool) -> None:
        self.indexes.availability_changing(node)
        node.cordoned, node.down = cordoned, down
        self.indexes.availability_changed(node)

    def _on_node_registered(self, e: NodeRegistered, now: float) -> None:
        existing = self.nodes.get(e.node)
        if existing is not None:
            if (existing.pool, existing.gpus) != (e.pool, e.gpus):
                raise ClusterStateError(
                    f"node: {e.node} re-registered with another pool or GPU count"
                )
            if (existing.block, existing.rack) != (e.block, e.rack):
                # Recabled, or its agent learnt its topology: the latest registration says.
                existing.block, existing.rack = e.block, e.rack
                self.indexes.topology_changed(existing)
            self._set_schedulable(existing, existing.cordoned, False)
            return
        node = NodeState(
            e.node,
            e.cluster,
            e.pool,
            e.gpus,
            e.gpu_type,
            last_heartbeat=now,
            executor=e.executor,
            block=e.block,
            rack=e.rack,
        )
        self.nodes[e.node] = node
        self.indexes.node_registered(node)

    def _node(self, name: str) -> NodeState:
        node = self.nodes.get(name)
        if node is None:
            raise MissingClusterFactError(f"node: unknown node {name!r}")
        return node

    def _on_cordoned(self, e: NodeCordoned, now: float) -> None:
        node = self._node(e.node)
        node.drained = False
        node.cordon_reason, node.cordoned_by, node.cordoned_at = e.reason, e.cordoned_by, now
        self._set_schedulable(node, True, node.down)

    def _on_uncordoned(self, e: NodeUncordoned, now: float) -> None:
        node = self._node(e.node)
        node.drained = False
        node.cordon_reason, node.cordoned_by, node.cordoned_at = "", None, None
        self._set_schedulable(node, False, node.down)

    def _on_foreign(self, e: NodeForeignGpus, now: float) -> None:
        """GPUs of the node held by work Fairshare did not place: they come off its free GPUs
        (every pass, baseline, start estimate and why-pending reads ``free``). A hold that
        came onto GPUs Fairshare had already assigned breaks nothing: those placements stand
        (the agent starts a run only once its GPUs are physically free), and only later
        placements find less room (``NodeState.room`` below 0 until it clears)."""
        node = self._node(e.node)
        held = min(e.gpus, node.gpus)
        if (held, e.holders) == (node.foreign, node.foreign_holders):
            return
        indexes = self.indexes
        indexes.layout_changed(node.pool)
        listed = node.schedulable
        if listed:
            indexes.pool_index(node.pool).remove(node, node.free)
        if not held:
            node.foreign_since = None
        elif not node.foreign:
            node.foreign_since = now
        node.foreign, node.foreign_holders = held, e.holders
        node.foreign_changes += 1
        if listed:
            indexes.pool_index(node.pool).add(node)

    def _on_drained(self, e: NodeDrained, now: float) -> None:
        self._node(e.node).drained = True

    def _on_down(self, e: NodeDown, now: float) -> None:
        node = self._node(e.node)
        if e.last_heartbeat is not None:
            node.last_heartbeat = e.last_heartbeat.timestamp()
        self._set_schedulable(node, node.cordoned, True)

    def _on_up(self, e: NodeUp, now: float) -> None:
        node = self._node(e.node)
        node.last_heartbeat = now
        self._set_schedulable(node, node.cordoned, False)

    def _on_seen(self, e: GpuHeartbeat | NodeAlive, now: float) -> None:
        """A node heard from: the liveness signal every 10 s, or a durable heartbeat (every
        few minutes now; every 10 s in older logs). Either moves its last-seen time and its
        runs', so down detection and a lost run's end are as fine as the liveness cadence,
        whichever of the two a log holds."""
        node = self.nodes.get(e.node)
        if node is not None:
            node.last_heartbeat = max(node.last_heartbeat or now, now)
            for holder in node.holders:
                workload = self.workloads.get(holder)
                if workload is not None:
                    workload.last_heartbeat = now

    # -- workloads -------------------------------------------------------------------------
    def _on_submitted(self, e: WorkloadSubmitted, now: float) -> None:
        if e.workload_id in self.workloads:
            return  # idempotent submit: the client's id was seen already
        self._add_workload(e, now, dict[str, object](e.spec))

    def _on_array_submitted(self, e: WorkloadArraySubmitted, now: float) -> None:
        """Each element, a workload; one the log already holds under the same id stays as it
        was (the API refuses both orders of such a clash; two writers racing past it meet the
        first fact read)."""
        if e.array_id in self.arrays:
            return  # idempotent submit: the client's id was seen already
        array = self.arrays[e.array_id] = ArrayState(e, now)
        if e.max_running is not None:
            self.indexes.gates[e.array_id] = ArrayGate(e.max_running)
        spec = dict[str, object](e.spec)  # one for every element: they only read it
        for index, element in elements(e):
            if element.workload_id not in self.workloads:
                self._add_workload(element, now, spec, e.array_id, index)
                array.elements.append(element.workload_id)
        array.remaining = len(array.elements)

    def _add_workload(
        self,
        e: WorkloadSubmitted,
        now: float,
        spec: dict[str, object],
        array_id: str | None = None,
        index: int | None = None,
    ) -> None:
        workload = WorkloadState(
            workload_id=e.workload_id,
            budget=e.budget,
            pools=tuple(e.pools),
            gpus=e.gpus,
            gang=e.gang,
            min_runtime_s=e.min_runtime_s,
            resumable=e.resumable,
            priority=e.priority,
            submitter=e.submitter,
            spec=spec,
            submitted_at=now,
            time_limit_s=e.time_limit_s,
            array_id=array_id,
            array_index=index,
        )
        self.workloads[e.workload_id] = workload
        self.indexes.enqueue(workload)

    def _workload(self, workload_id: str) -> WorkloadState:
        workload = self.workloads.get(workload_id)
        if workload is None:
            raise MissingClusterFactError(f"workload_id: unknown workload {workload_id!r}")
        return workload

    def _on_cancelled(self, e: WorkloadCancelled, now: float) -> None:
        workload = self._workload(e.workload_id)
        if workload.status == "pending":
            self.indexes.dequeue(workload)
            workload.status = "cancelled"
            workload.ended_at = now
        elif workload.status in ACTIVE:
            workload.cancel_requested = True
            self.indexes.cancelling.add(workload.workload_id)
        elif workload.status in ("preempted", "lost"):
            # Stopped and waiting to be requeued: the cancel ends it here.
            self.indexes.awaiting_requeue.discard(workload.workload_id)
            workload.status = "cancelled"

    def _check_free(self, workload: WorkloadState, placement: PlacementSpec) -> None:
        for node_name, gpus in placement:
            node = self._node(node_name)
            if node.pool not in workload.pools:
                raise ClusterStateError(
                    f"placement: node {node_name} is in pool {node.pool}, not one of "
                    f"{', '.join(workload.pools)}"
                )
            for gpu in gpus:
                if not 0 <= gpu < node.gpus:
                    raise ClusterStateError(f"placement: {node_name} has no GPU {gpu}")
                holder = node.assigned.get(gpu)
                if holder is not None and holder != workload.workload_id:
                    raise MissingClusterFactError(
                        f"placement: GPU {gpu} of {node_name} is already assigned to {holder}"
                    )

    def _hold(self, workload: WorkloadState, placement: PlacementSpec) -> None:
        for node_name, gpus in placement:
            node = self._node(node_name)
            self._set_assigned(node, dict.fromkeys(gpus, workload.workload_id))
            node.holders[workload.workload_id] = gpus
            node.drained = False
        self.indexes.active.setdefault(workload.pool or "", set()).add(workload.workload_id)
        self.indexes.count_held(workload, +1)
        self.indexes.victim_changed(workload)
        self.indexes.array_run(workload, +1)

    def _release_assignment(self, workload: WorkloadState) -> None:
        for node_name, gpus in workload.placement:
            node = self.nodes.get(node_name)
            if node is None:
                continue
            mine = {g: None for g in gpus if node.assigned.get(g) == workload.workload_id}
            if mine:
                self._set_assigned(node, mine)

    def _release_physical(self, workload: WorkloadState) -> None:
        self._release_assignment(workload)
        for node_name, _gpus in workload.placement:
            node = self.nodes.get(node_name)
            if node is not None:
                node.holders.pop(workload.workload_id, None)
        active = self.indexes.active.get(workload.pool or "", set())
        if workload.workload_id in active:
            active.discard(workload.workload_id)
            self.indexes.count_held(workload, -1)
            self.indexes.victim_changed(workload)
            self.indexes.array_run(workload, -1)

    def _on_placed(self, e: WorkloadPlaced, now: float) -> None:
        workload = self._workload(e.workload_id)
        if workload.status != "pending" or e.attempt != workload.attempt:
            return  # a duplicate, or a stale placement of an earlier attempt
        placement = _spec(e.placement)
        if self.fenced_places.get(e.command_id) == placement:
            # The deposed leader's placement: waits (and expires) unless a leader's place
            # command with this id is admitted, which stands for the same decision.
            raise MissingClusterFactError(
                f"command_id: {e.command_id} was issued by a deposed leader; its placement "
                "applies only if a current leader issues it"
            )
        self._check_free(workload, placement)  # refuse before changing anything
        self.indexes.dequeue(workload, balance=False)  # _hold counts the run, then balances
        workload.status = "placed"
        workload.pool = e.pool
        workload.placement = placement
        workload.placed_at = now
        workload.preempting = False
        self._hold(workload, placement)
        self.indexes.unallocated_placed(workload)

    def _fence(self, e: PlaceCommand | PreemptCommand) -> None:
        """Raise the (cluster, pool) epoch mark, or refuse (and count) a deposed leader's
        command.

        The mark is per pool because a scheduler may lead by a lease per pool
        (``services/scheduler/lease.py``): each pool's epochs are its own, and a command of
        pool A must not be refused for a higher epoch seen in pool B. Commands carry no word of
        which lease they came from, and need none: under the whole-cluster lease the same key
        loses nothing that matters. What the fence guards against is a deposed leader's command
        acting against what its successor decided without seeing it, and every such conflict
        lies within one pool: a placement takes GPUs of the pool's nodes and names that pool,
        a preemption names the pool its run is in, and the successor's decisions about those
        GPUs and runs are commands of the same pool, so the deposed one's is refused once the
        successor has issued one there (as per cluster, the fence never covered the time before
        the successor's first command). The one decision that can name two pools, placing a
        pending workload that lists both, cannot act twice: the fold places a workload only
        while it is pending (``_on_placed``), agents run only what the fold placed, and the
        leader fences itself ``margin_s`` before a standby may claim. A pool's own lease and
        the whole-cluster lease never reuse an epoch for a pool (a claim of either goes above
        both), so the mark only rises across a change of mode."""
        key = (e.cluster, e.pool)
        highest = self.command_epochs.get(key, 0)
        if e.epoch >= highest:
            self.command_epochs[key] = e.epoch
            return
        self.fenced_commands += 1
        if isinstance(e, PlaceCommand):
            placement = _spec(e.placement)
            self.fenced_places[e.command_id] = placement
            self._void_placement(e.workload_id, e.attempt, placement)
        raise FencedCommandError(
            f"epoch: {e.epoch} is below {highest}, already seen on a command for cluster "
            f"{e.cluster} pool {e.pool}: {e.command_id} comes from a deposed leader and is "
            "ignored"
        )

    def _void_placement(self, workload_id: str, attempt: int, placement: PlacementSpec) -> None:
        """Undo a placement folded from the deposed leader's ``WorkloadPlaced`` read before its
        refused command: back to pending, as every reader that read the command first has it.
        A run already started stands (its agent acted before any fence could be known)."""
        workload = self.workloads.get(workload_id)
        if (
            workload is None
            or workload.status != "placed"
            or workload.attempt != attempt
            or workload.placement != placement
            or workload.admitted_place_attempt == attempt
        ):
            return
        self.indexes.forget_victim(workload)
        self._release_physical(workload)
        workload.status = "pending"
        workload.pool = None
        workload.placement = ()
        workload.placed_at = None
        workload.preempting = False
        self.indexes.enqueue(workload)

    def _on_place_command(self, e: PlaceCommand, now: float) -> None:
        self._fence(e)
        self.fenced_places.pop(e.command_id, None)
        workload = self.workloads.get(e.workload_id)
        if workload is not None and workload.attempt == e.attempt:
            workload.admitted_place_attempt = e.attempt
        # the matching WorkloadPlaced carries the state change

    def _on_preempt_command(self, e: PreemptCommand, now: float) -> None:
        self._fence(e)
        workload = self.workloads.get(e.workload_id)
        if workload is None or workload.attempt != e.attempt or workload.status not in ACTIVE:
            return
        if not workload.preempting:
            self.indexes.forget_victim(workload)
            self.indexes.count_held(workload, -1)
            workload.preempting = True
            if e.decision.reason != "cancel":
                workload.preemptions += 1
            self._release_assignment(workload)
            self.indexes.victim_changed(workload)

    def _placed_first(self, workload: WorkloadState, attempt: int) -> None:
        """A run's start or end read while its placement is still held (the placement waits
        for a node or GPUs on another partition): dropped here, the placement would later
        apply and hold its GPUs for ever. It waits for the placement instead."""
        if workload.attempt == attempt and workload.status == "pending":
            raise MissingClusterFactError(
                f"attempt: the placement of {workload.workload_id} attempt {attempt} is not "
                "folded yet"
            )

    def _on_started(self, e: WorkloadStarted, now: float) -> None:
        workload = self._workload(e.workload_id)
        self._placed_first(workload, e.attempt)
        if workload.attempt != e.attempt or workload.status != "placed":
            return
        workload.status = "running"
        workload.started_at = now
        workload.last_heartbeat = now
        self.indexes.contract_started(workload, now)
        for node_name, _gpus in workload.placement:
            node = self.nodes.get(node_name)
            if node is not None:
                self.indexes.rebound(node, self.workloads)
        self.indexes.victim_changed(workload)

    def _end(self, workload: WorkloadState, status: Status, at: float) -> None:
        if not workload.preempting:
            self.indexes.forget_victim(workload)
        self._release_physical(workload)
        workload.status = status
        workload.ended_at = at
        workload.preempting = False
        self.indexes.cancelling.discard(workload.workload_id)
        if status in ("preempted", "lost") and workload.resumable:
            if workload.cancel_requested:
                workload.status = "cancelled"
            else:
                self.indexes.awaiting_requeue.add(workload.workload_id)

    def _on_finished(self, e: WorkloadFinished, now: float) -> None:
        workload = self._workload(e.workload_id)
        self._placed_first(workload, e.attempt)
        if workload.attempt == e.attempt and workload.status in ACTIVE:
            if workload.started_at is not None:
                self._note_runtime(workload.submitter, workload.pool, now - workload.started_at)
            self._end(workload, e.outcome, now)
            workload.exit_code, workload.end_message = e.exit_code, e.message

    @property
    def recent_runtimes(self) -> dict[str, tuple[float, ...]]:
        """Per submitter, how long their last runs that finished by themselves lasted (the
        last :data:`RECENT_RUNTIMES`): what start estimates expect their next runs to last.
        Made on first use, so that a state restored from an older checkpoint has one."""
        found = self.__dict__.get("_recent_runtimes")
        if found is None:
            found = self.__dict__["_recent_runtimes"] = {}
        return found

    @property
    def recent_pool_runtimes(self) -> dict[str, tuple[float, ...]]:
        """Per pool, how long its last runs that finished by themselves lasted, whoever
        submitted them (the last :data:`RECENT_POOL_RUNTIMES`): what a start estimate expects
        of a submitter with no history of their own (a fresh system is not a day out because
        nobody has finished a run yet). Made on first use, as :attr:`recent_runtimes`."""
        found = self.__dict__.get("_recent_pool_runtimes")
        if found is None:
            found = self.__dict__["_recent_pool_runtimes"] = {}
        return found

    def _note_runtime(self, submitter: str, pool: str | None, seconds: float) -> None:
        kept = self.recent_runtimes.get(submitter, ())
        self.recent_runtimes[submitter] = (*kept, max(0.0, seconds))[-RECENT_RUNTIMES:]
        if pool is not None:
            by_pool = self.recent_pool_runtimes.get(pool, ())
            self.recent_pool_runtimes[pool] = (*by_pool, max(0.0, seconds))[-RECENT_POOL_RUNTIMES:]

    def _on_preempted(self, e: WorkloadPreempted, now: float) -> None:
        workload = self._workload(e.workload_id)
        self._placed_first(workload, e.attempt)
        if workload.attempt == e.attempt and workload.status in ACTIVE:
            self._end(workload, "cancelled" if workload.cancel_requested else "preempted", now)

    def _on_lost(self, e: WorkloadLost, now: float) -> None:
        workload = self._workload(e.workload_id)
        self._placed_first(workload, e.attempt)
        if workload.attempt == e.attempt and workload.status in ACTIVE:
            self._end(workload, "lost", e.last_heartbeat.timestamp())

    def _on_requeued(self, e: WorkloadRequeued, now: float) -> None:
        workload = self._workload(e.workload_id)
        if workload.attempt != e.attempt or workload.status not in ("preempted", "lost"):
            return
        self.indexes.awaiting_requeue.discard(workload.workload_id)
        workload.status = "pending"
        workload.attempt += 1
        workload.pool = None
        workload.placement = ()
        workload.placed_at = workload.started_at = workload.ended_at = None
        workload.exit_code, workload.end_message = None, ""
        workload.preempting = False
        self.indexes.enqueue(workload)

    def forget_ended_before(self, horizon: float) -> list[str]:
        """Drop the workloads that ended for good (succeeded, failed, cancelled; or stopped
        and not to be requeued) before ``horizon``, and say which: no pass, queue or window
        figure reads them any more, and they stay in the log and the read models."""
        gone = [
            workload.workload_id
            for workload in self.workloads.values()
            if workload.ended_at is not None
            and workload.ended_at < horizon
            and (
                workload.status in TERMINAL
                or (
                    workload.status in ("preempted", "lost")
                    and workload.workload_id not in self.indexes.awaiting_requeue
                )
            )
        ]
        self.indexes.workloads_forgotten += len(gone)
        for workload_id in gone:
            array_id = self.workloads.pop(workload_id).array_id
            self.indexes.cancelling.discard(workload_id)
            if array_id is not None:
                self._forget_element(array_id)
        return gone

    def _forget_element(self, array_id: str) -> None:
        """An element left memory: the array goes with its last one (the read models keep it)."""
        array = self.arrays.get(array_id)
        if array is not None:
            array.remaining -= 1
            if array.remaining <= 0:
                del self.arrays[array_id]
                self.indexes.gates.pop(array_id, None)

    # -- queries ---------------------------------------------------------------------------
    def active_in(self, pool: str) -> Iterator[WorkloadState]:
        for workload_id in sorted(self.indexes.active.get(pool, ())):
            yield self.workloads[workload_id]

    def preemptible(self, pool: str, now: float) -> list[str]:
        """Active work of ``pool`` that may be a victim by contract: unallocated work, and
        allocated work whose contract is over (its budget's rank decides the rest)."""
        found = set(self.indexes.unallocated_active.get(pool, ()))
        ends = self.indexes.contract_ends.get(pool)
        if ends:
            found.update(wid for _end, wid in ends.irange(maximum=(now, "\U0010ffff")))
        return sorted(found)

    def preemption_signature(self, pool: str, now: float) -> tuple[int, tuple[float, str] | None]:
        """Changes whenever the set of possible victims or the free GPUs of ``pool`` may have
        changed: any assignment change, or another contract ending by ``now``."""
        last = None
        ends = self.indexes.contract_ends.get(pool)
        if ends:
            position = ends.bisect_right((now, "\U0010ffff"))
            if position:
                last = ends[position - 1]
        return (self.indexes.layout_version.get(pool, 0), last)

    def capacity(self, pool: str) -> int:
        index = self.indexes.pools.get(pool)
        return 0 if index is None else index.capacity


def _spec(placement: Placement) -> PlacementSpec:
    return tuple((part.node, tuple(part.gpus)) for part in placement.nodes)


_Handler = Callable[[ClusterState, Any, float], None]
_HANDLERS: dict[type[EventData], _Handler] = {
    NodeRegistered: ClusterState._on_node_registered,
    NodeCordoned: ClusterState._on_cordoned,
    NodeUncordoned: ClusterState._on_uncordoned,
    NodeDrained: ClusterState._on_drained,
    NodeDown: ClusterState._on_down,
    NodeUp: ClusterState._on_up,
    NodeForeignGpus: ClusterState._on_foreign,
    GpuHeartbeat: ClusterState._on_seen,
    NodeAlive: ClusterState._on_seen,
    WorkloadSubmitted: ClusterState._on_submitted,
    WorkloadArraySubmitted: ClusterState._on_array_submitted,
    WorkloadCancelled: ClusterState._on_cancelled,
    WorkloadPlaced: ClusterState._on_placed,
    PlaceCommand: ClusterState._on_place_command,
    PreemptCommand: ClusterState._on_preempt_command,
    WorkloadStarted: ClusterState._on_started,
    WorkloadFinished: ClusterState._on_finished,
    WorkloadPreempted: ClusterState._on_preempted,
    WorkloadLost: ClusterState._on_lost,
    WorkloadRequeued: ClusterState._on_requeued,
}
