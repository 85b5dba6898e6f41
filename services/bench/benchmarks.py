"""``fairshare bench scheduler``: the scheduler's speed, as figures (never a pass/fail test).

* ``replay_wall_s``: the Philly trace (256 GPUs) replayed through the fair-share core, with the
  FIFO baseline replayed in the same run for a ratio;
* ``full_pass_s``: one pass over an empty synthetic cluster (default 10,000 nodes x 8 GPUs,
  100,000 pending workloads, 500 leaf budgets in a 4-level tree), placing until it is full;
* ``incremental_pass_p50_ms``: the pass after one event (a workload ends) on that full cluster.

Passes run with the cyclic GC paused, as the scheduler service and the simulator run them
(services/runtime/gc_pause.py).
"""

from __future__ import annotations

import gc
import math
import random
import statistics
import time
from pathlib import Path
from typing import Any

from events.models import NodeRegistered, WorkloadFinished, WorkloadStarted, WorkloadSubmitted
from projections.budget_tree import BudgetTree
from projections.cluster_state import ClusterState
from services.runtime.gc_pause import gc_paused
from services.scheduler.core.baselines import baseline_policy
from services.scheduler.core.scheduling_pass import PassContext, run_pass
from services.simulator.engine import Simulation, SimulationConfig
from services.simulator.trace import DEVELOPMENT_TRACES, load_budgets, load_trace

BENCH_POOL = "bench"


def _replay(trace: Path, budgets: Path) -> dict[str, Any]:
    jobs = load_trace(trace)
    weights = load_budgets(budgets)
    config = SimulationConfig(gpus=256, gpus_per_node=8)
    fairshare = Simulation(jobs, weights, config, run_pass).run()
    fifo = Simulation(jobs, weights, config, baseline_policy("fifo")).run()
    return {
        "replay_jobs": len(jobs),
        "replay_gpus": 256,
        "replay_wall_s": round(fairshare.wall_seconds, 3),
        "replay_passes": fairshare.passes,
        "baseline_fifo_replay_wall_s": round(fifo.wall_seconds, 3),
        "replay_ratio_to_fifo": round(fairshare.wall_seconds / fifo.wall_seconds, 3),
    }


def build_tree(leaves: int, levels: int = 4, seed: int = 7) -> tuple[BudgetTree, list[str]]:
    """A ``levels``-deep tree with ``leaves`` leaves and random weights."""
    rng = random.Random(seed)
    fanout = max(2, math.floor(leaves ** (1 / levels)))
    tree = BudgetTree()
    frontier = [""]
    for level in range(levels):
        last = level == levels - 1
        target = leaves if last else len(frontier) * fanout
        children: list[str] = []
        i = 0
        while len(children) < target:  # round robin, so every parent gets children
            for parent in frontier:
                if len(children) >= target:
                    break
                path = f"{parent}/b{level}{i}" if parent else f"b{level}{i}"
                tree.create(path, float(rng.randint(1, 10)), 0.0)
                children.append(path)
            i += 1
        frontier = children
    return tree, frontier


def synthetic_cluster(
    nodes: int, pending: int, leaf_budgets: int, seed: int = 11
) -> tuple[ClusterState, BudgetTree, dict[str, float]]:
    rng = random.Random(seed)
    tree, leaves = build_tree(leaf_budgets)
    cluster = ClusterState()
    for i in range(nodes):
        cluster.apply(
            NodeRegistered(
                node=f"n{i:05d}", cluster="bench", pool=BENCH_POOL, gpus=8, gpu_type="sim"
            ),
            0.0,
        )
    sizes = [1] * 60 + [2] * 15 + [4] * 15 + [8] * 10
    for i in range(pending):
        cluster.apply(
            WorkloadSubmitted.model_construct(
                workload_id=f"w{i:06d}",
                budget=rng.choice(leaves),
                pools=(BENCH_POOL,),
                gpus=rng.choice(sizes),
                gang="single-node",
                min_runtime_s=rng.randint(600, 3600),
                resumable=True,
                priority=0,
                submitter="bench",
                spec={},
            ),
            1.0 + i * 0.01,
        )
    usage = {leaf: float(rng.randint(0, 10_000_000)) for leaf in leaves}
    return cluster, tree, usage


