"""The generic cluster agent: one reconcile loop that drives any :class:`ClusterAdapter`.

The agent keeps a :class:`~projections.live_state.LiveState` folded from the log and acts only
on workloads placed on its own nodes. Each :meth:`ClusterAgent.step` compares what the log says
with what the adapter runs, and closes the gap:

* a workload ``placed`` on its nodes, whose GPUs nobody else holds any more: start it, publish
  ``WorkloadStarted``;
* a run with a preempt command for its current attempt (a cancel arrives the same way): stop
  it (SIGTERM, kill after the command's grace) and, once it has stopped, publish
  ``WorkloadPreempted`` with how long it ran; a workload preempted before it started is
  reported preempted with ``ran_s=0`` without being started;
* a run that ended by itself: ``WorkloadFinished`` (``succeeded`` on exit code 0);
* a run that reached its time limit (its place command's ``time_limit_s``, from its start):
  stopped like a preempted one (SIGTERM, kill after :data:`TIME_LIMIT_GRACE_S`), and reported
  ``WorkloadFinished`` ``failed`` with the message "time limit" (it is over, not requeued:
  Slurm's TIMEOUT);
* a run the log says is running but that this incarnation did not start (a restart): the
  adapter adopts it, or the agent reports it ``WorkloadLost`` at its last heartbeat;
* a run the log no longer has active (lost, or ended by someone else): stop it;
* every ``heartbeat_s`` (10 s): one ``NodeAlive`` per reachable node, with each GPU's reading
  and occupant, on the liveness topic (kept for days: the scheduler's down detection, a lost
  run's last-seen time, the readings the API shows);
* every ``confirm_s`` (5 min), at a node's first round and at once when its occupants change:
  one ``GpuHeartbeat`` of the same readings on the heartbeats topic, kept forever: the ledger's
  confirmation that a run still holds its GPUs (docs/design.md, "What the log keeps").

Facts carry deterministic ids (``derived_event_id("agent", kind, workload, attempt)``), and the
agent remembers what it published until it reads it back, so the loop never publishes a fact
twice while it is in flight, and a re-publish after a crash carries the same id (consumers
dedupe by id). Commands are handled idempotently: the fold ignores a repeated place or a
preempt of another attempt, and the agent acts on the folded state only.

Commands are fenced there too: one whose lease epoch is below the highest the agent has already
seen on a command for its cluster and pool comes from a deposed scheduler (one that stalled past
its lease and woke up after a takeover), and the fold refuses it, so it stops and starts nothing
(``fenced_commands`` counts them). The mark is per pool because schedulers may lead by a lease
per pool (``ClusterState._fence`` says why the whole-cluster lease loses nothing by it).
"""

from __future__ import annotations

import logging
import math
import time
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from events.arrays import parse_indices
from events.envelope import Envelope, derived_event_id, new_event
from events.models import (
    EventData,
    GpuHeartbeat,
    GpuReading,
    NodeAlive,
    NodeGpus,
    NodeRegistered,
    PlaceCommand,
    Placement,
    PreemptCommand,
    WorkloadFinished,
    WorkloadLost,
    WorkloadPreempted,
    WorkloadStarted,
)
from events.times import utc_from_epoch as _utc
from events.topics import TopicKind
from projections.cluster_types import ACTIVE, WorkloadState
from projections.live_state import LiveState
from services.agents.adapter import ArrayTask, ClusterAdapter, NodeSpec, RunEnded, RunRequest
from services.agents.cadence import DEFAULT_CONFIRM_S, Confirmed, confirmation_due, occupancy
from services.bus.port import EventPublisher, EventSubscriber, PublishError
from services.metrics.trust import watch_refusals

log = logging.getLogger(__name__)

#: Seconds from SIGTERM to kill for a run stopped at its time limit (the scheduler's default
#: grace period).
TIME_LIMIT_GRACE_S = 30.0
#: What a run stopped at its time limit is reported finished with.
TIME_LIMIT_MESSAGE = "time limit"

