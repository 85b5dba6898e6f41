"""Event logs to show the dashboard and the reports with, and a way to serve the API locally.

* :func:`small_lab`: a hand-made morning of a small lab (budgets, nodes, allocated, burst and
  pending work, a preemption, a cordoned node, the ledger's charges and one correction);
* :func:`simulated_lab`: a run of the simulator over the first jobs of a real trace
  (``data/traces``), its budgets placed in a tree;
* :func:`fresh_lab`: the first minutes of a lab the size of ``fairshare up``'s (4 nodes x 4
  GPUs) under a stream of short jobs: every GPU busy within a minute, work queued;
* :func:`long_history`: weeks of the same lab, simulated (daily and weekly load, a budget that
  wakes up half way, nodes sent for repair): what a dashboard shows after months;
* :func:`project`: the events through the in-memory bus into the SQL read models;
* :class:`ServerThread`: uvicorn serving an app in a thread on a free loopback port.
"""

from __future__ import annotations

import dataclasses
import math
import random
import socket
import threading
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from sqlalchemy import Engine

from events import TopicKind, Topics
from events.envelope import Envelope, derived_event_id, new_event
from events.models import (
    BudgetCreated,
    DecisionRecord,
    EventData,
    GpuHeartbeat,
    GpuReading,
    InputPosition,
    LedgerCharge,
    NodeCordoned,
    NodeGpus,
    NodeRegistered,
    PlaceCommand,
    Placement,
    PreemptCommand,
    WorkloadFinished,
    WorkloadPlaced,
    WorkloadPreempted,
    WorkloadRequeued,
    WorkloadStarted,
    WorkloadSubmitted,
    charge_id,
)
from events.types import utc_epoch_seconds
from projections.ledger import Ledger

#: A Monday, 06:00 UTC.
T0 = datetime(2026, 11, 2, 6, 0, tzinfo=UTC)
POOL = "a100"
CLUSTER = "cluster-a"
SOURCE = "fairshare/demo"


class _Log:
    """Facts in time order, each followed by the charges the ledger fold posts for it."""

    def __init__(self) -> None:
        self.events: list[Envelope[Any]] = []
        self.ledger = Ledger()

    def add(self, data: EventData, at: datetime) -> None:
        self.events.append(self._envelope(data, at))
        for charge in self.ledger.apply(data, utc_epoch_seconds(at)):
            self.events.append(self._envelope(charge, at))

    def _envelope(self, data: EventData, at: datetime) -> Envelope[Any]:
        return new_event(
            data,
            source=SOURCE,
            time=at,
            event_id=derived_event_id(SOURCE, str(len(self.events))),
        )


def _decision(reason: str, pass_id: int, **extra: Any) -> DecisionRecord:
    position = (InputPosition(topic="fairshare.workloads", partition=0, offset=pass_id * 3),)
    return DecisionRecord(pass_id=pass_id, input_position=position, reason=reason, **extra)  # type: ignore[arg-type]


def _run(
    log: _Log,
    workload: WorkloadSubmitted,
    node: str,
    gpus: tuple[int, ...],
    at: datetime,
    attempt: int = 1,
    pass_id: int = 1,
) -> None:
    placement = Placement(nodes=(NodeGpus(node=node, gpus=gpus),))
    allocated = workload.min_runtime_s > 0
    command = f"place-{workload.workload_id}-{attempt}"
    log.add(
        PlaceCommand(
            command_id=command,
            cluster=CLUSTER,
            pool=POOL,
            workload_id=workload.workload_id,
            attempt=attempt,
            budget=workload.budget,
            placement=placement,
            allocated=allocated,
            min_runtime_s=workload.min_runtime_s,
            decision=_decision("fairshare" if allocated else "burst", pass_id),
        ),
        at,
    )
    log.add(
        WorkloadPlaced(
            workload_id=workload.workload_id,
            attempt=attempt,
            pool=POOL,
            placement=placement,
            allocated=allocated,
            command_id=command,
        ),
        at,
    )
    log.add(
        WorkloadStarted(
            workload_id=workload.workload_id,
            attempt=attempt,
            pool=POOL,
            placement=placement,
            allocated=allocated,
        ),
        at + timedelta(seconds=5),
    )


