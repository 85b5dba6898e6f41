"""The preemption cost model of the simulator: a preempted job keeps only what it checkpointed
and pays a restart, worked out by hand on one small cluster, then as properties of random
traces (goodput <= 1, work conserved, loss per preemption bounded, determinism)."""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from scheduling.churn import ChurnControl
from scheduling.scheduling_pass import run_pass
from services.simulator.engine import Simulation, SimulationConfig, SimulationOutcome
from services.simulator.maintenance import MaintenanceConfig
from services.simulator.metrics import compute_metrics
from services.simulator.preemption_cost import (
    CHECKPOINT_EVERY_KEY,
    RESTART_OVERHEAD_KEY,
    PreemptionCost,
    at_risk,
    last_checkpoint_at,
)
from services.simulator.trace import TraceJob

T0 = 1_505_000_000.0
WEIGHTS = {"a": 1.0, "b": 1.0, "c": 2.0}


def simulate(
    jobs: list[TraceJob], config: SimulationConfig, weights: dict[str, float] = WEIGHTS
) -> SimulationOutcome:
    return Simulation(
        sorted(jobs, key=lambda j: (j.arrival, j.job_id)), weights, config, run_pass
    ).run()


def job(name: str, at: float, duration: float, gpus: int, budget: str, **kw: Any) -> TraceJob:
    return TraceJob(name, T0 + at, duration, gpus, budget, **kw)


# -- the rule --------------------------------------------------------------------------------


def test_a_stop_keeps_progress_up_to_the_last_checkpoint_and_wastes_the_restart() -> None:
    cost = PreemptionCost(checkpoint_every_s=1800, restart_overhead_s=180)
    first_run = at_risk(cost, ran_s=7830, overhead_s=0)
    assert (first_run.kept_s, first_run.discarded_s, first_run.restart_s) == (7200, 630, 0)
    resumed = at_risk(cost, ran_s=2000, overhead_s=180)
    assert (resumed.kept_s, resumed.discarded_s, resumed.restart_s) == (1800, 20, 180)
    inside_restart = at_risk(cost, ran_s=100, overhead_s=180)
    assert (inside_restart.kept_s, inside_restart.wasted_s) == (0, 100)


def test_never_checkpointing_or_not_resuming_loses_everything_and_free_keeps_everything() -> None:
    never = at_risk(PreemptionCost(checkpoint_every_s=0), ran_s=5000, overhead_s=180)
    assert (never.kept_s, never.discarded_s, never.restart_s) == (0, 4820, 180)
    fatal = at_risk(PreemptionCost(), ran_s=5000, overhead_s=0, resumable=False)
    assert (fatal.kept_s, fatal.discarded_s) == (0, 5000)
    free = at_risk(PreemptionCost(enabled=False), ran_s=5000, overhead_s=0)
    assert (free.kept_s, free.wasted_s) == (5000, 0)


def test_the_last_checkpoint_is_the_run_start_until_the_first_one() -> None:
    cost = PreemptionCost(checkpoint_every_s=600, restart_overhead_s=60)
    assert last_checkpoint_at(cost, started_at=1000, now=1500, overhead_s=60) == 1000
    assert last_checkpoint_at(cost, started_at=1000, now=2300, overhead_s=60) == 1000 + 60 + 1200


# -- one preemption, by hand -------------------------------------------------------------------
#
# One node of 8 GPUs. Budget a's 10-hour gang runs from 0; budget b (no usage yet) submits a
# 1-hour gang at 1 h 10 min. b is owed GPUs, but a cannot give 8 and keep its entitlement, so
# b's gang waits until it starves (an hour), at 2 h 10 min, and then preempts a's gang (past its
# 1-hour contract, far ahead of it in usage). The gang stops 30 s later, having run 7,830 s:
# 7,200 s are checkpointed, 630 s are lost. b's gang runs 7,830-11,430; a's gang resumes then,
# pays its 180 s restart and needs 28,800 s more. The policy's waste margin is off here, so the
# preemption comes at the same time whatever it costs: these tests are about the cost.


def _preemption_scenario(cost: PreemptionCost, **kw: Any) -> SimulationOutcome:
    jobs = [
        job("a-long", 0, 36_000, 8, "a", **kw),
        job("b-short", 4_200, 3_600, 8, "b"),
        job("sentinel", 100_000, 60, 1, "b"),  # the period ends at the last arrival
    ]
    churn = ChurnControl(margin_per_wasted_gpu_hour=0.0)
    return simulate(jobs, SimulationConfig(gpus=8, gpus_per_node=8, cost=cost, churn=churn))


def test_a_preempted_job_resumes_from_its_checkpoint_after_a_restart() -> None:
    outcome = _preemption_scenario(PreemptionCost(checkpoint_every_s=1800, restart_overhead_s=180))
    run = outcome.runs["a-long"]
    assert [(i.workload_id, i.ran_s) for i in outcome.interruptions] == [("a-long", 7_830)]
    assert (run.discarded_s, run.restart_s) == (630, 180)
    assert run.finished_at == T0 + 11_430 + 180 + 28_800
    metrics = compute_metrics(outcome)["overall"]
    assert math.isclose(metrics["lost_gpu_hours"], 8 * (630 + 180) / 3600)
    assert math.isclose(metrics["restart_gpu_hours"], 8 * 180 / 3600)
    assert metrics["max_preemptions_of_a_job"] == 1
    assert 0 < metrics["goodput"] < 1


