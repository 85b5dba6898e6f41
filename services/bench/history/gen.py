"""Synthetic fleet histories for ``fairshare bench history``: N nodes of 8 GPUs at the agents'
real cadence, in the project's own event shapes, as the services would have written them.

What a history holds, in event-time order (the order a live log has them, within a second):

* the demo lab's budgets and memberships (``services.launcher.lab``), the node registrations
  and the scheduler's settings, just before the history starts;
* per workload: its submission (as the API publishes it), its place command with a decision
  record and its ``workload.placed`` (as ``SchedulingPass.place`` states them, one second
  later), its start (the agent, a second after that) and its finish;
* one ``node.alive`` per node every 10 s with every GPU's reading, occupant and attempt, on
  the liveness topic, and the durable ``node.heartbeat`` of the same readings every 5 minutes,
  at a node's first round and at once when its occupants change (``services.agents.agent``,
  by the same rule: :func:`services.agents.cadence.confirmation_due`);
* the charges and usage snapshots the charging service posts: the generator folds its own
  facts through the very ledger fold and usage window the charging host runs
  (``projections.ledger``, ``projections.usage_window``), and publishes each charge just
  after the fact that posted it, with the host's derived ids, and a snapshot of every pool
  every 30 s of history with the input positions it covers. A charging service restarted on
  the history thus re-derives every charge and finds it already posted.

Each node is kept busy by a little simulation of its own: whenever GPUs free up a new
workload (1 to 8 GPUs, minutes to a day) is submitted for them after a short gap, sometimes
after a longer idle spell. Every submission is placed at once, so nothing is pending when the
history ends. The facts are built from validated models, except the heartbeats and liveness
signals (most of the log), built with ``events.prevalidated`` like every hot path; the
unit test decodes a whole history through the strict serde and folds it.

After :meth:`HistoryGenerator.finish`, :meth:`HistoryGenerator.keep_alive` goes on sending the
nodes' liveness signals and heartbeats at the real cadences, the runs of the end still on
their GPUs, as a live fleet does while its services restart (without it the scheduler would
declare every node down).
"""

from __future__ import annotations

import heapq
import random
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from events import TopicKind, Topics, new_event
from events.envelope import Envelope, derived_event_id, envelope_class
from events.models import (
    BudgetCreated,
    EventData,
    GpuHeartbeat,
    GpuReading,
    LedgerCharge,
    MembershipGranted,
    NodeAlive,
    NodeRegistered,
)
from events.prevalidated import prevalidated
from projections.ledger import Ledger, charge_event_id
from projections.usage_snapshots import count_charge, usage_snapshots
from projections.usage_window import UsageWindow
from services.agents.cadence import DEFAULT_CONFIRM_S, Confirmed, confirmation_due, occupancy
from services.bench.history.facts import Job, JobFacts, Positions, settings_fact
from services.launcher.lab import LAB_BUDGETS, LAB_MEMBERS

Sink = Callable[[Envelope[Any]], None]

#: (GPUs, weight) of a new workload, and its runtime in seconds (low, high, weight).
_SIZES = ((1, 30), (2, 25), (4, 25), (8, 20))
_RUNTIMES = ((600, 3600, 30), (3600, 6 * 3600, 50), (6 * 3600, 24 * 3600, 20))
_LEAVES = tuple(budget for budget, _ in LAB_BUDGETS if "/" in budget)
_SUBMITTERS = {budget: user for user, budget, role in LAB_MEMBERS if role == "member"}
#: The kinds of queued happenings, in the order they go at equal times.
_FINISH, _FILL, _SUBMIT, _PLACE, _START, _HEARTBEAT, _SNAPSHOT = range(7)


def parse_length(text: str) -> int:
    """``30m``, ``1h``, ``6h``, ``1d``, ``1w``, ``4w`` -> seconds."""
    units = {"m": 60, "h": 3600, "d": 86_400, "w": 7 * 86_400}
    text = text.strip().lower()
    if len(text) < 2 or text[-1] not in units or not text[:-1].isdigit() or int(text[:-1]) < 1:
        raise ValueError(f"a history length is a number and m, h, d or w (1h, 1d, 4w): {text!r}")
    return int(text[:-1]) * units[text[-1]]