def _heartbeat(log: _Log, node: str, occupants: dict[int, tuple[str, int]], at: datetime) -> None:
    readings = tuple(
        GpuReading(
            index=i,
            occupant=occupants[i][0] if i in occupants else None,
            attempt=occupants[i][1] if i in occupants else None,
            utilisation_pct=90.0 if i in occupants else 0.0,
            memory_used_bytes=(30 << 30) if i in occupants else 0,
        )
        for i in range(4)
    )
    sequence = int(at.timestamp())
    log.add(GpuHeartbeat(node=node, cluster=CLUSTER, sequence=sequence, gpus=readings), at)


def small_lab(t0: datetime = T0) -> list[Envelope[Any]]:
    """Six hours of a small lab on one pool of three 4-GPU nodes (see the module docstring).
    The last event is at ``t0 + 6h``."""
    log = _Log()
    h = timedelta(hours=1)
    for budget, weight in (("lab", 3.0), ("lab/robotics", 1.0), ("lab/vision", 2.0), ("ops", 1.0)):
        log.add(BudgetCreated(budget=budget, weight=weight, created_by="admin"), t0 - h)
    for node in ("n1", "n2", "n3"):
        log.add(
            NodeRegistered(node=node, cluster=CLUSTER, pool=POOL, gpus=4, gpu_type="A100"), t0 - h
        )
    work = _LabWork.submitted()
    _first_hours(log, t0, work)
    _preemption(log, t0, work)
    _last_hours(log, t0, work)
    _correction(log, t0)
    return log.events


@dataclasses.dataclass(frozen=True)
class _LabWork:
    """The lab's six submissions, shared by the phases of its morning."""

    v1: WorkloadSubmitted
    r1: WorkloadSubmitted
    u1: WorkloadSubmitted
    v2: WorkloadSubmitted
    v3: WorkloadSubmitted
    r2: WorkloadSubmitted

    @staticmethod
    def submitted() -> _LabWork:
        def submit(workload_id: str, budget: str, gpus: int, runtime: int, who: str) -> Any:
            return WorkloadSubmitted(
                workload_id=workload_id,
                budget=budget,
                pools=(POOL,),
                gpus=gpus,
                min_runtime_s=runtime,
                submitter=who,
            )

        return _LabWork(
            v1=submit("vision-train-1", "lab/vision", 4, 2 * 3600, "ana"),
            r1=submit("robot-sim-1", "lab/robotics", 2, 1800, "bo"),
            u1=submit("ops-burst-1", "ops", 2, 0, "chen"),
            v2=submit("vision-train-2", "lab/vision", 4, 3600, "ana"),
            v3=submit("vision-eval-3", "lab/vision", 2, 3600, "dan"),
            r2=submit("robot-big-2", "lab/robotics", 8, 3600, "bo"),
        )


def _first_hours(log: _Log, t0: datetime, work: _LabWork) -> None:
    """Allocated vision and robotics work, an ops burst beside it, a node cordoned."""
    h = timedelta(hours=1)
    log.add(work.v1, t0)
    _run(log, work.v1, "n1", (0, 1, 2, 3), t0, pass_id=1)
    log.add(work.r1, t0 + timedelta(minutes=10))
    _run(log, work.r1, "n2", (0, 1), t0 + timedelta(minutes=10), pass_id=2)
    log.add(work.u1, t0 + timedelta(minutes=20))
    _run(log, work.u1, "n2", (2, 3), t0 + timedelta(minutes=20), pass_id=3)
    log.add(NodeCordoned(node="n3", cordoned_by="admin", reason="firmware"), t0 + 0.5 * h)
    for hour in (1, 2):
        at = t0 + hour * h
        _heartbeat(log, "n1", {i: ("vision-train-1", 1) for i in range(4)}, at)
        _heartbeat(
            log,
            "n2",
            {
                0: ("robot-sim-1", 1),
                1: ("robot-sim-1", 1),
                2: ("ops-burst-1", 1),
                3: ("ops-burst-1", 1),
            },
            at,
        )