def scheduler_benchmark(
    *,
    trace: Path | None,
    budgets: Path | None,
    nodes: int,
    pending: int,
    leaf_budgets: int,
    trials: int,
    replay: bool = True,
) -> dict[str, Any]:
    result: dict[str, Any] = {}
    trace = trace or DEVELOPMENT_TRACES / "philly-2017-09.csv"
    budgets = budgets or DEVELOPMENT_TRACES / "philly-budgets.csv"
    if replay:
        result.update(_replay(trace, budgets))
    cluster, tree, usage = synthetic_cluster(nodes, pending, leaf_budgets)
    now = 10_000.0
    gc.collect()
    gc.freeze()
    started = time.perf_counter()
    with gc_paused():
        full = run_pass(cluster, tree, lambda _pool: usage, PassContext(now=now, pass_id=1))
    result["full_pass_s"] = round(time.perf_counter() - started, 3)
    placed = [c for c in full.events if type(c).__name__ == "WorkloadPlaced"]
    for event in placed:
        cluster.apply(
            WorkloadStarted.model_construct(
                workload_id=event.workload_id,  # type: ignore[attr-defined]
                attempt=1,
                pool=BENCH_POOL,
                placement=event.placement,  # type: ignore[attr-defined]
                allocated=True,
            ),
            now,
        )
    running = sorted(w.workload_id for w in cluster.workloads.values() if w.status == "running")
    rng = random.Random(3)
    timings = []
    for trial in range(trials):
        now += 60
        victim = running.pop(rng.randrange(len(running)))
        cluster.apply(
            WorkloadFinished.model_construct(
                workload_id=victim, attempt=1, outcome="succeeded", exit_code=0, message=""
            ),
            now,
        )
        started = time.perf_counter()
        with gc_paused():
            run_pass(cluster, tree, lambda _pool: usage, PassContext(now=now, pass_id=2 + trial))
        timings.append((time.perf_counter() - started) * 1000)
    result.update(
        {
            "incremental_pass_p50_ms": round(statistics.median(timings), 3),
            "incremental_pass_max_ms": round(max(timings), 3),
            "synthetic_nodes": nodes,
            "synthetic_gpus": nodes * 8,
            "synthetic_pending": pending,
            "synthetic_leaf_budgets": len(tree.leaves()),
            "synthetic_tree_levels": 4,
            "full_pass_placements": len(placed),
            "incremental_trials": trials,
        }
    )
    return result


def synthetic_log(path: Path, events: int, seed: int = 5) -> int:
    """Write a log of about ``events`` events: workloads that start, send hourly heartbeats and
    finish, with the charges the ledger fold posts for them, in log order."""
    from datetime import UTC, datetime

    from events.envelope import derived_event_id, new_event
    from events.models import EventData, GpuHeartbeat, GpuReading, NodeGpus, Placement
    from events.ndjson import EventLogWriter
    from projections.ledger import Ledger

    rng = random.Random(seed)
    ledger = Ledger()
    written = 0
    t0 = 1_700_000_000 - 1_700_000_000 % 3600
    with EventLogWriter(path) as writer:

        def emit(data: EventData, at: int) -> None:
            nonlocal written
            for item in (data, *ledger.apply(data, float(at))):
                writer.write(
                    new_event(
                        item,
                        source="bench",
                        time=datetime.fromtimestamp(at, UTC),
                        event_id=derived_event_id("bench", str(written)),
                    )
                )
                written += 1

        workload = 0
        while written < events:
            workload += 1
            wid, node = f"w{workload:07d}", f"n{workload % 5000:04d}"
            gpus = rng.choice((1, 1, 2, 4, 8))
            start = t0 + rng.randint(0, 3600 * 24)
            hours = rng.randint(1, 12)
            emit(
                WorkloadSubmitted.model_construct(
                    workload_id=wid,
                    budget=f"lab/t{workload % 20}",
                    pools=("bench",),
                    gpus=gpus,
                    gang="single-node",
                    min_runtime_s=600,
                    resumable=True,
                    priority=0,
                    submitter="bench",
                    spec={},
                ),
                start - 5,
            )
            placement = Placement(nodes=(NodeGpus(node=node, gpus=tuple(range(gpus))),))
            emit(
                WorkloadStarted.model_construct(
                    workload_id=wid, attempt=1, pool="bench", placement=placement, allocated=True
                ),
                start,
            )
            for hour in range(1, hours + 1):
                emit(
                    GpuHeartbeat(
                        node=node,
                        cluster="bench",
                        sequence=hour,
                        gpus=tuple(
                            GpuReading(
                                index=i,
                                occupant=wid,
                                attempt=1,
                                utilisation_pct=95.0,
                                memory_used_bytes=1 << 30,
                            )
                            for i in range(gpus)
                        ),
                    ),
                    start + hour * 3600 - 1,
                )
            emit(
                WorkloadFinished.model_construct(
                    workload_id=wid, attempt=1, outcome="succeeded", exit_code=0, message=""
                ),
                start + hours * 3600,
            )
    return written


def audit_benchmark(events: int, path: Path | None = None) -> dict[str, Any]:
    """Audit replay of an exported log against a loop that only decodes it with orjson."""
    import tempfile

    import orjson

    from events.ndjson import read_events
    from services.audit.replay import replay

    with tempfile.TemporaryDirectory() as tmp:
        log = path or Path(tmp) / "events.ndjson"
        count = synthetic_log(log, events) if path is None else sum(1 for _ in log.open("rb"))
        started = time.perf_counter()
        with log.open("rb") as handle:
            decoded = sum(1 for line in handle if orjson.loads(line))
        baseline_s = time.perf_counter() - started
        started = time.perf_counter()
        result = replay(read_events(log))
        replay_s = time.perf_counter() - started
    return {
        "events": count,
        "decoded_by_baseline": decoded,
        "charges": result.recorded_count,
        "identical": result.identical,
        "replay_s": round(replay_s, 3),
        "events_per_s": round(count / replay_s),
        "baseline_events_per_s": round(count / baseline_s),
        "ratio": round((count / replay_s) / (count / baseline_s), 4),
    }


