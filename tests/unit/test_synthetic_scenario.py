"""The synthetic big-gang scenario (services/simulator/synthetic.py): what the generator
promises, and, over generated scenarios, what fair share must keep where the unit of work is
large (issue 25): no contract broken, no job preempted more than the bound, and no team that
was owed at least one run of its smallest gang left with nothing."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from events.times import DAY, HOUR
from scheduling.churn import MAX_PREEMPTIONS
from services.simulator.engine import Simulation, SimulationConfig
from services.simulator.metrics import compute_metrics
from services.simulator.runner import policy_named
from services.simulator.synthetic import GANG_SIZES, SyntheticScenario, generate


def test_the_same_seed_gives_the_same_jobs_and_another_seed_others() -> None:
    first, weights = generate(SyntheticScenario(gpus=64, days=2, seed=3))
    again, weights_again = generate(SyntheticScenario(gpus=64, days=2, seed=3))
    other, _ = generate(SyntheticScenario(gpus=64, days=2, seed=4))
    assert first == again
    assert weights == weights_again
    assert first != other


def test_the_scenario_is_what_it_says() -> None:
    scenario = SyntheticScenario()
    jobs, weights = generate(scenario)
    capacity_gpu_s = scenario.gpus * scenario.days * DAY
    asked = sum(j.gpus * j.duration for j in jobs)
    assert 0.85 * scenario.demand < asked / capacity_gpu_s < 1.15 * scenario.demand
    gangs = sum(j.gpus * j.duration for j in jobs if j.budget.startswith("g"))
    assert abs(gangs / asked - scenario.gang_fraction) < 0.1
    sizes: dict[str, set[int]] = {}
    for job in jobs:
        sizes.setdefault(job.budget, set()).add(job.gpus)
        assert job.arrival < jobs[0].arrival + scenario.days * DAY + HOUR
    for budget, seen in sizes.items():
        if budget.startswith("g"):
            assert len(seen) == 1, f"{budget}: one gang size per gang tenant"
            assert seen <= {s for s, _ in GANG_SIZES}
        else:
            assert max(seen) <= 8
    assert set(weights) == set(sizes)
    assert min(weights.values()) >= 1
    # many gang tenants are owed less in a week than one run of their gang costs
    capacity_week = scenario.gpus * 7 * 24
    small = [
        b
        for b, w in weights.items()
        if b.startswith("g") and w / sum(weights.values()) * capacity_week < min(sizes[b]) * 12
    ]
    assert len(small) >= 10


def test_a_bad_scenario_is_refused() -> None:
    with pytest.raises(ValueError, match="multiple of gpus_per_node"):
        SyntheticScenario(gpus=30)
    with pytest.raises(ValueError, match="at least one tenant"):
        SyntheticScenario(gang_tenants=0, small_tenants=0)


# Three days of a 64-GPU cluster per example (about 15 s each): with the slow scenarios.
@pytest.mark.slow
@settings(
    max_examples=3, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow]
)
@given(st.integers(0, 10_000))
def test_fair_share_keeps_its_promises_where_the_unit_of_work_is_large(seed: int) -> None:
    scenario = SyntheticScenario(gpus=64, days=3, gang_tenants=10, small_tenants=4, seed=seed)
    jobs, weights = generate(scenario)
    outcome = Simulation(
        jobs, weights, SimulationConfig(gpus=scenario.gpus), policy_named("fairshare")
    ).run()
    metrics = compute_metrics(outcome)
    overall = metrics["overall"]
    assert overall["contract_violations"] == 0
    assert overall["max_preemptions_of_a_job"] <= MAX_PREEMPTIONS
    smallest: dict[str, int] = {}
    for job in jobs:
        smallest[job.budget] = min(smallest.get(job.budget, job.gpus), job.gpus)
    starved = [
        (budget, figures["owed_gpu_hours"])
        for budget, figures in metrics["budgets"].items()
        if figures["owed_gpu_hours"] >= smallest[budget] and figures["delivered_gpu_hours"] == 0
    ]
    assert starved == [], "owed at least one run of its smallest gang (an hour), given nothing"
