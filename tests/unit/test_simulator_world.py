"""World facts in the simulator (services/simulator/world.py): cancels, weight changes and node
losses at given times, acted out as the live system would, and audited clean."""

from __future__ import annotations

from pathlib import Path

import pytest

from events.models import (
    BudgetWeightChanged,
    LedgerCharge,
    NodeDown,
    NodeUp,
    PreemptCommand,
    WorkloadCancelled,
    WorkloadLost,
    WorkloadPreempted,
    WorkloadRequeued,
    WorkloadStarted,
)
from events.ndjson import read_events, write_events
from scheduling.scheduling_pass import run_pass
from services.audit.decisions import audit_decisions
from services.audit.replay import replay, shuffled
from services.simulator.engine import Simulation, SimulationConfig
from services.simulator.maintenance import MaintenanceConfig
from services.simulator.metrics import compute_metrics, queue_waits
from services.simulator.preemption_cost import PreemptionCost
from services.simulator.trace import TraceJob
from services.simulator.world import (
    CancelAt,
    LateLossAt,
    LateLossConfig,
    NodeLossAt,
    WeightChangeAt,
    WorldFact,
)
from tests.unit.test_audit_property import Log, Scenario, audit_clean, simulate

T0 = 1_505_001_600.0  # on the hour
FREE = PreemptionCost(enabled=False)  # every second of progress kept: round figures


def scenario(
    jobs: list[TraceJob],
    world: list[WorldFact],
    gpus: int = 8,
    gpus_per_node: int = 8,
    weights: dict[str, float] | None = None,
    maintenance: MaintenanceConfig | None = None,
) -> Scenario:
    sentinel = TraceJob("sentinel", T0 + 50_000, 60, 1, "a")  # the period ends here
    config = SimulationConfig(
        gpus=gpus,
        gpus_per_node=gpus_per_node,
        cost=FREE,
        maintenance=maintenance or MaintenanceConfig(),
    )
    return Scenario((*jobs, sentinel), weights or {"a": 1.0, "b": 1.0}, config, tuple(world))


def of(log: Log, kind: type) -> list:  # type: ignore[type-arg]
    return [e.data for e in log if isinstance(e.data, kind)]


def test_a_pending_job_cancelled_ends_there_and_never_starts() -> None:
    jobs = [TraceJob("big", T0, 20_000, 8, "a"), TraceJob("waiting", T0 + 10, 5_000, 8, "a")]
    s = scenario(jobs, [CancelAt("waiting", T0 + 600)])
    outcome, log = simulate(s)
    assert [c.workload_id for c in of(log, WorkloadCancelled)] == ["waiting"]
    run = outcome.runs["waiting"]
    assert (run.first_start, run.cancelled_at) == (None, T0 + 600)
    assert not of(log, PreemptCommand)
    # Its wait counts up to the cancel, not to the end of the period.
    assert 590 in queue_waits(outcome)
    assert "pending work cancelled" in audit_clean(s)


def test_a_running_job_cancelled_is_stopped_by_a_cancel_command_and_ends_cancelled() -> None:
    s = scenario([TraceJob("job", T0, 20_000, 4, "a")], [CancelAt("job", T0 + 1_000)])
    outcome, log = simulate(s)
    [command] = of(log, PreemptCommand)
    assert (command.decision.reason, command.requeue) == ("cancel", False)
    [stopped] = of(log, WorkloadPreempted)
    assert (stopped.command_id, stopped.ran_s) == (command.command_id, 1_030)  # after the grace
    assert not of(log, WorkloadRequeued)
    run = outcome.runs["job"]
    assert (run.busy_s, run.finished_at, run.discarded_s) == (1_030, None, 0)
    # Not a preemption, nor an interruption: the work is not wanted any more.
    assert outcome.preemptions == []
    assert outcome.interruptions == []
    assert compute_metrics(outcome)["overall"]["preemptions"] == 0
    assert audit_clean(s) >= {"preempt: cancel", "running work cancelled"}


def test_a_cancel_that_cannot_apply_is_skipped_and_says_why() -> None:
    jobs = [TraceJob("short", T0, 600, 1, "a"), TraceJob("late", T0 + 5_000, 600, 1, "a")]
    world: list[WorldFact] = [
        CancelAt("late", T0 + 100),  # not arrived yet
        CancelAt("short", T0 + 2_000),  # already done
        CancelAt("late", T0 + 5_100),
        CancelAt("late", T0 + 5_101),  # being cancelled already
    ]
    outcome, log = simulate(scenario(jobs, world))
    assert [why for _, why in outcome.world.skipped] == [
        "the job has not arrived yet",
        "the job has already ended (succeeded)",
        "the job is being cancelled already",
    ]
    assert outcome.world.stated == [CancelAt("late", T0 + 5_100)]
    assert len(of(log, WorkloadCancelled)) == 1


