"""The maintenance scenario: repair requests drawn from a seed, nodes drained (or stuck) and
repaired, and what that costs the work that was on them."""

from __future__ import annotations

import math

from hypothesis import given, settings
from hypothesis import strategies as st

from scheduling.scheduling_pass import run_pass
from services.simulator.engine import Simulation, SimulationConfig, SimulationOutcome
from services.simulator.maintenance import DAY, MaintenanceConfig, repair_requests
from services.simulator.metrics import compute_metrics
from services.simulator.trace import ContractRule, TraceJob

T0 = 1_505_000_000.0
NODES = [f"node-{i:04d}" for i in range(10)]


@settings(max_examples=30, deadline=None)
@given(
    seed=st.integers(0, 2**32),
    rate=st.floats(0.001, 1.0),
    days=st.floats(0.1, 60),
)
def test_requests_fall_inside_the_period_in_order_and_depend_only_on_the_seed(
    seed: int, rate: float, days: float
) -> None:
    config = MaintenanceConfig(rate=rate, seed=seed)
    requests = repair_requests(config, NODES, T0, T0 + days * DAY)
    assert requests == repair_requests(config, NODES, T0, T0 + days * DAY)
    assert [at for at, _ in requests] == sorted(at for at, _ in requests)
    assert all(T0 <= at < T0 + days * DAY and node in NODES for at, node in requests)


def test_the_rate_is_a_fraction_of_the_nodes_per_day_and_the_seed_moves_the_requests() -> None:
    config = MaintenanceConfig(rate=0.1, seed=7)
    requests = repair_requests(config, NODES, T0, T0 + 1000 * DAY)
    expected = 0.1 * len(NODES) * 1000  # 1,000 requests; a Poisson count's sd is about 32
    assert abs(len(requests) - expected) < 4 * math.sqrt(expected)
    assert len({node for _, node in requests}) == len(NODES)
    other = repair_requests(MaintenanceConfig(rate=0.1, seed=8), NODES, T0, T0 + 1000 * DAY)
    assert other[:5] != requests[:5]
    assert repair_requests(MaintenanceConfig(), NODES, T0, T0 + 1000 * DAY) == []


def _one_node(contract: ContractRule, request_at: float) -> SimulationOutcome:
    """One node of 8 GPUs running a 20-hour gang from 0; the node is sent for repair."""
    jobs = [
        TraceJob("gang", T0, 72_000, 8, "a"),
        TraceJob("sentinel", T0 + 100_000, 60, 1, "a"),  # the period ends at the last arrival
    ]
    maintenance = MaintenanceConfig(requests=((T0 + request_at, "node-0000"),), repair_s=4 * 3600)
    config = SimulationConfig(gpus=8, gpus_per_node=8, contract=contract, maintenance=maintenance)
    return Simulation(jobs, {"a": 1.0}, config, run_pass).run()


def test_a_cordoned_node_drains_when_the_contract_ends_then_is_repaired() -> None:
    # Cordoned at 600 s; the gang's 1-hour contract ends at 3,600 s, it is preempted with
    # reason drain and exits 30 s later; the node is down 4 h, and the gang resumes when it is
    # back, having kept its two checkpoints and paying its restart.
    outcome = _one_node(ContractRule(), request_at=600)
    [drain] = outcome.drains
    assert (drain.drained_at, drain.stuck) == (T0 + 3_630, False)
    assert [p.reason for p in outcome.preemptions] == ["drain"]
    gang = outcome.runs["gang"]
    assert (gang.discarded_s, gang.restart_s) == (30, 180)
    assert gang.finished_at == T0 + 3_630 + 4 * 3600 + 180 + (72_000 - 3_600)
    figures = compute_metrics(outcome)["overall"]
    assert (figures["repairs"], figures["stuck_drains"], figures["drain_preemptions"]) == (1, 0, 1)
    assert figures["drain_p50_s"] == figures["drain_p90_s"] == 3_030


def test_a_drain_held_up_past_the_cap_is_stuck_and_the_work_on_it_is_lost() -> None:
    # A 9-hour contract cannot be drained: 8 h after the cordon at 600 s, the node is taken down
    # with the gang on it. It has run 29,400 s and keeps 16 checkpoints of 30 min (28,800 s).
    outcome = _one_node(ContractRule(cap_s=9 * 3600), request_at=600)
    [drain] = outcome.drains
    assert (drain.drained_at, drain.stuck, drain.down_at) == (None, True, T0 + 29_400)
    assert [(i.cause, i.ran_s) for i in outcome.interruptions] == [("lost", 29_400)]
    assert outcome.preemptions == []
    gang = outcome.runs["gang"]
    assert gang.discarded_s == 600
    assert gang.finished_at == T0 + 29_400 + 4 * 3600 + 180 + (72_000 - 28_800)
    figures = compute_metrics(outcome)["overall"]
    assert (figures["stuck_drains"], figures["runs_lost"]) == (1, 1)
    assert figures["drain_p90_s"] == 8 * 3600


