"""Runs one or more policies over a trace, with a progress bar, and writes the report."""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor, as_completed
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
from services.simulator.ablation import config_for, is_fair_share
from services.simulator.engine import Policy, Simulation, SimulationConfig, SimulationOutcome
from services.simulator.estimates import StartEstimates
from services.simulator.metrics import compute_metrics
from services.simulator.plots import write_plots
from services.simulator.report import print_report, targets_markdown, write_metrics
from services.simulator.trace import TraceJob

POLICIES = ("fairshare", *BASELINES)


def policy_named(name: str) -> Policy:
    return run_pass if is_fair_share(name) else baseline_policy(name)


def _run_alone(
    name: str,
    jobs: list[TraceJob],
    weights: dict[str, float],
    config: SimulationConfig,
    estimate_every: int,
) -> tuple[str, SimulationOutcome, dict[str, Any]]:
    """One policy's run in a worker process (``workers`` > 1): no progress bar, no event log."""
    outcome = Simulation(
        jobs,
        weights,
        config_for(name, config),
        policy_named(name),
        lambda _fraction: None,
        start_estimates=StartEstimates(estimate_every)
        if name == "fairshare" and estimate_every > 0
        else None,
    ).run()
    return name, outcome, compute_metrics(outcome)


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
    workers: int = 1,
) -> dict[str, dict[str, Any]]:
    """Run ``policies`` in turn; with ``events_out``, the first one's full event log (facts,
    decisions, heartbeats and the charges the ledger fold posted) is written there. The
    fair-share run estimates the start of every ``estimate_every``-th job at its submission
    (``estimates.py``; 0: none). With ``workers`` > 1 (and no event log) the policies run in
    that many processes at once: each run is a pure function of the trace and its
    configuration, so the figures are the same as in turn."""
    out.mkdir(parents=True, exist_ok=True)
    metrics: dict[str, dict[str, Any]] = {}
    outcomes: dict[str, SimulationOutcome] = {}
    if workers > 1 and events_out is None and len(policies) > 1:
        with ProcessPoolExecutor(max_workers=min(workers, len(policies))) as pool:
            futures = [
                pool.submit(_run_alone, name, jobs, weights, config, estimate_every)
                for name in policies
            ]
            for future in as_completed(futures):
                name, outcome, found = future.result()
                console.print(f"{name}: done ({outcome.wall_seconds:.0f} s)")
                outcomes[name], metrics[name] = outcome, found
        metrics = {name: metrics[name] for name in policies}
        outcomes = {name: outcomes[name] for name in policies}
        return _report(metrics, outcomes, config, jobs, out, console, plots, estimate_every)
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
                config_for(name, config),
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
    return _report(metrics, outcomes, config, jobs, out, console, plots, estimate_every)


def _report(
    metrics: dict[str, dict[str, Any]],
    outcomes: dict[str, SimulationOutcome],
    config: SimulationConfig,
    jobs: list[TraceJob],
    out: Path,
    console: Console,
    plots: bool,
    estimate_every: int,
) -> dict[str, dict[str, Any]]:
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
    (out / "targets.md").write_text(targets_markdown(metrics))
    print_report(console, metrics)
    if plots:
        for path in write_plots(out, metrics, outcomes):
            console.print(f"plot: {path}")
    console.print(f"metrics: {out / 'metrics.json'}")
    return metrics