#: What the running agent follows, in the order an in-memory poll (and the catch-up merge, for
#: events of one instant) reads them: the keys that vouch for a fact before it, a node before
#: work is placed on it, and a preempt command that frees GPUs before the placement that takes
#: them. The budgets (the tree and which namespaces may charge what) and the usage (the queue's
#: order) are for native work: an agent that takes its cluster's users' own Jobs checks their
#: budgets, and tells them why they wait (``services.agents.kubernetes.native_door``).
AGENT_TOPICS: tuple[TopicKind, ...] = (
    TopicKind.KEYS,
    TopicKind.BUDGETS,
    TopicKind.CLUSTER,
    TopicKind.COMMANDS,
    TopicKind.WORKLOADS,
    TopicKind.USAGE,
)
#: What it reads once on start: the above, plus heartbeats and liveness signals (for the last
#: time a run it cannot recover was seen).
CATCH_UP_TOPICS: tuple[TopicKind, ...] = (
    *AGENT_TOPICS,
    TopicKind.HEARTBEATS,
    TopicKind.LIVENESS,
)


def fact_id(kind: str, workload_id: str, attempt: int) -> str:
    """The deterministic id of a fact the agent publishes about one run."""
    return derived_event_id("agent", kind, workload_id, str(attempt))


@dataclass(frozen=True)
class AgentSettings:
    """What every agent is told, whichever cluster it drives (``fairshare agent``'s shared
    options; each family's own options go to its adapter)."""

    #: The cluster's name, and the pool of its nodes that name none themselves.
    cluster: str
    pool: str
    #: Seconds between liveness signals per node (the scheduler's down detection).
    heartbeat_s: float = 10.0
    #: Seconds between the durable heartbeats that confirm occupancy for charging.
    confirm_s: float = DEFAULT_CONFIRM_S
    #: The grace period (SIGTERM to kill) of a run stopped because the log no longer has it
    #: active (lost, or ended by someone else).
    orphan_grace_s: float = 5.0
    #: Over a shared cluster (Slurm, Kubernetes): seconds before work of this cluster whose
    #: run the log no longer has active is removed.
    stray_grace_s: float = 10.0
    #: The facts' source (default ``fairshare/agent/<cluster>``).
    source: str | None = None

    def check(self) -> None:
        if self.heartbeat_s <= 0:
            raise ValueError("heartbeat_s: must be positive")
        if self.confirm_s <= 0:
            raise ValueError("confirm_s: must be positive")


@dataclass
class Run:
    """A run this agent incarnation knows about (started or adopted)."""

    request: RunRequest
    adopted: bool = False
    stop_command: PreemptCommand | None = None
    ended: RunEnded | None = None
    ended_at: float | None = None
    #: When its time limit runs out (None: no limit), and whether it was stopped there.
    deadline: float | None = None
    timed_out: bool = False

    @property
    def key(self) -> tuple[str, int]:
        return (self.request.workload_id, self.request.attempt)


