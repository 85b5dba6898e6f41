"""``fairshare bench scheduler``: the scheduler's speed, as figures (never a pass/fail test).

* ``replay_wall_s``: the Philly trace (256 GPUs) replayed through the fair-share core, with the
  FIFO baseline replayed in the same run for a ratio;
* ``full_pass_s``: one pass over an empty synthetic cluster (default 10,000 nodes x 8 GPUs,
  100,000 pending workloads, 500 leaf budgets in a 4-level tree), placing until it is full;
* ``incremental_pass_p50_ms`` / ``_p99_ms``: the pass after one event (a workload ends) on that
  full cluster.

Passes run with the cyclic GC paused, as the scheduler service and the simulator run them
(services/runtime/gc_pause.py).
"""

from __future__ import annotations

import gc
import random
import statistics
import time
from pathlib import Path
from typing import Any

from events.models import WorkloadFinished, WorkloadStarted
from projections.budget_tree import BudgetTree
from projections.cluster_state import ClusterState
from scheduling.baselines import baseline_policy
from scheduling.memos import PassMemos
from scheduling.scheduling_pass import PassContext, run_pass
from services.bench.fixtures import BENCH_POOL, synthetic_cluster
from services.runtime.gc_pause import gc_paused
from services.simulator.engine import Simulation, SimulationConfig
from services.simulator.trace import DEVELOPMENT_TRACES, load_budgets, load_trace


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
    # One set of memos for every pass, as the scheduler service keeps: the incremental figures
    # are warm passes, the first one is cold.
    memos = PassMemos()
    started = time.perf_counter()
    with gc_paused():
        full = run_pass(cluster, tree, lambda _pool: usage, PassContext(now=now, pass_id=1), memos)
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
    timings = _incremental_passes(cluster, tree, usage, now, trials, memos)
    result.update(
        {
            "incremental_pass_p50_ms": round(statistics.median(timings), 3),
            "incremental_pass_p99_ms": round(_percentile(timings, 0.99), 3),
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


def _incremental_passes(
    cluster: ClusterState,
    tree: BudgetTree,
    usage: dict[str, float],
    now: float,
    trials: int,
    memos: PassMemos,
) -> list[float]:
    """Milliseconds of each pass after one running workload (chosen at random) ends."""
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
            ctx = PassContext(now=now, pass_id=2 + trial)
            run_pass(cluster, tree, lambda _pool: usage, ctx, memos)
        timings.append((time.perf_counter() - started) * 1000)
    return timings


def _percentile(values: list[float], q: float) -> float:
    """The nearest-rank percentile (of 50 trials, p99 is the largest but none)."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * len(ordered)) - 1))]
