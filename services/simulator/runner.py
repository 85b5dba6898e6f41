"""Runs one or more policies over a trace, with a progress bar, and writes the report."""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

from services.scheduler.baselines import BASELINES, baseline_policy
from services.scheduler.scheduling_pass import run_pass
from services.simulator.engine import Policy, Simulation, SimulationConfig, SimulationOutcome
from services.simulator.metrics import compute_metrics
from services.simulator.report import print_report, write_metrics, write_plots
from services.simulator.trace import TraceJob

POLICIES = ("fairshare", *BASELINES)


def policy_named(name: str) -> Policy:
    return run_pass if name == "fairshare" else baseline_policy(name)


def simulate(
    jobs: list[TraceJob],
    weights: dict[str, float],
    config: SimulationConfig,
    policies: list[str],
    out: Path,
    console: Console,
    plots: bool = True,
) -> dict[str, dict[str, Any]]:
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

            outcome = Simulation(jobs, weights, config, policy_named(name), advance).run()
            outcomes[name] = outcome
            metrics[name] = compute_metrics(outcome)
    run_config = {
        **{k: v for k, v in asdict(config).items() if k != "contract"},
        "contract_rule": config.contract.describe(),
        "jobs": len(jobs),
    }
    write_metrics(out / "metrics.json", metrics, run_config)
    print_report(console, metrics)
    if plots:
        for path in write_plots(out, metrics, outcomes):
            console.print(f"plot: {path}")
    console.print(f"metrics: {out / 'metrics.json'}")
    return metrics