def _charging_process(bootstrap: str, prefix: str, done: Any) -> None:
    from events import Topics
    from services.charging.host import ChargingHost

    ChargingHost(bootstrap, Topics(prefix=prefix), snapshot_every_s=3600).run(done.is_set)


def _projector_process(bootstrap: str, prefix: str, database_url: str, done: Any) -> None:
    from sqlalchemy import create_engine

    from events import Topics
    from services.projector.host import run_projector

    run_projector(bootstrap, create_engine(database_url), done.is_set, Topics(prefix=prefix))


def pipeline_benchmark(events: int, kafka: str | None = None) -> dict[str, Any]:
    """End to end through a broker: facts (mostly heartbeats) produced to the topics, the
    charging host folding them into charges, the projector writing those into SQL; timed until
    SQL holds every charge. Baseline: a bare confluent-kafka consume of the same input topics."""
    import multiprocessing
    import tempfile
    import uuid

    from confluent_kafka import Consumer
    from sqlalchemy import create_engine, func, select

    from events import TopicKind, Topics
    from events.models import LedgerCharge
    from events.ndjson import BadLine, read_events
    from services.brokers import external_broker, start_noida
    from services.bus.admin import ensure_topics
    from services.bus.kafka import KafkaEventPublisher
    from services.read_models.migrate import migrate
    from services.read_models.tables import ledger_entries

    with tempfile.TemporaryDirectory() as tmp:
        broker = external_broker(kafka) if kafka else start_noida(Path(tmp) / "broker")
        try:
            topics = Topics(prefix=f"bench{uuid.uuid4().hex[:6]}.")
            ensure_topics(broker.bootstrap, topics)
            log = Path(tmp) / "facts.ndjson"
            synthetic_log(log, events)
            log_items = [e for e in read_events(log) if not isinstance(e, BadLine)]
            facts = [e for e in log_items if not isinstance(e.data, LedgerCharge)]
            expected = len(log_items) - len(facts)
            publisher = KafkaEventPublisher(broker.bootstrap, topics)
            engine = create_engine(f"sqlite:///{Path(tmp) / 'read.db'}")
            migrate(engine)
            # Separate processes, as deployed: the charging host and the projector do not share
            # one interpreter (and its GIL) in production either.
            context = multiprocessing.get_context("spawn")
            done = context.Event()
            database_url = f"sqlite:///{Path(tmp) / 'read.db'}"
            threads = [
                context.Process(
                    target=_charging_process, args=(broker.bootstrap, topics.prefix, done)
                ),
                context.Process(
                    target=_projector_process,
                    args=(broker.bootstrap, topics.prefix, database_url, done),
                ),
            ]
            started = time.perf_counter()
            for thread in threads:
                thread.start()
            for envelope in facts:
                publisher.publish(envelope)
            publisher.flush()
            deadline = time.monotonic() + 600
            while time.monotonic() < deadline:
                with engine.connect() as connection:
                    stored = connection.execute(
                        select(func.count()).select_from(ledger_entries)
                    ).scalar_one()
                if stored >= expected:
                    break
                time.sleep(0.2)
            elapsed = time.perf_counter() - started
            done.set()
            for thread in threads:
                thread.join(30)
                if thread.is_alive():
                    thread.terminate()
            consumer = Consumer(
                {
                    "bootstrap.servers": broker.bootstrap,
                    "group.id": f"bench-bare-{uuid.uuid4().hex}",
                    "auto.offset.reset": "earliest",
                    "enable.auto.commit": False,
                }
            )
            consumer.subscribe(
                [topics.name(TopicKind.WORKLOADS), topics.name(TopicKind.HEARTBEATS)]
            )
            seen = 0
            bare_started = time.perf_counter()
            while seen < len(facts) and time.perf_counter() - bare_started < 300:
                seen += sum(1 for m in consumer.consume(1000, 1.0) if m.error() is None)
            bare = time.perf_counter() - bare_started
            consumer.close()
            publisher.close()
            engine.dispose()
            return {
                "events": len(facts),
                "charges_in_sql": stored,
                "charges_expected": expected,
                "seconds": round(elapsed, 3),
                "events_per_s": round(len(facts) / elapsed),
                "baseline_events_per_s": round(seen / bare),
                "ratio": round((len(facts) / elapsed) / (seen / bare), 4),
                "broker": broker.description,
            }
        finally:
            broker.stop()