def test_a_weight_change_is_folded_into_the_tree_and_logged() -> None:
    jobs = [TraceJob("a1", T0, 20_000, 4, "a"), TraceJob("b1", T0, 20_000, 4, "b")]
    s = scenario(jobs, [WeightChangeAt("b", 3.0, T0 + 3_600)])
    outcome, log = simulate(s)
    assert of(log, BudgetWeightChanged) == [
        BudgetWeightChanged(budget="b", weight=3.0, changed_by="simulator")
    ]
    before, after = outcome.tree.shares("sim", T0 + 3_599), outcome.tree.shares("sim", T0 + 3_600)
    assert (before["a"], before["b"]) == (0.5, 0.5)
    assert (after["a"], after["b"]) == (0.25, 0.75)
    assert outcome.world.count(WeightChangeAt) == 1
    assert "leaf re-weighted" in audit_clean(s)


def test_a_weight_change_of_a_parent_moves_its_children_s_shares() -> None:
    weights = {"a": 1.0, "lab": 1.0, "lab/x": 1.0, "lab/y": 1.0}
    jobs = [TraceJob("x1", T0, 20_000, 4, "lab/x"), TraceJob("a1", T0 + 5, 20_000, 8, "a")]
    s = scenario(jobs, [WeightChangeAt("lab", 0.25, T0 + 7_200)], weights=weights)
    outcome, _ = simulate(s)
    assert outcome.tree.shares("sim", T0 + 7_200)["lab/x"] == pytest.approx(0.1)
    assert "parent re-weighted" in audit_clean(s)


def test_a_lost_node_s_work_is_declared_lost_requeued_and_restarted_elsewhere() -> None:
    jobs = [TraceJob("job", T0 + 10, 20_000, 8, "a")]
    s = scenario(jobs, [NodeLossAt("node-0000", T0 + 5_000)], gpus=16)
    outcome, log = simulate(s)
    assert of(log, NodeDown)[0].node == "node-0000"
    [lost] = of(log, WorkloadLost)
    # Dated at the instant the node died (its last heartbeat), where the ledger stops charging.
    assert (lost.workload_id, lost.attempt, lost.last_heartbeat.timestamp()) == (
        "job",
        1,
        T0 + 5_000,
    )
    [requeued] = of(log, WorkloadRequeued)
    assert (requeued.reason, requeued.attempt) == ("lost", 1)
    run = outcome.runs["job"]
    assert run.finished_at == T0 + 10 + 20_000  # resumed on node-0001 at once, nothing lost
    assert [i.cause for i in outcome.interruptions] == ["lost"]
    assert not of(log, NodeUp)  # it never comes back
    assert audit_clean(s) >= {"work lost with a lost node", "requeued: lost", "lost work restarted"}


def test_a_lost_node_comes_back_and_its_work_resumes_there() -> None:
    jobs = [TraceJob("job", T0 + 10, 20_000, 8, "a")]
    s = scenario(jobs, [NodeLossAt("node-0000", T0 + 1_000, back_after_s=3_600)])
    outcome, log = simulate(s)
    assert [e.node for e in of(log, NodeUp)] == ["node-0000"]
    # Lost at 1,000 s, back at 4,600 s: resumes there (the only node) and runs its rest.
    starts = [
        (e.data.attempt, e.time.timestamp())
        for e in log
        if isinstance(e.data, WorkloadStarted) and e.data.workload_id == "job"
    ]
    assert starts == [(1, T0 + 10), (2, T0 + 4_600)]
    assert outcome.runs["job"].finished_at == T0 + 4_600 + 20_000 - 990
    capacity = outcome.capacity_steps
    assert [capacity.at(T0 + t) for t in (999, 1_000, 4_599, 4_600)] == [8, 0, 0, 8]
    assert "lost node back up" in audit_clean(s)


def test_a_gang_over_whole_nodes_is_lost_whole_when_one_of_its_nodes_dies() -> None:
    jobs = [TraceJob("gang", T0, 20_000, 16, "a", resumable=False)]
    s = scenario(jobs, [NodeLossAt("node-0001", T0 + 2_000, back_after_s=600)], gpus=24)
    outcome, log = simulate(s)
    [lost] = of(log, WorkloadLost)
    assert (lost.workload_id, lost.node) == ("gang", "node-0001")
    assert not of(log, WorkloadRequeued)  # it cannot resume: lost for good
    assert outcome.runs["gang"].finished_at is None
    assert audit_clean(s) >= {"gang placed across nodes", "work lost with a lost node"}


def test_a_node_out_of_service_cannot_be_lost_again_and_maintenance_leaves_a_lost_one_alone() -> (
    None
):
    jobs = [TraceJob("job", T0, 20_000, 8, "a")]
    maintenance = MaintenanceConfig(
        requests=((T0 + 3_000, "node-0001"), (T0 + 9_000, "node-0000")), repair_s=600
    )
    world: list[WorldFact] = [
        NodeLossAt("node-0000", T0 + 1_000, back_after_s=10_000),
        NodeLossAt("node-0000", T0 + 2_000),  # down already
        NodeLossAt("node-0001", T0 + 3_001),  # cordoned for repair
    ]
    s = scenario(jobs, world, gpus=16, maintenance=maintenance)
    outcome, _ = simulate(s)
    assert [why for _, why in outcome.world.skipped] == ["the node is already out of service"] * 2
    assert [d.node for d in outcome.drains] == ["node-0001"]
    assert outcome.repairs_merged == 1  # the repair request for the lost node-0000
    audit_clean(s)


