"""Synthetic inputs of the benchmarks: a budget tree, a full cluster with its queue, and an
event log with its charges. Seeded, so every run measures the same work."""

from __future__ import annotations

import math
import random
from pathlib import Path

from events.models import (
    EventData,
    GpuHeartbeat,
    GpuReading,
    NodeGpus,
    NodeRegistered,
    Placement,
    WorkloadFinished,
    WorkloadStarted,
    WorkloadSubmitted,
)
from projections.budget_tree import BudgetTree
from projections.cluster_state import ClusterState

BENCH_POOL = "bench"


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


def synthetic_log(path: Path, events: int, seed: int = 5) -> int:
    """Write a log of about ``events`` events: workloads that start, send hourly heartbeats and
    finish, with the charges the ledger fold posts for them, in log order."""
    from datetime import UTC, datetime

    from events.envelope import derived_event_id, new_event
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
            for data, at in _workload_life(rng, workload, t0):
                emit(data, at)
    return written


def _workload_life(rng: random.Random, workload: int, t0: int) -> list[tuple[EventData, int]]:
    """One workload's facts, each with its epoch second: submitted, started, hourly
    heartbeats, finished."""
    wid, node = f"w{workload:07d}", f"n{workload % 5000:04d}"
    gpus = rng.choice((1, 1, 2, 4, 8))
    start = t0 + rng.randint(0, 3600 * 24)
    hours = rng.randint(1, 12)
    facts: list[tuple[EventData, int]] = []
    submitted = WorkloadSubmitted.model_construct(
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
    )
    facts.append((submitted, start - 5))
    placement = Placement(nodes=(NodeGpus(node=node, gpus=tuple(range(gpus))),))
    started = WorkloadStarted.model_construct(
        workload_id=wid, attempt=1, pool="bench", placement=placement, allocated=True
    )
    facts.append((started, start))
    for hour in range(1, hours + 1):
        readings = tuple(
            GpuReading(
                index=i,
                occupant=wid,
                attempt=1,
                utilisation_pct=95.0,
                memory_used_bytes=1 << 30,
            )
            for i in range(gpus)
        )
        heartbeat = GpuHeartbeat(node=node, cluster="bench", sequence=hour, gpus=readings)
        facts.append((heartbeat, start + hour * 3600 - 1))
    finished = WorkloadFinished.model_construct(
        workload_id=wid, attempt=1, outcome="succeeded", exit_code=0, message=""
    )
    facts.append((finished, start + hours * 3600))
    return facts