def test_a_request_for_a_node_already_in_repair_is_merged_into_it() -> None:
    jobs = [TraceJob("x", T0, 600, 1, "a"), TraceJob("end", T0 + 50_000, 60, 1, "a")]
    requests = ((T0 + 100, "node-0000"), (T0 + 200, "node-0000"), (T0 + 30_000, "node-0000"))
    config = SimulationConfig(
        gpus=16, gpus_per_node=8, maintenance=MaintenanceConfig(requests=requests)
    )
    outcome = Simulation(jobs, {"a": 1.0}, config, run_pass).run()
    assert (len(outcome.drains), outcome.repairs_merged) == (2, 1)
    assert all(d.drained_at is not None for d in outcome.drains)


@settings(max_examples=25, deadline=None)
@given(
    jobs=st.lists(
        st.tuples(
            st.floats(0, 20_000),  # arrival, seconds after T0
            st.integers(60, 60_000),  # duration
            st.sampled_from([1, 2, 4, 8, 16]),  # GPUs
            st.sampled_from(["a", "b", "c"]),  # budget
        ),
        min_size=1,
        max_size=40,
    ),
    requests=st.lists(st.tuples(st.floats(0, 20_000), st.integers(0, 2)), min_size=1, max_size=6),
    bound=st.integers(1, 2),
)
def test_every_drain_ends_within_the_longest_contract_whatever_the_churn(
    jobs: list[tuple[float, int, int, str]], requests: list[tuple[float, int]], bound: int
) -> None:
    """A cordoned node takes no new work and everything on it is stopped once its contract is
    over (at most 1 h under the trace's contract rule), even a job the policy may no longer
    preempt: no drain waits longer than a contract and the grace period, none is stuck."""
    from scheduling.churn import ChurnControl

    trace = [
        TraceJob(f"j{i}", T0 + at, duration, gpus, budget)
        for i, (at, duration, gpus, budget) in enumerate(sorted(jobs))
    ]
    trace.append(TraceJob("end", T0 + 60_000, 60, 1, "a"))  # the period runs past every cap
    maintenance = MaintenanceConfig(
        requests=tuple(sorted((T0 + at, f"node-{n:04d}") for at, n in requests)),
        repair_s=600,
    )
    config = SimulationConfig(
        gpus=24,
        gpus_per_node=8,
        maintenance=maintenance,
        churn=ChurnControl(max_preemptions=bound),
    )
    outcome = Simulation(trace, {"a": 1.0, "b": 2.0, "c": 4.0}, config, run_pass).run()
    for drain in outcome.drains:
        assert not drain.stuck, drain
        if drain.drained_at is not None:
            assert drain.drained_at - drain.cordoned_at <= 3_600 + config.grace_period_s + 1


def _bounded_job_on_cordoned_nodes(drains_bounded: bool) -> SimulationOutcome:
    """c fills three nodes with long gangs; a (owed more) takes one once the contracts are
    over, which spends the victim's only allowed preemption; it resumes when a's job ends. Then
    every node is sent for repair while it runs."""
    from scheduling.churn import ChurnControl

    trace = [TraceJob(f"c{i}", T0, 60_000, 8, "c") for i in range(3)]
    trace += [TraceJob("a1", T0 + 4_000, 600, 8, "a"), TraceJob("end", T0 + 50_000, 60, 1, "a")]
    requests = tuple((T0 + 10_000, f"node-{n:04d}") for n in range(3))
    config = SimulationConfig(
        gpus=24,
        gpus_per_node=8,
        maintenance=MaintenanceConfig(requests=requests, repair_s=600),
        churn=ChurnControl(max_preemptions=1, drain_bound=1 if drains_bounded else 10),
    )
    return Simulation(trace, {"a": 4.0, "c": 1.0}, config, run_pass).run()


def test_a_drain_stops_a_job_the_policy_may_no_longer_preempt() -> None:
    outcome = _bounded_job_on_cordoned_nodes(drains_bounded=False)
    assert [p.reason for p in outcome.preemptions] == ["preempt-for", "drain", "drain", "drain"]
    assert all(not d.stuck for d in outcome.drains)
    assert max(d.time_to_drain(outcome.end, 8 * 3600) for d in outcome.drains) <= 3_600 + 31
    # Under the rule before (drains bounded too), the same node waited the full 8 hours.
    before = _bounded_job_on_cordoned_nodes(drains_bounded=True)
    assert any(d.stuck for d in before.drains)