def test_the_free_model_keeps_every_second_and_never_checkpointing_starts_over() -> None:
    free = _preemption_scenario(PreemptionCost(enabled=False)).runs["a-long"]
    assert free.finished_at == T0 + 11_430 + (36_000 - 7_830)
    assert (free.discarded_s, free.restart_s) == (0, 0)
    never = _preemption_scenario(PreemptionCost(checkpoint_every_s=0, restart_overhead_s=180))
    assert never.runs["a-long"].finished_at == T0 + 11_430 + 180 + 36_000


def test_a_job_that_cannot_resume_loses_all_it_did_and_leaves_the_queue() -> None:
    outcome = _preemption_scenario(PreemptionCost(), resumable=False)
    run = outcome.runs["a-long"]
    assert run.finished_at is None
    assert run.discarded_s == 7_830
    assert outcome.demand["a"], "its demand was counted while it ran"


def test_the_workload_declares_its_checkpoints_for_the_policy_to_see() -> None:
    config = SimulationConfig(gpus=8, gpus_per_node=8)
    sim = Simulation(
        [job("x", 0, 600, 1, "a"), job("y", 900, 60, 1, "a")], WEIGHTS, config, run_pass
    )
    sim.run()
    spec = sim.cluster.workloads["x"].spec
    assert (spec[CHECKPOINT_EVERY_KEY], spec[RESTART_OVERHEAD_KEY]) == (1800, 180)
    free = replace(config, cost=PreemptionCost(enabled=False))
    sim = Simulation([job("x", 0, 600, 1, "a"), job("y", 900, 60, 1, "a")], WEIGHTS, free, run_pass)
    sim.run()
    assert CHECKPOINT_EVERY_KEY not in sim.cluster.workloads["x"].spec


# -- properties on random traces -------------------------------------------------------------

jobs_strategy = st.lists(
    st.tuples(
        st.integers(0, 30_000),  # arrival
        st.integers(60, 40_000),  # duration
        st.sampled_from([1, 2, 4, 8]),
        st.sampled_from(sorted(WEIGHTS)),
        st.booleans(),  # resumable (mostly)
    ),
    min_size=2,
    max_size=14,
)


def _trace(rows: list[tuple[int, int, int, str, bool]]) -> list[TraceJob]:
    jobs = [
        job(f"j{i:02d}", at, duration, gpus, budget, resumable=resumable or i % 4 != 0)
        for i, (at, duration, gpus, budget, resumable) in enumerate(rows)
    ]
    return [*jobs, job("sentinel", 80_000, 60, 1, "a")]


@settings(max_examples=40, deadline=None)
@given(
    rows=jobs_strategy,
    every=st.sampled_from([300, 1800, 3600]),
    restart=st.integers(0, 900),
    maintenance_seed=st.one_of(st.none(), st.integers(0, 10)),
)
def test_lost_work_is_bounded_per_preemption_and_work_is_conserved(
    rows: list[tuple[int, int, int, str, bool]],
    every: int,
    restart: int,
    maintenance_seed: int | None,
) -> None:
    cost = PreemptionCost(checkpoint_every_s=every, restart_overhead_s=restart)
    maintenance = (
        MaintenanceConfig()
        if maintenance_seed is None
        else MaintenanceConfig(rate=0.5, seed=maintenance_seed, repair_s=3600, stuck_after_s=7200)
    )
    config = SimulationConfig(gpus=16, gpus_per_node=8, cost=cost, maintenance=maintenance)
    outcome = simulate(_trace(rows), config)
    overall = compute_metrics(outcome)["overall"]
    assert 0.0 <= overall["goodput"] <= 1.0
    assert overall["lost_gpu_hours"] <= overall["busy_gpu_hours"] + 1e-9
    stops: dict[str, int] = {}
    for interruption in outcome.interruptions:
        stops[interruption.workload_id] = stops.get(interruption.workload_id, 0) + 1
        assert interruption.loss.restart_s <= restart
        if outcome.runs[interruption.workload_id].job.resumable:
            assert interruption.loss.discarded_s < every
            assert interruption.loss.wasted_s <= every + restart
    for job_id, run in outcome.runs.items():
        if run.job.resumable:
            # No job loses more than C plus R per preemption (or loss of its node).
            assert run.discarded_s + run.restart_s <= stops.get(job_id, 0) * (every + restart)
        if run.finished_at is not None:
            # Every second held was useful work, thrown-away work or a restart.
            assert math.isclose(
                run.busy_s, run.job.duration + run.discarded_s + run.restart_s, abs_tol=1e-6
            )


@settings(max_examples=15, deadline=None)
@given(rows=jobs_strategy, seed=st.integers(0, 1000))
def test_a_run_is_a_function_of_the_trace_the_config_and_the_seed(
    rows: list[tuple[int, int, int, str, bool]], seed: int
) -> None:
    maintenance = MaintenanceConfig(rate=0.5, seed=seed, repair_s=3600)
    config = SimulationConfig(gpus=16, gpus_per_node=8, maintenance=maintenance)
    first, second = (compute_metrics(simulate(_trace(rows), config)) for _ in range(2))
    for result in (first, second):
        result["overall"].pop("wall_seconds")
    assert first == second