def _preemption(log: _Log, t0: datetime, work: _LabWork) -> None:
    """A second vision job preempts (and requeues) the robotics one."""
    h = timedelta(hours=1)
    log.add(work.v2, t0 + 2 * h)
    preempt_at = t0 + 2 * h + timedelta(minutes=5)
    log.add(
        PreemptCommand(
            command_id="preempt-robot-sim-1-1",
            cluster=CLUSTER,
            pool=POOL,
            workload_id="robot-sim-1",
            attempt=1,
            requeue=True,
            decision=_decision(
                "preempt-for",
                4,
                preemptor="vision-train-2",
                detail="lab/vision ranks ahead of lab/robotics after counting vision-train-2",
            ),
        ),
        preempt_at,
    )
    log.add(
        WorkloadPreempted(
            workload_id="robot-sim-1",
            attempt=1,
            command_id="preempt-robot-sim-1-1",
            ran_s=int((preempt_at - t0).total_seconds()) - 600,
        ),
        preempt_at + timedelta(seconds=30),
    )
    log.add(
        WorkloadRequeued(
            workload_id="robot-sim-1",
            attempt=1,
            original_submit_time=t0 + timedelta(minutes=10),
            reason="preempted",
        ),
        preempt_at + timedelta(seconds=31),
    )


def _last_hours(log: _Log, t0: datetime, work: _LabWork) -> None:
    """Runs end and new ones start; robot-big-2 (8 GPUs) is left pending."""
    h = timedelta(hours=1)
    log.add(
        WorkloadFinished(workload_id="vision-train-1", attempt=1, outcome="succeeded", exit_code=0),
        t0 + 3 * h,
    )
    _run(log, work.v2, "n1", (0, 1, 2, 3), t0 + 3 * h + timedelta(seconds=10), pass_id=5)
    log.add(work.r2, t0 + 3 * h + timedelta(minutes=30))
    log.add(
        WorkloadFinished(workload_id="ops-burst-1", attempt=1, outcome="succeeded", exit_code=0),
        t0 + 4 * h,
    )
    log.add(work.v3, t0 + 4 * h + timedelta(minutes=10))
    _run(log, work.v3, "n2", (0, 1), t0 + 4 * h + timedelta(minutes=15), pass_id=6)
    for hour in (4, 5, 6):
        at = t0 + hour * h
        _heartbeat(log, "n1", {i: ("vision-train-2", 1) for i in range(4)}, at)
        occupants = {0: ("vision-eval-3", 1), 1: ("vision-eval-3", 1)} if hour > 4 else {}
        _heartbeat(log, "n2", occupants, at)


def _correction(log: _Log, t0: datetime) -> None:
    """An auditor's correction of the first hour of vision-train-1 (10 GPU-minutes too many):
    a new entry that references the original, never an edit of it."""
    first_hour = int(t0.timestamp()) // 3600
    original = charge_id("vision-train-1", 1, first_hour, 0)
    log.events.append(
        log._envelope(
            LedgerCharge(
                charge_id=charge_id("vision-train-1", 1, first_hour, 1),
                workload_id="vision-train-1",
                budget="lab/vision",
                pool=POOL,
                bucket_start=t0,
                kind="allocated",
                debit_account=f"capacity:{POOL}",
                credit_account="budget:lab/vision",
                gpu_seconds=600,
                amount=600,
                corrects=original,
            ),
            t0 + timedelta(hours=6),
        )
    )