@dataclass(frozen=True)
class HistoryConfig:
    nodes: int
    length_s: int
    #: When the history ends (epoch seconds); it starts ``length_s`` earlier.
    end: float
    gpus_per_node: int = 8
    #: The agents' liveness cadence, and their durable heartbeat's (``--confirm-s``).
    heartbeat_s: int = 10
    confirm_s: int = int(DEFAULT_CONFIRM_S)
    #: The charging host's snapshot cadence (``ChargingHost.snapshot_every_s``).
    snapshot_s: int = 30
    cluster: str = "bench"
    seed: int = 23
    #: Partitions per topic (``ensure_topics``' answer), for the positions snapshots and
    #: decision records name.
    partitions: dict[str, int] = field(default_factory=dict)

    @property
    def start(self) -> int:
        return int(self.end) - self.length_s


@dataclass
class _Node:
    name: str
    #: GPU index -> (workload, attempt) of the run on it (set at start, cleared at finish).
    occupants: dict[int, tuple[str, int]] = field(default_factory=dict)
    #: GPUs promised to a workload not finished yet (submitted, placed or running).
    reserved: set[int] = field(default_factory=set)
    next_heartbeat: float = 0.0
    #: Its last durable heartbeat: when, and the occupancy it stated.
    confirmed: Confirmed | None = None