class ClusterAgent:
    """Drives one cluster's adapter from the log. Not thread-safe: one loop calls it."""

    def __init__(
        self,
        adapter: ClusterAdapter,
        publisher: EventPublisher,
        settings: AgentSettings,
        *,
        clock: Callable[[], float] = time.time,
    ) -> None:
        settings.check()
        self.adapter = adapter
        self.publisher = publisher
        self.settings = settings
        self.cluster = settings.cluster
        self.pool = settings.pool
        self.heartbeat_s = settings.heartbeat_s
        self.confirm_s = settings.confirm_s
        self.clock = clock
        self.source = settings.source or f"fairshare/agent/{settings.cluster}"
        self.orphan_grace_s = settings.orphan_grace_s
        self.node_specs: dict[str, NodeSpec] = {spec.name: spec for spec in adapter.nodes()}
        if len(self.node_specs) != len(adapter.nodes()):
            raise ValueError("adapter.nodes(): node names must be distinct")
        self.state = LiveState()
        watch_refusals("agent", lambda: self.state.trust.refused)
        #: How many events the last catch-up read (all of the log, or a checkpoint's tail).
        self.caught_up_events = 0
        #: Runs of this incarnation, by workload id (one attempt at a time).
        self.runs: dict[str, Run] = {}
        #: Ids published and not yet read back: never published twice while in flight.
        self.in_flight: set[str] = set()
        #: Facts published, by kind (started, finished, preempted, lost, registered, heartbeat,
        #: alive).
        self.published: Counter[str] = Counter()
        self._orphans: dict[tuple[str, int], Run] = {}
        self._batch: list[str] = []
        self._sequence: dict[str, int] = {}
        #: Per node, when its last durable heartbeat went out and the occupancy it stated.
        self._confirmed: dict[str, Confirmed] = {}
        self._next_heartbeat = -math.inf
        self._warned: set[str] = set()
        self.started = False

    @property
    def fenced_commands(self) -> int:
        """Commands of deposed schedulers that this agent ignored."""
        return self.state.cluster.fenced_commands

    # -- reading the log -------------------------------------------------------------------
    def observe(self, envelope: Envelope[Any]) -> None:
        """Fold one event of the log in (duplicates are ignored)."""
        self.in_flight.discard(envelope.id)
        if isinstance(envelope.data, GpuHeartbeat | NodeAlive):
            # They only move "last seen" times: fold them without remembering their ids (they
            # are most of the log, and a repeated one changes nothing), once believed.
            verdict = self.state.trust.judge(envelope, self.state)
            if verdict is None:
                self.state.cluster.apply(envelope.data, float(envelope.epoch_seconds))
            else:
                self.state.trust.refuse(envelope, verdict)
            return
        self.state.apply(envelope)

    def catch_up(self, history: Iterable[Envelope[Any]]) -> int:
        """Fold the log up to its end, before acting on anything."""
        count = 0
        for envelope in history:
            self.observe(envelope)
            count += 1
        log.info("caught up with the log", extra={"cluster": self.cluster, "events": count})
        self.caught_up_events = count
        return count

    def pump(self, subscriber: EventSubscriber, poll_s: float = 0.2) -> int:
        """One poll of the subscriber, folded in; returns how many events came."""
        deliveries = subscriber.poll(timeout_s=poll_s)
        for delivery in deliveries:
            self.observe(delivery.envelope)
        return len(deliveries)

    # -- the loop --------------------------------------------------------------------------
    def start(self) -> None:
        """Register the adapter's nodes the log does not have yet, or has in another block or
        rack than the cluster now says (call once caught up)."""
        now = self.clock()
        for name, spec in sorted(self.node_specs.items()):
            pool = spec.pool or self.pool
            existing = self.state.cluster.nodes.get(name)
            was: tuple[str, ...] = ()
            if existing is not None:
                if (existing.pool, existing.gpus) != (pool, spec.gpus):
                    log.error(
                        "node already registered with another pool or GPU count; not changed",
                        extra={
                            "node": name,
                            "logged": f"{existing.pool}/{existing.gpus}",
                            "configured": f"{pool}/{spec.gpus}",
                        },
                    )
                    continue
                if (existing.block, existing.rack) == (spec.block, spec.rack):
                    continue
                was = (existing.block, existing.rack)  # moved: registered again, where it is
            data = NodeRegistered(
                node=name,
                cluster=self.cluster,
                pool=pool,
                gpus=spec.gpus,
                gpu_type=spec.gpu_type,
                executor=spec.executor,
                block=spec.block,
                rack=spec.rack,
            )
            # The topology is part of the id only when stated (the ids of nodes without one stay
            # what they were), and where a moved node was too: a move back is a new fact.
            where = (spec.block, spec.rack, *was) if spec.block or spec.rack or was else ()
            event_id = derived_event_id(
                "agent", "registered", self.cluster, name, pool, str(spec.gpus), spec.gpu_type,
                *where,
            )  # fmt: skip
            self._publish("registered", data, now, event_id)
        self._flush()
        self.started = True

    def step(self) -> None:
        """One reconcile round: ends, orphans, starts and stops, heartbeats; then flush."""
        now = self.clock()
        for ended in self.adapter.poll_ended():
            self._note_end(ended, now)
        self._collect_garbage()
        for workload_id in self._workloads_here():
            self._reconcile(self.state.cluster.workloads[workload_id], now)
        self._heartbeats_if_due(now)
        self._flush()

    def run(
        self,
        subscriber: EventSubscriber,
        should_stop: Callable[[], bool],
        *,
        poll_s: float = 0.2,
        history: Iterable[Envelope[Any]] | None = None,
        after_step: Callable[[], None] | None = None,
    ) -> None:
        """Catch up (``history``, or the subscriber until a poll comes back empty: right for
        the in-memory bus, not for a consumer group that is still joining), register the
        nodes, then reconcile after every poll until ``should_stop()``. Closes the adapter."""
        try:
            if history is not None:
                self.catch_up(history)
            else:
                while self.pump(subscriber, poll_s):
                    pass
            self.start()
            while not should_stop():
                self.pump(subscriber, poll_s)
                self.step()
                if after_step is not None:
                    after_step()  # the host's checkpoint of the fold, when one is due
        finally:
            self.adapter.close()

    # -- reconciling -----------------------------------------------------------------------
    def _workloads_here(self) -> list[str]:
        found: set[str] = set()
        for name in self.node_specs:
            node = self.state.cluster.nodes.get(name)
            if node is not None:
                found.update(node.holders)
        return sorted(found)

    def _note_end(self, ended: RunEnded, now: float) -> None:
        orphan = self._orphans.pop((ended.workload_id, ended.attempt), None)
        if orphan is not None:
            return
        run = self.runs.get(ended.workload_id)
        if run is None or run.request.attempt != ended.attempt or run.ended is not None:
            return
        run.ended, run.ended_at = ended, now
        log.info(
            "run ended",
            extra={
                "workload_id": ended.workload_id,
                "attempt": ended.attempt,
                "exit_code": ended.exit_code,
                "stopped": run.stop_command is not None,
            },
        )

    def _collect_garbage(self) -> None:
        """Forget runs the log no longer has active; stop those still running."""
        for workload_id, run in list(self.runs.items()):
            workload = self.state.cluster.workloads.get(workload_id)
            if (
                workload is not None
                and workload.attempt == run.request.attempt
                and workload.status in ACTIVE
            ):
                continue
            del self.runs[workload_id]
            if run.ended is None and self._reachable(run.request.placement):
                log.warning(
                    "stopping a run the log no longer has active",
                    extra={
                        "workload_id": workload_id,
                        "attempt": run.request.attempt,
                        "status": None if workload is None else workload.status,
                    },
                )
                self.adapter.stop(workload_id, run.request.attempt, self.orphan_grace_s)
                self._orphans[run.key] = run

    def _reachable(self, placement: Iterable[tuple[str, tuple[int, ...]]]) -> bool:
        return all(self.adapter.reachable(node) for node, _gpus in placement)

    def _warn_once(self, key: str, message: str, **fields: object) -> None:
        if key not in self._warned:
            self._warned.add(key)
            log.warning(message, extra=fields)

    def _reconcile(self, workload: WorkloadState, now: float) -> None:
        workload_id = workload.workload_id
        foreign = [node for node, _gpus in workload.placement if node not in self.node_specs]
        if foreign:
            self._warn_once(
                f"foreign:{workload_id}:{workload.attempt}",
                "placement spans nodes of another agent; not acting on it",
                workload_id=workload_id,
                nodes=",".join(foreign),
            )
            return
        if not self._reachable(workload.placement):
            return  # a failed node: the scheduler will find it down
        run = self.runs.get(workload_id)
        # From the commands seen, not the fold's ``preempting`` flag: a preempt command read
        # before its workload's placement (topics are not ordered together) is not lost.
        command = self._preempt_command(workload)
        if run is None:
            if workload.status == "running":
                run = self._adopt(workload, now)
            elif command is not None:
                # Preempted before it ever started: nothing to stop.
                self._publish_once(
                    "preempted",
                    WorkloadPreempted(
                        workload_id=workload_id,
                        attempt=workload.attempt,
                        command_id=command.command_id,
                        ran_s=0,
                    ),
                    now,
                )
                return
            elif not self._gpus_busy(workload):
                run = self._start(workload, now)
            if run is None:
                return
        if workload.status == "placed" and not run.adopted:
            self._publish_once(
                "started",
                WorkloadStarted(
                    workload_id=workload_id,
                    attempt=workload.attempt,
                    pool=workload.pool or self.pool,
                    placement=_placement(workload),
                    allocated=workload.allocated,
                    budget=workload.budget,
                ),
                run.request.started_at,
            )
            if fact_id("started", workload_id, workload.attempt) not in self.in_flight:
                return  # its start did not go out: no end may overtake it
        if run.ended is None:
            if run.timed_out:
                return
            if command is None and run.deadline is not None and now >= run.deadline:
                self._stop_at_limit(run)
                return
            if command is not None and run.stop_command is None:
                run.stop_command = command
                log.info(
                    "stopping run",
                    extra={
                        "workload_id": workload_id,
                        "attempt": workload.attempt,
                        "command_id": command.command_id,
                        "reason": command.decision.reason,
                        "grace_s": command.grace_period_s,
                    },
                )
                self.adapter.stop(workload_id, workload.attempt, float(command.grace_period_s))
            return
        self._publish_end(run)

    def _stop_at_limit(self, run: Run) -> None:
        run.timed_out = True
        workload_id, attempt = run.key
        log.info(
            "stopping run at its time limit",
            extra={"workload_id": workload_id, "attempt": attempt, "deadline": run.deadline},
        )
        self.adapter.stop(workload_id, attempt, TIME_LIMIT_GRACE_S)

    def _publish_end(self, run: Run) -> None:
        ended, at = run.ended, run.ended_at
        assert ended is not None
        assert at is not None
        workload_id, attempt = run.key
        if run.timed_out:
            self._publish_once(
                "finished",
                WorkloadFinished(
                    workload_id=workload_id,
                    attempt=attempt,
                    outcome="failed",
                    exit_code=ended.exit_code,
                    message=TIME_LIMIT_MESSAGE,
                ),
                at,
            )
            return
        if ended.lost and run.stop_command is None:
            self._publish_once(
                "lost",
                WorkloadLost(
                    workload_id=workload_id,
                    attempt=attempt,
                    node=run.request.placement[0][0],
                    last_heartbeat=_utc(at),
                ),
                at,
            )
            return
        if run.stop_command is not None:
            ran_s = int(max(0.0, at - run.request.started_at))
            data: EventData = WorkloadPreempted(
                workload_id=workload_id,
                attempt=attempt,
                command_id=run.stop_command.command_id,
                ran_s=ran_s,
            )
            self._publish_once("preempted", data, at)
            return
        self._publish_once(
            "finished",
            WorkloadFinished(
                workload_id=workload_id,
                attempt=attempt,
                outcome="succeeded" if ended.succeeded else "failed",
                exit_code=ended.exit_code,
                message=ended.message[:2000],
            ),
            at,
        )

    def _preempt_command(self, workload: WorkloadState) -> PreemptCommand | None:
        for record in reversed(self.state.commands.get(workload.workload_id, ())):
            if not record.preempts or record.attempt != workload.attempt:
                continue
            command = record.command
            if isinstance(command, PreemptCommand):
                if command.cluster != self.cluster:
                    self._warn_once(
                        f"cluster:{command.command_id}",
                        "preempt command names another cluster; ignored",
                        command_id=command.command_id,
                        cluster=command.cluster,
                    )
                    return None
                return command
        return None

    def _gpus_busy(self, workload: WorkloadState) -> bool:
        """Another workload still holds one of its GPUs (a victim that has not exited yet)."""
        for node_name, gpus in workload.placement:
            mine = set(gpus)
            node = self.state.cluster.nodes[node_name]
            for holder, held in node.holders.items():
                if holder != workload.workload_id and mine.intersection(held):
                    return True
            for run in (*self.runs.values(), *self._orphans.values()):
                if (
                    run.request.workload_id != workload.workload_id
                    and run.ended is None
                    and mine.intersection(run.request.gpus_on(node_name))
                ):
                    return True
        return False

    def _request(self, workload: WorkloadState, started_at: float) -> RunRequest:
        return RunRequest(
            workload_id=workload.workload_id,
            attempt=workload.attempt,
            placement=workload.placement,
            spec=dict(workload.spec),
            started_at=started_at,
            budget=workload.budget,
            submitter=workload.submitter,
            array=self._array_task(workload),
        )

    def _array_task(self, workload: WorkloadState) -> ArrayTask | None:
        """The run's place in its job array, from the array's fact (None: no array's)."""
        array = self.state.cluster.arrays.get(workload.array_id or "")
        if array is None or workload.array_index is None:
            return None
        indices = parse_indices(array.submitted.indices)
        return ArrayTask(
            array.array_id, workload.array_index, len(indices), indices[0], indices[-1]
        )

    def limit_kept_by_cluster(self, workload: WorkloadState) -> bool:
        """Whether the cluster itself ends the run at its time limit (a Kubernetes Job's
        ``activeDeadlineSeconds``): then the agent does not stop it there too."""
        return False

    def _deadline(self, workload: WorkloadState, started_at: float) -> float | None:
        """When the run's time limit runs out: its start plus the limit its place command
        states (None: the command states none, or is not read yet, or the cluster keeps it)."""
        if self.limit_kept_by_cluster(workload):
            return None
        for record in reversed(self.state.commands.get(workload.workload_id, ())):
            if not record.preempts and record.attempt == workload.attempt:
                command = record.command
                if isinstance(command, PlaceCommand) and command.time_limit_s is not None:
                    return started_at + command.time_limit_s
                return None
        return None

    def _start(self, workload: WorkloadState, now: float) -> Run:
        run = Run(self._request(workload, now), deadline=self._deadline(workload, now))
        self.runs[workload.workload_id] = run
        log.info(
            "starting run",
            extra={
                "workload_id": workload.workload_id,
                "attempt": workload.attempt,
                "placement": repr(workload.placement),
            },
        )
        try:
            self.adapter.start(run.request)
        except Exception as error:
            log.exception("adapter could not start the run", extra={"id": workload.workload_id})
            run.ended = RunEnded(workload.workload_id, workload.attempt, None, f"{error}")
            run.ended_at = now
        return run

    def _adopt(self, workload: WorkloadState, now: float) -> Run | None:
        started_at = workload.started_at if workload.started_at is not None else now
        request = self._request(workload, started_at)
        if self.adapter.adopt(request):
            run = Run(request, adopted=True, deadline=self._deadline(workload, started_at))
            self.runs[workload.workload_id] = run
            log.info(
                "adopted a run of a previous incarnation",
                extra={"workload_id": workload.workload_id, "attempt": workload.attempt},
            )
            return run
        last = workload.last_heartbeat if workload.last_heartbeat is not None else started_at
        self._publish_once(
            "lost",
            WorkloadLost(
                workload_id=workload.workload_id,
                attempt=workload.attempt,
                node=workload.placement[0][0],
                last_heartbeat=_utc(min(last, now)),
            ),
            now,
        )
        return None

    # -- heartbeats and liveness --------------------------------------------------------------
    def _heartbeats_if_due(self, now: float) -> None:
        """Every ``heartbeat_s``: each reachable node's liveness signal, and its durable
        heartbeat when one is due (:func:`~services.agents.cadence.confirmation_due`)."""
        if now < self._next_heartbeat:
            return
        self._next_heartbeat = now + self.heartbeat_s
        occupants: dict[tuple[str, int], tuple[str, int]] = {}
        for run in self.runs.values():
            if run.ended is None:
                for node, gpus in run.request.placement:
                    for gpu in gpus:
                        occupants[(node, gpu)] = run.key
        for name in sorted(self.node_specs):
            if not self.adapter.reachable(name):
                continue
            readings = self._readings(name, occupants)
            sequence = max(self._sequence.get(name, -1) + 1, int(now * 1000))
            self._sequence[name] = sequence
            alive = NodeAlive(node=name, cluster=self.cluster, sequence=sequence, gpus=readings)
            event_id = derived_event_id("agent", "alive", name, str(sequence))
            self._publish("alive", alive, now, event_id, track=False)
            occupied = occupancy(readings)
            if confirmation_due(self._confirmed.get(name), occupied, now, self.confirm_s):
                heartbeat = GpuHeartbeat(
                    node=name, cluster=self.cluster, sequence=sequence, gpus=readings
                )
                event_id = derived_event_id("agent", "heartbeat", name, str(sequence))
                if self._publish("heartbeat", heartbeat, now, event_id, track=False):
                    self._confirmed[name] = (now, occupied)

    def _readings(
        self, name: str, occupants: dict[tuple[str, int], tuple[str, int]]
    ) -> tuple[GpuReading, ...]:
        """The node's GPU readings now, each naming the run of this agent that holds it."""
        readings = []
        for sample in sorted(self.adapter.readings(name), key=lambda s: s.index):
            occupant = occupants.get((name, sample.index))
            total = sample.memory_total_bytes
            used = max(0, sample.memory_used_bytes)
            readings.append(
                GpuReading(
                    index=sample.index,
                    occupant=None if occupant is None else occupant[0],
                    attempt=None if occupant is None else occupant[1],
                    utilisation_pct=min(100.0, max(0.0, float(sample.utilisation_pct))),
                    memory_used_bytes=used if total is None else min(used, max(0, total)),
                    memory_total_bytes=None if total is None else max(0, total),
                )
            )
        return tuple(readings)

    # -- publishing ------------------------------------------------------------------------
    def _publish_once(self, kind: str, data: EventData, at: float) -> None:
        subject = data.subject()
        attempt = getattr(data, "attempt", 0)
        event_id = fact_id(kind, subject, int(attempt))
        if event_id in self.in_flight or event_id in self.state.event_ids:
            return
        self._publish(kind, data, at, event_id)

    def publish_fact(self, kind: str, data: EventData, at: float, event_id: str) -> bool:
        """A fact of a family's own (a native workload's submission or cancellation),
        published, signed and tracked as the agent's others are; whether it was taken."""
        return self._publish(kind, data, at, event_id)

    def _publish(
        self, kind: str, data: EventData, at: float, event_id: str, *, track: bool = True
    ) -> bool:
        """Whether the publisher took it (it is retried otherwise)."""
        envelope = new_event(data, source=self.source, time=_utc(at), event_id=event_id)
        try:
            self.publisher.publish(envelope)
        except PublishError as error:
            log.error("publish failed; will retry", extra={"kind": kind, "error": str(error)})
            return False
        if track:
            self.in_flight.add(event_id)
            self._batch.append(event_id)
        self.published[kind] += 1
        if kind not in ("heartbeat", "alive"):
            log.info(
                "published",
                extra={"kind": kind, "subject": envelope.subject, "event_id": event_id},
            )
        return True

    def _flush(self) -> None:
        batch, self._batch = self._batch, []
        try:
            self.publisher.flush()
        except PublishError as error:
            # Unknown whether they landed: forget them, so the next round publishes them again
            # under the same ids (consumers dedupe).
            log.error("flush failed; will retry", extra={"error": str(error)})
            self.in_flight.difference_update(batch)


def _placement(workload: WorkloadState) -> Placement:
    return Placement(
        nodes=tuple(NodeGpus(node=node, gpus=gpus) for node, gpus in workload.placement)
    )
