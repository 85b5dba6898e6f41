"""``fairshare simulate`` and ``fairshare bench scheduler`` as a user runs them, on a slice of
the real Philly trace (the full replay is a benchmark, not a test)."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from services.simulator.trace import DEVELOPMENT_TRACES as TRACES
from tests.processes import run_fairshare


def _slice(tmp_path: Path, rows: int) -> Path:
    lines = (TRACES / "philly-2017-09.csv").read_text().splitlines()[: rows + 1]
    path = tmp_path / "slice.csv"
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.mark.slow  # 12 s; the big-gang scenario below keeps `simulate` in the default run
def test_simulate_writes_metrics_for_every_policy_and_plots(tmp_path: Path) -> None:
    out = tmp_path / "out"
    result = run_fairshare(
        "simulate",
        "--trace",
        str(_slice(tmp_path, 1500)),
        "--budgets",
        str(TRACES / "philly-budgets.csv"),
        "--gpus",
        "64",
        "--policy",
        "all",
        "--out",
        str(out),
        "--maintenance",
        "0.05",
        "--seed",
        "3",
        timeout=600,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    # piped (not a terminal): the tables are whole, no cell cut to "…"
    assert "…" not in result.stdout, result.stdout
    metrics = orjson.loads((out / "metrics.json").read_bytes())
    assert set(metrics["policies"]) == {"fairshare", "fifo", "priority", "quota", "slurm-classic"}
    for name, policy in metrics["policies"].items():
        overall = policy["overall"]
        for key in (
            "owed_delivered",
            "owed_delivered_hourly",
            "occupancy_over_demand",
            "debug_wait_p50_s",
            "debug_wait_p90_s",
            "wait_p50_s",
            "wait_p90_s",
            "preemptions_per_1000_gpu_hours",
            "contract_violations",
            "jobs",
            "wall_seconds",
            "owed_delivered_weekly",
            "worst_budget_week",
            "weekly_violations",
            "lost_gpu_hours",
            "goodput",
            "preemptions_per_job_p99",
            "max_preemptions_of_a_job",
            "drain_p50_s",
            "drain_p90_s",
            "stuck_drains",
        ):
            assert key in overall, (name, key)
        assert overall["jobs"] == 1500
        assert overall["contract_violations"] == 0, name
        assert 0.0 <= overall["owed_delivered"] <= 1.0
        assert 0.0 <= overall["owed_delivered_weekly"] <= 1.0
        assert 0.0 < overall["goodput"] <= 1.0
        for row in policy["budgets"].values():
            assert {"owed_delivered", "owed_gpu_hours", "delivered_gpu_hours", "weekly"} <= set(row)
    # The same seed sends the same nodes for repair at the same times under every policy.
    repairs = {
        p["overall"]["repairs"] + p["overall"]["repairs_merged"]
        for p in metrics["policies"].values()
    }
    assert len(repairs) == 1
    assert repairs.pop() > 0
    fair = metrics["policies"]["fairshare"]["overall"]
    assert fair["preemptions"] > 0
    assert fair["lost_gpu_hours"] > 0, "preemption is not free"
    baselines = [metrics["policies"][n]["overall"]["preemptions"] for n in ("fifo", "quota")]
    drains = [metrics["policies"][n]["overall"]["drain_preemptions"] for n in ("fifo", "quota")]
    assert baselines == drains, "baselines preempt only to drain nodes for repair"
    assert metrics["config"]["cost"]["checkpoint_every_s"] == 1800
    plots = ("owed_vs_delivered", "attainment_by_policy", "occupancy", "wait_cdf")
    for plot in (*plots, "preemption_cost", "maintenance"):
        assert (out / f"{plot}.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    for table in ("policies side by side", "what preemption cost", "maintenance"):
        assert table in result.stdout


def test_simulate_refuses_bad_input_clearly(tmp_path: Path) -> None:
    bad = tmp_path / "bad.csv"
    bad.write_text("timestamp,duration,num_gpus,gpu_time,cluster\n2017-09-04 10:30:41,-5,1,1,x\n")
    result = run_fairshare(
        "simulate",
        "--trace",
        str(bad),
        "--budgets",
        str(TRACES / "philly-budgets.csv"),
        "--gpus",
        "8",
        "--out",
        str(tmp_path / "o"),
        timeout=120,
    )
    assert result.returncode == 2
    assert "bad.csv:2: duration must be > 0" in result.stderr


def test_bench_scheduler_prints_one_json_object_with_its_figures(tmp_path: Path) -> None:
    result = run_fairshare(
        "bench",
        "scheduler",
        "--trace",
        str(_slice(tmp_path, 300)),
        "--nodes",
        "50",
        "--pending",
        "500",
        "--budgets-count",
        "20",
        "--trials",
        "5",
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    figures = orjson.loads(result.stdout)
    for key in (
        "replay_wall_s",
        "full_pass_s",
        "incremental_pass_p50_ms",
        "baseline_fifo_replay_wall_s",
        "synthetic_nodes",
        "synthetic_pending",
    ):
        assert key in figures
    assert figures["synthetic_leaf_budgets"] == 20
    assert figures["full_pass_placements"] > 0


def test_simulate_runs_the_synthetic_big_gang_scenario(tmp_path: Path) -> None:
    out = tmp_path / "out"
    result = run_fairshare(
        "simulate",
        "--synthetic",
        "--synthetic-days",
        "1",
        "--gpus",
        "64",
        "--policy",
        "fairshare",
        "--no-plots",
        "--out",
        str(out),
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    assert "synthetic (seed 0)" in result.stdout
    metrics = orjson.loads((out / "metrics.json").read_bytes())
    overall = metrics["policies"]["fairshare"]["overall"]
    assert overall["jobs"] > 100
    assert overall["contract_violations"] == 0
    both = run_fairshare(
        "simulate", "--synthetic", "--trace", "x.csv", "--out", str(tmp_path / "o"), timeout=120
    )
    assert both.returncode == 2
    assert "--synthetic replaces --trace and --budgets" in both.stderr