def simulated_lab(
    traces: Path, jobs: int = 400, gpus: int = 32, skip: int = 0
) -> list[Envelope[Any]]:
    """The simulator's event log over ``jobs`` trace jobs on ``gpus`` GPUs, the trace's flat
    budgets spread under three groups of a lab (``lab/vision/<id>``, ...)."""
    from scheduling.scheduling_pass import run_pass
    from services.simulator.engine import Simulation, SimulationConfig
    from services.simulator.trace import load_budgets, load_trace

    trace = load_trace(traces / "philly-2017-09.csv", limit=skip + jobs)[skip:]
    flat = load_budgets(traces / "philly-budgets.csv")
    groups = ("lab/vision", "lab/robotics", "lab/nlp")
    paths = {b: f"{groups[i % len(groups)]}/{b}" for i, b in enumerate(sorted(flat))}
    weights: dict[str, float] = {"lab": 1.0, "lab/vision": 3.0, "lab/robotics": 2.0, "lab/nlp": 1.0}
    weights.update({paths[b]: w for b, w in flat.items()})
    remapped = [dataclasses.replace(job, budget=paths[job.budget]) for job in trace]
    events: list[Envelope[Any]] = []
    source = "fairshare/simulator/demo"

    def record(data: EventData, at: float) -> None:
        events.append(
            new_event(
                data,
                source=source,
                time=datetime.fromtimestamp(at, UTC),
                event_id=derived_event_id(source, str(len(events))),
            )
        )

    Simulation(remapped, weights, SimulationConfig(gpus=gpus), run_pass, recorder=record).run()
    return events


#: The lab ``fairshare up`` writes (services/launcher/lab.py): budgets and weights.
UP_LAB = {"lab": 1.0, "lab/vision": 2.0, "lab/robotics": 1.0, "lab/nlp": 1.0}
#: Who cordons the last node of the generated labs, and why (the node tiles show it).
CORDON = ("admin", "ECC errors on GPU 2: waiting for a replacement card")


def _simulated(
    jobs: list[Any],
    config: Any,
    source: str,
    cordon_last_node: bool = True,
) -> list[Envelope[Any]]:
    """The simulator's event log of ``jobs`` on the lab's budgets (:data:`UP_LAB`), plus, at
    the last arrival, a cordon of the last node with a reason."""
    from scheduling.scheduling_pass import run_pass
    from services.simulator.engine import Simulation

    events: list[Envelope[Any]] = []

    def record(data: EventData, at: float) -> None:
        events.append(
            new_event(
                data,
                source=source,
                time=datetime.fromtimestamp(at, UTC),
                event_id=derived_event_id(source, str(len(events))),
            )
        )

    simulation = Simulation(jobs, dict(UP_LAB), config, run_pass, recorder=record)
    simulation.run()
    if cordon_last_node:
        node = sorted(simulation.cluster.nodes)[-1]
        by, reason = CORDON
        record(NodeCordoned(node=node, cordoned_by=by, reason=reason), jobs[-1].arrival)
    return events


