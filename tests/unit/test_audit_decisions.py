"""The decision audit: simulated logs check out pass by pass; every tampered one fails, naming
the rule it breaks."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from events.envelope import Envelope, derived_event_id, new_event
from events.models import (
    DecisionRecord,
    EventData,
    NodeGpus,
    PlaceCommand,
    Placement,
    PreemptCommand,
)
from events.ndjson import write_events
from projections.live_state import LiveState
from services.audit.decisions import audit_decisions
from services.audit.decisions_cli import audit_decisions as audit_command
from services.simulator.engine import Simulation, SimulationConfig
from services.simulator.maintenance import MaintenanceConfig
from services.simulator.synthetic import SyntheticScenario, generate
from services.simulator.trace import PHILLY_BUDGETS, PHILLY_TRACE, load_budgets, load_trace

Log = list[Envelope[Any]]


def simulated_log(first: int, jobs: int, gpus: int = 32, maintenance: float = 0.0) -> Log:
    trace = load_trace(PHILLY_TRACE, limit=first + jobs)[first:]
    log: Log = []

    def record(data: EventData, at: float) -> None:
        log.append(
            new_event(
                data,
                source="test",
                time=datetime.fromtimestamp(at, UTC),
                event_id=derived_event_id("test", str(len(log))),
            )
        )

    config = SimulationConfig(
        gpus=gpus, maintenance=MaintenanceConfig(rate=maintenance, seed=first % 7 + 1)
    )
    Simulation(trace, load_budgets(PHILLY_BUDGETS), config, _policy(), recorder=record).run()
    return log


def _policy() -> Any:
    from scheduling.scheduling_pass import run_pass

    return run_pass


@pytest.fixture(scope="module")
def log() -> Log:
    return simulated_log(0, 200)


def _preempts(log: Log, reason: str = "preempt-for") -> list[int]:
    return [
        i
        for i, e in enumerate(log)
        if isinstance(e.data, PreemptCommand) and e.data.decision.reason == reason
    ]


def _with(log: Log, index: int, data: EventData) -> Log:
    return [*log[:index], log[index].model_copy(update={"data": data}), *log[index + 1 :]]


def _rules(log: Log) -> set[str]:
    return {p.rule for p in audit_decisions(log).problems}


@pytest.mark.parametrize(
    ("first", "jobs", "maintenance"), [(0, 200, 0.0), (150, 150, 0.0), (0, 150, 1.0)]
)
def test_simulated_logs_check_out(first: int, jobs: int, maintenance: float) -> None:
    log = simulated_log(first, jobs, maintenance=maintenance)
    audit = audit_decisions(log)
    assert audit.passes > 10
    assert audit.commands > audit.passes
    assert audit.problems == []
    assert audit.ok


def test_a_synthetic_big_gang_log_checks_out() -> None:
    """The gang's turn, node holds by time limits with backfill and the preemption bound are
    rules of the pure core: the audit re-derives them like every other (a day of the synthetic
    big-gang scenario on 64 GPUs, whose gangs preempt and hold nodes)."""
    scenario = SyntheticScenario(gpus=64, days=1, gang_tenants=10, small_tenants=4, seed=2)
    jobs, weights = generate(scenario)
    log: Log = []

    def record(data: EventData, at: float) -> None:
        log.append(
            new_event(
                data,
                source="test",
                time=datetime.fromtimestamp(at, UTC),
                event_id=derived_event_id("test", str(len(log))),
            )
        )

    Simulation(jobs, weights, SimulationConfig(gpus=64), _policy(), recorder=record).run()
    assert _preempts(log), "the sample preempts"
    audit = audit_decisions(log)
    assert audit.problems == []
    assert audit.ok


def test_the_sample_has_preemptions_and_drains_to_tamper_with(log: Log) -> None:
    assert len(_preempts(log)) >= 3
    assert _preempts(simulated_log(0, 150, maintenance=1.0), "drain")


def test_a_changed_victim_fails(log: Log) -> None:
    # the first and the last preemption of the sample (each check re-derives the whole log:
    # every one of them took 18 s of the default run; the property tests tamper at random)
    indices = _preempts(log)
    for index in sorted({indices[0], indices[-1]}):
        command = log[index].data
        # Another workload placed earlier, named consistently (a careful tamperer).
        other = next(
            e.data
            for e in log[:index]
            if isinstance(e.data, PlaceCommand) and e.data.workload_id != command.workload_id
        )
        forged = command.model_copy(
            update={
                "workload_id": other.workload_id,
                "attempt": other.attempt,
                "command_id": f"preempt:{other.workload_id}:{other.attempt}",
            }
        )
        assert "re-derived" in _rules(_with(log, index, forged))


def test_a_changed_victim_with_the_old_id_fails_on_the_id(log: Log) -> None:
    index = _preempts(log)[0]
    command = log[index].data
    other = next(e.data for e in log[:index] if isinstance(e.data, PlaceCommand))
    forged = command.model_copy(update={"workload_id": other.workload_id})
    assert {"command-id", "re-derived"} <= _rules(_with(log, index, forged))


def _inside_contract(log: Log) -> tuple[int, PreemptCommand]:
    """A preempt of running allocated work still inside its contract, placed in a pass."""
    state = LiveState()
    for index, envelope in enumerate(log):
        data = envelope.data
        if isinstance(data, PlaceCommand) and index > 0:
            now = envelope.time.timestamp()
            for workload in state.cluster.workloads.values():
                if (
                    workload.status == "running"
                    and workload.allocated
                    and not workload.contract_over(now)
                    and workload.workload_id != data.workload_id
                ):
                    decision = DecisionRecord(
                        pass_id=data.decision.pass_id,
                        input_position=data.decision.input_position,
                        reason="preempt-for",
                        preemptor=data.workload_id,
                    )
                    return index, PreemptCommand(
                        command_id=f"preempt:{workload.workload_id}:{workload.attempt}",
                        cluster=data.cluster,
                        pool=data.pool,
                        workload_id=workload.workload_id,
                        attempt=workload.attempt,
                        requeue=True,
                        decision=decision,
                    )
        state.apply(envelope)
    raise AssertionError("no running work inside its contract in the sample")


def test_an_added_preempt_inside_a_contract_fails_on_the_contract(log: Log) -> None:
    index, forged = _inside_contract(log)
    inserted = log[index].model_copy(
        update={"data": forged, "id": derived_event_id("test", "forged"), "type": forged.event_type}
    )
    tampered = [*log[:index], inserted, *log[index:]]
    problems = audit_decisions(tampered).problems
    assert any(p.rule == "contract" and forged.workload_id in p.message for p in problems)
    assert "re-derived" in {p.rule for p in problems}


def test_a_dropped_place_command_fails(log: Log) -> None:
    places = [i for i, e in enumerate(log) if isinstance(e.data, PlaceCommand)]
    for index in places[:: max(1, len(places) // 5)]:
        assert "re-derived" in _rules([*log[:index], *log[index + 1 :]])


def test_a_moved_placement_fails(log: Log) -> None:
    places = [i for i, e in enumerate(log) if isinstance(e.data, PlaceCommand)]
    nodes = sorted({n.node for i in places for n in log[i].data.placement.nodes})
    for index in places[:: max(1, len(places) // 5)]:
        command = log[index].data
        part = command.placement.nodes[0]
        elsewhere = next(n for n in nodes if n != part.node)
        moved = Placement(
            nodes=(NodeGpus(node=elsewhere, gpus=part.gpus), *command.placement.nodes[1:])
        )
        forged = command.model_copy(update={"placement": moved})
        assert "re-derived" in _rules(_with(log, index, forged))


def test_reordered_commands_of_a_pass_fail(log: Log) -> None:
    """Two commands of one pass swapped (each still what the pass decides): the order the
    pass decided them in is part of the decision (a preemption before the placement it frees
    room for)."""
    pairs = [
        (i, j)
        for i, j in zip(range(len(log)), range(1, len(log)), strict=False)
        if isinstance(log[i].data, PlaceCommand | PreemptCommand)
        and isinstance(log[j].data, PlaceCommand | PreemptCommand)
        and log[i].data.decision.pass_id == log[j].data.decision.pass_id
    ]
    assert pairs
    i, j = pairs[0]
    swapped = [*log[:i], log[j], log[i], *log[j + 1 :]]
    problems = audit_decisions(swapped).problems
    assert any("another order" in p.message for p in problems), problems


def test_records_name_the_usage_they_ranked_on_and_another_fails(log: Log) -> None:
    named = [
        e.data
        for e in log
        if isinstance(e.data, PlaceCommand) and e.data.decision.usage_as_of is not None
    ]
    assert len(named) > len(_preempts(log))  # ranked placements name their snapshot
    index = next(
        i
        for i, e in enumerate(log)
        if isinstance(e.data, PlaceCommand) and e.data.decision.usage_as_of is not None
    )
    command = log[index].data
    earlier = command.decision.usage_as_of - timedelta(hours=1)
    decision = command.decision.model_copy(update={"usage_as_of": earlier})
    forged = command.model_copy(update={"decision": decision})
    problems = audit_decisions(_with(log, index, forged)).problems
    assert any(p.rule == "usage" and command.workload_id in p.message for p in problems)
    assert "re-derived" in {p.rule for p in problems}


def _cli(path: Path | None, *args: str) -> tuple[int, str]:
    app = typer.Typer()
    app.command("decisions")(audit_command)
    app.command("other")(lambda: None)  # a group, as under ``fairshare audit``
    given = [] if path is None else ["--events", str(path)]
    result = CliRunner().invoke(app, ["decisions", *given, *args])
    return result.exit_code, result.output


def test_the_cli_takes_a_file_or_the_live_topics_not_both_nor_neither(tmp_path: Path) -> None:
    # neither, and no `fairshare up` in the data dir (not the caller's: the README's first
    # command leaves one beside the tests)
    assert _cli(None, "--data-dir", str(tmp_path))[0] == 2
    assert _cli(tmp_path / "log.ndjson", "--kafka", "127.0.0.1:1")[0] == 2
    assert _cli(tmp_path / "missing.ndjson")[0] == 2


def test_the_cli_passes_a_clean_log_and_names_the_rule_a_tampered_one_breaks(
    log: Log, tmp_path: Path
) -> None:
    clean = tmp_path / "clean.ndjson"
    write_events(clean, log)
    code, output = _cli(clean)
    assert code == 0, output
    assert "0 violation(s)" in output
    index, forged = _inside_contract(log)
    inserted = log[index].model_copy(
        update={"data": forged, "id": derived_event_id("test", "forged"), "type": forged.event_type}
    )
    tampered = tmp_path / "tampered.ndjson"
    write_events(tampered, [*log[:index], inserted, *log[index:]])
    code, output = _cli(tampered)
    assert code == 1
    assert "contract:" in output
    assert forged.workload_id in output
