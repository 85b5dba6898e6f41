"""The pure parts of ``fairshare bench latency`` and ``bench idle``: percentiles, the figures of
a run from its sends and event times, /proc parsing, and the bench CLI staying light."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from services.bench.idle import Snapshot, cpu_figures, label, parse_stat, process_tree
from services.bench.latency.bench import LatencyConfig, figures, percentiles
from services.bench.latency.load import OpenLoop, latency_request


def test_percentiles_by_nearest_rank_in_milliseconds() -> None:
    values = [i / 1000 for i in range(1, 101)]  # 1 ms .. 100 ms
    assert percentiles(values) == {"p50": 50.0, "p99": 99.0, "max": 100.0, "count": 100}
    assert percentiles([0.25]) == {"p50": 250.0, "p99": 250.0, "max": 250.0, "count": 1}
    assert percentiles([]) == {"p50": None, "p99": None, "max": None, "count": 0}


def test_enough_gpus_that_nothing_waits_for_one() -> None:
    config = LatencyConfig(rate_per_s=50, job_s=1.0, gpus_per_node=8)
    assert config.nodes * config.gpus_per_node >= 2 * 50 * 4
    assert LatencyConfig(rate_per_s=0.5).nodes == 4
    assert LatencyConfig(rate_per_s=10, duration_s=10).count == 100


def test_requests_are_small_free_one_gpu_jobs_of_every_user() -> None:
    users = set()
    for index in range(6):
        user, body = latency_request(index, "demo", 1.0, "run1")
        users.add(user)
        assert body["gpus"] == 1
        assert body["min_runtime_s"] == 0
        assert body["pools"] == ["demo"]
        assert body["spec"] == {"duration_s": 1.0}
        assert body["workload_id"] == f"lat-run1-{index:06d}"
    assert len(users) == 3


def test_figures_measure_from_the_send_to_each_event_time() -> None:
    load = OpenLoop("http://x", "demo", count=3, rate_per_s=10.0)
    load.sent = {"a": 100.0, "b": 100.1, "c": 100.2}
    load.status = {"a": 201, "b": 201, "c": 201}
    load.answered_s = {"a": 0.05, "b": 0.05, "c": 0.05}
    load.started_at, load.ended_at = 0.0, 0.3
    times = {
        "submitted": {"a": 100.01, "b": 100.11, "c": 100.21},
        "placed": {"a": 100.1, "b": 100.3},  # c: acknowledged, never placed
        "started": {"a": 100.5, "b": 100.6},
    }
    result = figures(load, times)
    assert result["count"] == 3
    assert result["acknowledged"] == 3
    assert result["rate_achieved_per_s"] == 10.0
    assert result["placed_ms"] == {"p50": 100.0, "p99": 200.0, "max": 200.0, "count": 2}
    assert result["started_ms"]["p50"] == 500.0
    assert result["hops_ms"]["agent"]["p50"] == 300.0
    assert result["lost"] == 1
    assert result["lost_ids"] == ["c"]
    assert result["not_started"] == 1


def test_parse_stat_takes_comm_with_spaces_and_parentheses() -> None:
    fields = " ".join(str(n) for n in range(3, 53))  # fields 3.. (state first)
    stat = parse_stat(f"4242 (rdk:broker (1) x) {fields}")
    assert stat.pid == 4242
    assert stat.comm == "rdk:broker (1) x"
    assert stat.ppid == 4
    assert stat.ticks == 14 + 15


def test_cpu_figures_of_this_process_and_a_child() -> None:
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        root = os.getpid()
        tree = process_tree(root)
        assert child.pid in tree
        assert label(child.pid) == Path(sys.executable).name
        before = Snapshot(0.0, tree, {})
        after = Snapshot(2.0, tree, {})
        shown = cpu_figures(root, before, after, {root: "me"}, clock_ticks=100)
        assert shown["window_s"] == 2.0
        assert {p["pid"] for p in shown["processes"]} >= {root, child.pid}
        assert all(p["cpu_pct"] == 0 for p in shown["processes"])
    finally:
        child.kill()
        child.wait()


@pytest.mark.parametrize("module", ["services.bench.cli"])
def test_the_bench_cli_imports_no_heavy_library(module: str) -> None:
    code = (
        f"import sys, {module}\n"
        "heavy = {'sqlalchemy', 'fastapi', 'confluent_kafka', 'projections', 'httpx', 'orjson'}\n"
        "print(sorted(m for m in heavy if m in sys.modules))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"