def _arrivals(
    rng: random.Random,
    start: float,
    end: float,
    per_hour: Callable[[float], float],
    job: Callable[[str, float], Any],
) -> list[Any]:
    """Jobs arriving as a Poisson process of ``per_hour(t)`` per hour (thinned from its peak),
    the last one at ``end`` (where the simulation stops)."""
    peak = max(per_hour(start + i * 900.0) for i in range(int((end - start) // 900) + 1))
    jobs: list[Any] = []
    at = start
    while True:
        at += rng.expovariate(peak / 3600)
        if at >= end:
            break
        if rng.random() * peak <= per_hour(at):
            jobs.append(job(f"job-{len(jobs):05d}", at))
    jobs.append(job(f"job-{len(jobs):05d}", end))
    return jobs


def fresh_lab(minutes: float = 5.0, t0: datetime = T0, seed: int = 3) -> list[Envelope[Any]]:
    """The first ``minutes`` of a ``fairshare up``-sized lab (4 nodes x 4 GPUs, the budgets of
    :data:`UP_LAB`): a dozen jobs at once, then one every 20 s or so, 1-15 min long, contracts
    of up to 2 min; the last node cordoned (with a reason) at the end. The last event is at
    ``t0 + minutes``."""
    from services.simulator.engine import SimulationConfig
    from services.simulator.trace import ContractRule, TraceJob

    rng = random.Random(seed)
    start = t0.timestamp()
    budgets = ("lab/vision", "lab/robotics", "lab/nlp")

    def job(job_id: str, at: float) -> TraceJob:
        budget = rng.choices(budgets, weights=(5, 3, 2))[0]
        gpus = rng.choice((1, 1, 2, 2, 4))
        return TraceJob(job_id, at, float(rng.randint(60, 900)), gpus, budget)

    first = [job(f"start-{i:02d}", start + 2 * i) for i in range(12)]
    later = _arrivals(rng, start + 30, start + minutes * 60, lambda _t: 180.0, job)
    config = SimulationConfig(
        gpus=16, gpus_per_node=4, contract=ContractRule(debug_max_gpus=0, cap_s=120)
    )
    return _simulated(first + later, config, "fairshare/demo/fresh")


#: Where :func:`long_history` ends by default: a Tuesday afternoon, work queued.
HISTORY_END = datetime(2026, 11, 3, 15, 0, tzinfo=UTC)


def long_history(
    weeks: int = 10, end_at: datetime = HISTORY_END, gpus: int = 16, seed: int = 11
) -> list[Envelope[Any]]:
    """``weeks`` of the lab of :data:`UP_LAB` on ``gpus`` GPUs (nodes of 4), up to ``end_at``:
    busier on weekdays and by day, and in the last four hours (a deadline: work queues); 1-12 h
    jobs of 1-8 GPUs; ``lab/nlp`` quiet for the first half, then the busiest; about one node
    repair a fortnight (cordoned, drained, down for 8 h, back); the last node cordoned (with a
    reason) at the end."""
    from services.simulator.engine import SimulationConfig
    from services.simulator.maintenance import MaintenanceConfig
    from services.simulator.trace import TraceJob

    rng = random.Random(seed)
    end = end_at.timestamp()
    start = end - weeks * 7 * 86400
    half = start + (end - start) / 2

    def per_hour(at: float) -> float:
        moment = datetime.fromtimestamp(at, UTC)
        day = 1.0 if 8 <= moment.hour < 20 else 0.35
        rush = 4.0 if at > end - 4 * 3600 else 1.0  # a deadline: work queues at the end
        return 1.9 * rush * day * (0.3 if moment.weekday() >= 5 else 1.0) * gpus / 16

    def job(job_id: str, at: float) -> TraceJob:
        nlp = 1 if at < half else 6
        budget = rng.choices(("lab/vision", "lab/robotics", "lab/nlp"), weights=(4, 2, nlp))[0]
        hours = min(12.0, max(0.25, rng.lognormvariate(math.log(2.5), 0.8)))
        return TraceJob(job_id, at, round(hours * 3600), rng.choice((1, 2, 2, 4, 4, 8)), budget)

    jobs = _arrivals(rng, start, end, per_hour, job)
    maintenance = MaintenanceConfig(rate=0.018, seed=seed, repair_s=8 * 3600)
    config = SimulationConfig(gpus=gpus, gpus_per_node=4, maintenance=maintenance)
    return _simulated(jobs, config, "fairshare/demo/history")


def project(engine: Engine, envelopes: Sequence[Envelope[Any]], prefix: str = "demo.") -> int:
    """Project ``envelopes`` into the (migrated) read models at ``engine``, through the
    in-memory bus so that each has a real log position; returns how many were new."""
    from services.bus.memory import InMemoryBroker, InMemoryPublisher, InMemorySubscriber
    from services.projector.sql_projector import SqlProjector

    broker = InMemoryBroker(partitions=1)
    topics = Topics(prefix=prefix)
    publisher = InMemoryPublisher(broker, topics)
    for envelope in envelopes:
        publisher.publish(envelope)
    subscriber = InMemorySubscriber(broker, "demo-projector", list(TopicKind), topics)
    deliveries = subscriber.poll(max_records=10**9)
    return SqlProjector(engine).apply(deliveries)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class ServerThread:
    """``app`` served by uvicorn on 127.0.0.1:<free port> in a daemon thread."""

    def __init__(self, app: Any) -> None:
        import uvicorn

        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        config = uvicorn.Config(app, host="127.0.0.1", port=self.port, log_level="warning")
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, name="dashboard-server", daemon=True)

    def __enter__(self) -> ServerThread:
        self.thread.start()
        deadline = time.monotonic() + 10
        while not self.server.started:
            if time.monotonic() > deadline or not self.thread.is_alive():
                raise RuntimeError("the API server did not start")
            time.sleep(0.02)
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=10)