class HistoryGenerator:
    """Writes a history to ``sink`` up to a time (resumable), then keeps the fleet alive."""

    def __init__(self, config: HistoryConfig, topics: Topics, sink: Sink) -> None:
        self.config, self.topics, self.sink = config, topics, sink
        self.rng = random.Random(config.seed)
        self.positions = Positions(topics, config.partitions)
        self.facts = JobFacts(config.cluster, config.nodes * config.gpus_per_node)
        self.ledger = Ledger(keep_entries=False)
        self.usage = UsageWindow()
        self.counts: Counter[str] = Counter()
        self.bytes_hint = 0
        self.workloads = 0
        self.now = float(config.start)
        self._queue: list[tuple[float, int, int, Any]] = []
        self._seq = 0
        #: Workloads submitted and not placed yet, placed and not started yet.
        self._waiting: dict[int, set[str]] = {_PLACE: set(), _START: set()}
        self.nodes = [_Node(f"{config.cluster}-n{i:04d}") for i in range(config.nodes)]
        self._prologue()

    # -- the queue ---------------------------------------------------------------------------
    def _at(self, t: float, kind: int, item: Any) -> None:
        self._seq += 1
        heapq.heappush(self._queue, (t, kind, self._seq, item))

    def generate(self, until: float, progress: Callable[[float], None] | None = None) -> None:
        """Everything that happens up to ``until`` (epoch seconds), in time order."""
        queue, last_report = self._queue, self.now
        while queue and queue[0][0] <= until:
            t, kind, _seq, item = heapq.heappop(queue)
            self.now = t
            self._happen(t, kind, item)
            if progress is not None and t - last_report >= 3600:
                last_report = t
                progress(t)
        self.now = max(self.now, until)

    def finish(self, until: float) -> None:
        """End the history at ``until``: what happened by then, and the placements and starts
        of workloads already submitted (due within seconds: the scheduler and the agent act
        at once), so that no workload is left pending for the services to act on."""
        self.generate(until)
        taken = set()
        for t, kind, seq, item in sorted(e for e in self._queue if e[0] <= until + 3):
            job = item if kind == _PLACE else item[0] if kind == _START else None
            if job is not None and job.workload_id in self._waiting[kind]:
                self._happen(t, kind, item)
                taken.add(seq)
        self._queue = [e for e in self._queue if e[2] not in taken]
        heapq.heapify(self._queue)

    def keep_alive(self, now: float) -> int:
        """The liveness signals due by ``now`` (at most one per node: a late call does not
        burst), and the heartbeats due with them, naming the runs that were on the GPUs when
        the history ended; how many nodes were signalled."""
        sent = 0
        for node in self.nodes:
            if node.next_heartbeat <= now:
                self._heartbeat(node, now, charge=False)
                node.next_heartbeat = now + self.config.heartbeat_s
                sent += 1
        return sent

    # -- what happens ------------------------------------------------------------------------
    def _prologue(self) -> None:
        config, start = self.config, self.config.start
        lab: list[EventData] = [
            BudgetCreated(budget=budget, weight=weight, created_by="admin", description="lab")
            for budget, weight in LAB_BUDGETS
        ]
        lab += [
            MembershipGranted(budget=b, user=u, role=r, granted_by="admin")  # type: ignore[arg-type]
            for u, b, r in LAB_MEMBERS
        ]
        for i, data in enumerate(lab):  # as `fairshare up` seeds them (services.launcher.lab)
            self._emit(data, start - 120 + i, "fairshare/up", derived_event_id("up", str(i)))
        for i, node in enumerate(self.nodes):
            registered = NodeRegistered(
                node=node.name,
                cluster=config.cluster,
                pool=config.cluster,
                gpus=config.gpus_per_node,
                gpu_type="H100",
            )
            source = f"fairshare/agent/{config.cluster}"
            event_id = derived_event_id("agent", "registered", config.cluster, node.name)
            self._emit(registered, start - 60, source, event_id)
            node.next_heartbeat = start + i % config.heartbeat_s
            self._at(node.next_heartbeat, _HEARTBEAT, node)
            self._at(start + self.rng.randint(0, 300), _FILL, node)
        settings = settings_fact()
        self._emit(settings, start - 30, "fairshare/scheduler", derived_event_id("settings@1"))
        self._at(start + config.snapshot_s, _SNAPSHOT, None)

    def _happen(self, t: float, kind: int, item: Any) -> None:
        if kind == _HEARTBEAT:
            self._heartbeat(item, t)
            item.next_heartbeat = t + self.config.heartbeat_s
            self._at(item.next_heartbeat, _HEARTBEAT, item)
        elif kind == _FILL:
            self._fill(item, t)
        elif kind == _SNAPSHOT:
            self._snapshots(t)
            self._at(t + self.config.snapshot_s, _SNAPSHOT, None)
        else:
            self._job_fact(t, kind, item)

    def _fill(self, node: _Node, t: float) -> None:
        """New workloads for the node's free GPUs (or, now and then, an idle spell first)."""
        rng = self.rng
        free = [g for g in range(self.config.gpus_per_node) if g not in node.reserved]
        if not free:
            return
        if rng.random() < 0.1:
            self._at(t + rng.randint(300, 3 * 3600), _FILL, node)
            return
        while free:
            sizes = [(size, weight) for size, weight in _SIZES if size <= len(free)]
            gpus = rng.choices([s for s, _ in sizes], [w for _, w in sizes])[0]
            low, high, _ = rng.choices(_RUNTIMES, [w for *_, w in _RUNTIMES])[0]
            leaf = rng.choice(_LEAVES)
            self.workloads += 1
            job = Job(
                workload_id=f"w{self.workloads:07d}",
                node=node.name,
                gpus=tuple(free[:gpus]),
                budget=leaf,
                submitter=_SUBMITTERS[leaf],
                runtime_s=rng.randint(low, high),
                min_runtime_s=0 if rng.random() < 0.2 else rng.choice((600, 1800, 3600)),
            )
            free = free[gpus:]
            node.reserved.update(job.gpus)
            submit = t + rng.randint(5, 120)
            self._at(submit, _SUBMIT, job)
            self._at(submit + 1, _PLACE, job)
            self._at(submit + 2, _START, (job, node))
            self._at(submit + 2 + job.runtime_s, _FINISH, (job, node))

    def _job_fact(self, t: float, kind: int, item: Any) -> None:
        facts = self.facts
        if kind == _SUBMIT:
            self._emit(*facts.submitted(item, t))
            self._waiting[_PLACE].add(item.workload_id)
        elif kind == _PLACE:
            for emitted in facts.placed(item, t, self.usage, self.positions.of_scheduler()):
                self._emit(*emitted)
            self._waiting[_PLACE].discard(item.workload_id)
            self._waiting[_START].add(item.workload_id)
        elif kind == _START:
            job, node = item
            self._waiting[_START].discard(job.workload_id)
            for gpu in job.gpus:
                node.occupants[gpu] = (job.workload_id, 1)
            self._emit(*facts.started(job, t))
        else:
            job, node = item
            for gpu in job.gpus:
                node.occupants.pop(gpu, None)
                node.reserved.discard(gpu)
            self._emit(*facts.finished(job, t, failed=self.rng.random() < 0.05))
            self._at(t, _FILL, node)

    def _heartbeat(self, node: _Node, t: float, charge: bool = True) -> None:
        """The node's liveness signal, and its durable heartbeat when one is due (folded into
        the ledger unless ``charge`` is False; the liveness signal never is: the ledger does
        not read it)."""
        sequence = int(t * 1000)
        readings = []
        for gpu in range(self.config.gpus_per_node):
            run = node.occupants.get(gpu)
            readings.append(
                prevalidated(
                    GpuReading,
                    index=gpu,
                    occupant=None if run is None else run[0],
                    attempt=None if run is None else run[1],
                    utilisation_pct=0.0 if run is None else float(60 + (sequence // 7 + gpu) % 40),
                    memory_used_bytes=0 if run is None else (40 + gpu) << 30,
                    memory_total_bytes=80 << 30,
                )
            )
        gpus, source = tuple(readings), f"fairshare/agent/{self.config.cluster}"
        fields = {"node": node.name, "cluster": self.config.cluster, "sequence": sequence}
        alive = prevalidated(NodeAlive, **fields, gpus=gpus)
        event_id = derived_event_id("agent", "alive", node.name, str(sequence))
        self._emit(alive, t, source, event_id, trust=True, charge=False)
        occupied = occupancy(gpus)
        if confirmation_due(node.confirmed, occupied, t, self.config.confirm_s):
            node.confirmed = (t, occupied)
            data = prevalidated(GpuHeartbeat, **fields, gpus=gpus)
            event_id = derived_event_id("agent", "heartbeat", node.name, str(sequence))
            self._emit(data, t, source, event_id, trust=True, charge=charge)

    def _snapshots(self, t: float) -> None:
        as_of = self.positions.of_charging()
        for snapshot in usage_snapshots(self.usage, t, as_of):
            key = "|".join(f"{p.topic}/{p.partition}/{p.offset}" for p in as_of)
            event_id = derived_event_id("usage", snapshot.pool, key)
            self._emit(snapshot, t, "fairshare/charging", event_id)
        self.facts.usage_as_of = t

    # -- writing -------------------------------------------------------------------------------
    def _emit(
        self,
        data: EventData,
        t: float,
        source: str,
        event_id: str,
        *,
        trust: bool = False,
        charge: bool = True,
    ) -> None:
        time = datetime.fromtimestamp(t, UTC)
        if trust:
            envelope: Envelope[Any] = prevalidated(
                envelope_class(type(data)),
                id=event_id,
                source=source,
                type=data.event_type,
                time=time,
                subject=data.subject(),
                correlationid=None,
                causationid=None,
                data=data,
            )
        else:
            envelope = new_event(data, source=source, time=time, event_id=event_id)
        self._write(envelope)
        if charge:
            for posted in self.ledger.apply(data, t):
                self._charge(posted, envelope)

    def _charge(self, charge: LedgerCharge, cause: Envelope[Any]) -> None:
        """As ``ChargingHost._fold`` publishes it: derived id, the fact's time, caused by it."""
        count_charge(self.usage, charge)
        self._write(
            prevalidated(
                envelope_class(LedgerCharge),
                id=charge_event_id(charge),
                source="fairshare/charging",
                type=LedgerCharge.event_type,
                time=cause.time,
                subject=charge.workload_id,
                correlationid=None,
                causationid=cause.id,
                data=charge,
            )
        )

    def _write(self, envelope: Envelope[Any]) -> None:
        self.sink(envelope)
        self.positions.count(type(envelope.data).topic, envelope.subject)
        self.counts[envelope.type] += 1

    @property
    def records(self) -> int:
        return sum(self.counts.values())

    def heartbeats(self) -> int:
        """Durable heartbeats written (the liveness signals are :meth:`liveness`)."""
        return self.counts[GpuHeartbeat.event_type]

    def liveness(self) -> int:
        return self.counts[NodeAlive.event_type]

    def by_topic(self) -> dict[str, int]:
        totals: Counter[str] = Counter()
        for kind in TopicKind:
            totals[kind.value] = sum(self.positions.ends(kind).values())
        return {kind: count for kind, count in totals.items() if count}