def test_facts_about_what_the_simulation_lacks_are_refused() -> None:
    jobs = [TraceJob("job", T0, 600, 1, "a")]
    config = SimulationConfig(gpus=8)
    for fact, words in (
        (CancelAt("nobody", T0), "not in the trace"),
        (WeightChangeAt("z", 1.0, T0), "not a budget"),
        (WeightChangeAt("a", 0.0, T0), "not > 0"),
        (NodeLossAt("node-0009", T0), "the cluster lacks"),
        (NodeLossAt("node-0000", T0, back_after_s=-1), "< 0"),
    ):
        with pytest.raises(ValueError, match=words):
            Simulation(jobs, {"a": 1.0}, config, run_pass, world=[fact])


def test_the_same_world_gives_the_same_log_and_its_file_audits_clean(tmp_path: Path) -> None:
    jobs = [
        TraceJob(f"j{i}", T0 + 97.25 * i, 1_000 + 433.5 * i, 1 + i % 8, "ab"[i % 2])
        for i in range(30)
    ]
    world: list[WorldFact] = [
        CancelAt("j3", T0 + 1_000.5),
        WeightChangeAt("a", 4.0, T0 + 1_200.25),
        NodeLossAt("node-0001", T0 + 1_500.75, back_after_s=900.5),
    ]
    s = scenario(jobs, world, gpus=24)
    first, second = simulate(s)[1], simulate(s)[1]
    assert [e.model_dump_json() for e in first] == [e.model_dump_json() for e in second]
    assert audit_clean(s) >= {"running work cancelled", "leaf re-weighted", "lost node back up"}
    # As ``fairshare simulate --events-out`` writes it and the audit reads it back: every
    # event, the world's facts included, decodes strictly.
    path = tmp_path / "events.ndjson"
    write_events(path, first)
    audit = audit_decisions(read_events(path))
    assert audit.bad_lines == []
    assert audit.problems == []
    assert audit.events == len(first)


def test_a_late_loss_takes_back_a_confirmed_hour_with_a_correction_and_audits_clean() -> None:
    """An agent reports its run lost at 4,500 s, dated 1,200 s earlier: the heartbeat on the
    hour (3,600 s) confirmed the first hour, which the loss then cuts short. The ledger posts
    the hour and then a correction; the charge audit re-derives both from the log in any read
    order, and the decision audit takes the loss as a fact the next pass met (no pass runs at
    its instant)."""
    jobs = [TraceJob("job", T0 + 10, 20_000, 8, "a")]
    s = scenario(jobs, [LateLossAt("node-0000", T0 + 4_500, 1_200.0)], gpus=16)
    outcome, log = simulate(s)
    [lost] = of(log, WorkloadLost)
    assert (lost.workload_id, lost.attempt, lost.last_heartbeat.timestamp()) == (
        "job",
        1,
        T0 + 3_300,
    )
    assert not of(log, NodeDown)  # the node stays up
    [requeued] = of(log, WorkloadRequeued)
    assert requeued.reason == "lost"
    assert [e.time.timestamp() for e in log if isinstance(e.data, WorkloadRequeued)] > [T0 + 4_500]
    charges = [c for c in of(log, LedgerCharge) if c.workload_id == "job"]
    first_hour = [c for c in charges if c.bucket_start.timestamp() == T0]
    assert [(c.charge_id.rsplit(":", 1)[1], c.gpu_seconds) for c in first_hour] == [
        ("0", 8 * 3_590),
        ("1", 8 * 300),
    ]
    assert first_hour[1].corrects == first_hour[0].charge_id
    assert replay(log).identical
    assert replay(shuffled(log, 5)).identical
    assert outcome.world.stated == [LateLossAt("node-0000", T0 + 4_500, 1_200.0)]
    assert {"work lost", "requeued: lost", "lost work restarted"} <= audit_clean(s)


def test_late_losses_are_drawn_from_their_seed_and_refused_out_of_range() -> None:
    nodes = [f"node-{i:04d}" for i in range(4)]
    config = LateLossConfig(rate=2.0, seed=7)
    facts = config.facts(nodes, T0, T0 + 86_400)
    assert facts == LateLossConfig(rate=2.0, seed=7).facts(nodes, T0, T0 + 86_400)
    assert facts != LateLossConfig(rate=2.0, seed=8).facts(nodes, T0, T0 + 86_400)
    assert 2 <= len(facts) <= 20  # about 8 expected
    assert all(T0 <= f.at < T0 + 86_400 and 1.0 <= f.dated_s_before <= 1_800 for f in facts)
    assert LateLossConfig().facts(nodes, T0, T0 + 86_400) == []
    with pytest.raises(ValueError, match="late-losses"):
        LateLossConfig(rate=-1.0)
