"""Runs one or more policies over a trace, with a progress bar, and writes the report."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

from events.envelope import derived_event_id, new_event
from events.models import EventData
from events.ndjson import EventLogWriter
from scheduling.baselines import BASELINES, baseline_policy
from scheduling.scheduling_pass import run_pass
from services.simulator.engine import Policy, Simulation, SimulationConfig, SimulationOutcome
from services.simulator.estimates import StartEstimates
from services.simulator.metrics import compute_metrics
from services.simulator.plots import write_plots
from services.simulator.report import print_report, write_metrics
from services.simulator.trace import TraceJob

POLICIES = ("fairshare", *BASELINES)


def policy_named(name: str) -> Policy:
    return run_pass if name == "fairshare" else baseline_policy(name)


def _recorder(writer: EventLogWriter, policy: str) -> Callable[[EventData, float], None]:
    count = 0
    source = f"fairshare/simulator/{policy}"

    def record(data: EventData, at: float) -> None:
        nonlocal count
        count += 1
        writer.write(
            new_event(
                data,
                source=source,
                time=datetime.fromtimestamp(at, UTC),
                event_id=derived_event_id(source, str(count)),
            )
        )

    return record


def simulate(
    jobs: list[TraceJob],
    weights: dict[str, float],
    config: SimulationConfig,
    policies: list[str],
    out: Path,
    console: Console,
    plots: bool = True,
    events_out: Path | None = None,
    estimate_every: int = 10,
) -> dict[str, dict[str, Any]]:
    """Run ``policies`` in turn; with ``events_out``, the first one's full event log (facts,
    decisions, heartbeats and the charges the ledger fold posted) is written there. The
    fair-share run estimates the start of every ``estimate_every``-th job at its submission
    (``estimates.py``; 0: none)."""
    out.mkdir(parents=True, exist_ok=True)
    metrics: dict[str, dict[str, Any]] = {}
    outcomes: dict[str, SimulationOutcome] = {}
    with Progress(
        TextColumn("{task.description:>14}"),
        BarColumn(),
        TextColumn("{task.percentage:>5.1f}% of the trace"),
        TimeElapsedColumn(),
        console=console,
        transient=False,
    ) as progress:
        for name in policies:
            task = progress.add_task(name, total=1.0)

            def advance(fraction: float, task: Any = task) -> None:
                progress.update(task, completed=fraction)

            writer = EventLogWriter(events_out) if events_out and name == policies[0] else None
            outcome = Simulation(
                jobs,
                weights,
                config,
                policy_named(name),
                advance,
                recorder=_recorder(writer, name) if writer else None,
                start_estimates=StartEstimates(estimate_every)
                if name == "fairshare" and estimate_every > 0
                else None,
            ).run()
            if writer is not None:
                writer.close()
                console.print(f"event log of the {name} run: {writer.count} events in {events_out}")
            outcomes[name] = outcome
            metrics[name] = compute_metrics(outcome)
    run_config = {
        **{k: v for k, v in asdict(config).items() if k != "contract"},
        "contract_rule": config.contract.describe(),
        "preemption_cost": config.cost.describe(),
        "maintenance_scenario": config.maintenance.describe(),
        "time_limit_rule": config.time_limit_rule.describe(),
        "start_estimates": f"every {estimate_every}th job at its submission (fairshare)"
        if estimate_every > 0
        else "none",
        "jobs": len(jobs),
    }
    write_metrics(out / "metrics.json", metrics, run_config)
    print_report(console, metrics)
    if plots:
        for path in write_plots(out, metrics, outcomes):
            console.print(f"plot: {path}")
    console.print(f"metrics: {out / 'metrics.json'}")
    return metrics
