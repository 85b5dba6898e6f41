"""Time limits and start estimates in the simulator: the limit a traced job asks for (its
trace's, else the stated rule), a run stopped at it, and how far the estimates made at
submission were off, measured with the very function the API answers with."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from scheduling.scheduling_pass import run_pass
from services.simulator.engine import Simulation, SimulationConfig, SimulationOutcome
from services.simulator.estimates import StartEstimates
from services.simulator.limits import TimeLimitRule
from services.simulator.metrics import compute_metrics
from services.simulator.trace import TraceError, TraceJob, load_trace

T0 = 1_505_000_000.0
WEIGHTS = {"a": 1.0, "b": 1.0}


def job(name: str, at: float, duration: float, gpus: int, budget: str, **kw: Any) -> TraceJob:
    return TraceJob(name, T0 + at, duration, gpus, budget, **kw)


def simulate(jobs: list[TraceJob], every: int = 1) -> SimulationOutcome:
    """The jobs on one node of 8 GPUs, until a last 1-s job two days later (the replay stops
    at the last arrival)."""
    last = job("zz-last", 2 * 86400, 1, 1, "b")
    return Simulation(
        sorted([*jobs, last], key=lambda j: (j.arrival, j.job_id)),
        WEIGHTS,
        SimulationConfig(gpus=8),
        run_pass,
        start_estimates=StartEstimates(every),
    ).run()


def test_the_rule_asks_for_the_duration_with_headroom_in_quarter_hours() -> None:
    rule = TimeLimitRule()
    assert rule.limit_s(job("j", 0, 60, 1, "a")) == 900
    assert rule.limit_s(job("j", 0, 3600, 1, "a")) == 4500  # 1.25 h
    assert rule.limit_s(job("j", 0, 3600, 1, "a", time_limit_s=600.5)) == 601  # the trace's
    assert "1.25" in rule.describe()


def test_a_trace_column_gives_the_limit(tmp_path: Path) -> None:
    trace = tmp_path / "t.csv"
    trace.write_text(
        "timestamp,duration,num_gpus,cluster,time_limit_s\n"
        "2017-10-01 00:00:00,100,1,a,3600\n"
        "2017-10-01 00:00:01,100,1,a,\n"
    )
    jobs = load_trace(trace)
    assert [j.time_limit_s for j in jobs] == [3600.0, None]
    trace.write_text("timestamp,duration,num_gpus,cluster,time_limit_s\n2017-10-01,1,1,a,x\n")
    with pytest.raises(TraceError, match="time_limit_s"):
        load_trace(trace)


def test_a_run_past_its_limit_is_stopped_there_and_fails() -> None:
    outcome = simulate(
        [job("long", 0, 7200, 8, "a", time_limit_s=3600), job("next", 1, 60, 8, "b")]
    )
    long, after = outcome.runs["long"], outcome.runs["next"]
    assert long.time_limited
    assert long.finished_at == T0 + 3600
    assert after.first_start == T0 + 3600
    assert compute_metrics(outcome)["overall"]["time_limited_runs"] == 1


def test_estimates_on_one_full_node_in_fifo_order_are_exact() -> None:
    # 8 GPUs; each job takes the node and runs its whole limit (the trace's, equal to its
    # duration), so the forward run is what happens.
    jobs = [job(f"j{i}", i, 1000 + 100 * i, 8, "a", time_limit_s=1000 + 100 * i) for i in range(4)]
    outcome = simulate(jobs)
    overall = compute_metrics(outcome)["overall"]
    assert overall["start_estimates"] == 5
    assert overall["start_estimate_error_p50_s"] == 0
    assert overall["start_estimate_error_p90_s"] == 0
    assert outcome.start_estimates is not None
    assert outcome.start_estimates.made["j3"] == T0 + 1000 + 1100 + 1200


def test_the_figures_are_deterministic_and_a_sample_is_every_nth_job() -> None:
    jobs = [
        job(f"j{i:02d}", 37 * i, 300 + (i * 811) % 5000, 1 + i % 8, "ab"[i % 2]) for i in range(30)
    ]
    first = compute_metrics(simulate(jobs))["overall"]
    again = compute_metrics(simulate(jobs))["overall"]
    keys = [k for k in first if k.startswith("start_estimate") and not k.endswith("wall_s")]
    assert {k: first[k] for k in keys} == {k: again[k] for k in keys}
    assert first["start_estimates"] == 31
    assert first["start_estimate_error_p50_s"] <= first["start_estimate_error_p90_s"]
    sampled = simulate(jobs, every=7)
    assert sampled.start_estimates is not None
    assert sorted(sampled.start_estimates.made) == ["j00", "j07", "j14", "j21", "j28"]


def test_a_run_without_estimates_reports_none() -> None:
    outcome = Simulation(
        [job("j", 0, 10, 1, "a")], WEIGHTS, SimulationConfig(gpus=8), run_pass
    ).run()
    assert "start_estimate_error_p50_s" not in compute_metrics(outcome)["overall"]
