"""``fairshare simulate``: a trace replayed through the scheduler core and the baselines."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console

from services.runtime.cli_options import console, err_console

if TYPE_CHECKING:
    from services.simulator.engine import SimulationConfig
    from services.simulator.trace import TraceJob

#: ``simulate``, merged into the top level of ``fairshare``.
simulate_app = typer.Typer()


ABLATE_HELP = (
    "also run fair share with each of these rules off, as policy fairshare-no-RULE "
    "(comma-separated, or all): gang-turn, holds, turn-holds, starving, bound, churn-margin, "
    "debug-lane, spread-stops, drain-past-bound"
)


SeedOption = Annotated[int, typer.Option(help="seed of the maintenance (and late losses)")]
LateLossesOption = Annotated[
    float,
    typer.Option(
        help="runs an agent reports lost per node a day, each dated up to 30 min before it "
        "reports it (a heartbeat in between confirmed time the loss takes back: the ledger's "
        "corrections; 0: none)"
    ),
]


@simulate_app.command()
def simulate(
    trace: Annotated[
        Path | None, typer.Option(help="job trace CSV (timestamp,duration,num_gpus,...)")
    ] = None,
    budgets: Annotated[Path | None, typer.Option(help="budget weights CSV (budget,weight)")] = None,
    gpus: Annotated[
        int | None, typer.Option(help="cluster size in GPUs (--synthetic: 296 unless given)")
    ] = None,
    synthetic: Annotated[
        bool,
        typer.Option(
            "--synthetic",
            help="instead of a trace: the synthetic big-gang scenario (many small tenants of "
            "8-160 GPU gangs, a stream of small jobs; services/simulator/synthetic.py)",
        ),
    ] = False,
    synthetic_seed: Annotated[int, typer.Option(help="seed of the synthetic scenario")] = 0,
    synthetic_days: Annotated[float, typer.Option(help="days of the synthetic scenario")] = 14,
    gpus_per_node: Annotated[int, typer.Option(help="GPUs per node")] = 8,
    policy: Annotated[
        str, typer.Option(help="fairshare, fifo, priority, quota, slurm-classic, or all")
    ] = "all",
    out: Annotated[Path, typer.Option(help="directory for metrics.json and plots")] = Path(
        "simulation"
    ),
    limit: Annotated[int | None, typer.Option(help="only the first N jobs of the trace")] = None,
    grace_period: Annotated[int, typer.Option(help="seconds from SIGTERM to SIGKILL")] = 30,
    plots: Annotated[bool, typer.Option(help="write PNG plots")] = True,
    events_out: Annotated[
        Path | None,
        typer.Option(help="write the (first) policy's full event log, charges included, here"),
    ] = None,
    checkpoint_every: Annotated[
        float,
        typer.Option(help="minutes of progress between a job's checkpoints (0: never checkpoints)"),
    ] = 30,
    restart_overhead: Annotated[
        int, typer.Option(help="seconds a resumed run spends restarting before it progresses")
    ] = 180,
    preemption_cost: Annotated[
        bool,
        typer.Option(help="charge preempted jobs their lost work (off: every second is kept)"),
    ] = True,
    maintenance: Annotated[
        float,
        typer.Option(help="fraction of nodes sent for repair per day, at random times (0: none)"),
    ] = 0.0,
    seed: SeedOption = 0,
    late_losses: LateLossesOption = 0.0,
    estimate_every: Annotated[
        int,
        typer.Option(
            help="estimate the start of every Nth job at its submission, fair share only, and "
            "report how far off it was (0: none)"
        ),
    ] = 10,
    repair_hours: Annotated[
        float, typer.Option(help="hours a node stays down for repair once drained")
    ] = 4,
    topology: Annotated[
        str,
        typer.Option(
            help="BLOCK_NODES[:RACK_NODES]: consecutive nodes per block (and per rack); gangs "
            "go to the fewest blocks, and the report counts blocks per gang (none: off)"
        ),
    ] = "none",
    ablate: Annotated[str, typer.Option(help=ABLATE_HELP)] = "",
    workers: Annotated[int, typer.Option(help="policies run in this many processes at once")] = 1,
) -> None:
    """Replay a trace through the scheduler (and baselines) on a simulated cluster."""
    from services.simulator.engine import SimulationConfig
    from services.simulator.maintenance import MaintenanceConfig
    from services.simulator.preemption_cost import PreemptionCost
    from services.simulator.runner import simulate as run_simulation
    from services.simulator.topology import TopologyConfig
    from services.simulator.trace import TraceError
    from services.simulator.world import LateLossConfig

    chosen = _policies(policy, ablate, workers)
    try:
        jobs, weights, gpus, scenario = _jobs_and_weights(
            trace, budgets, gpus, synthetic, synthetic_seed, synthetic_days, limit
        )
        config = SimulationConfig(
            gpus=gpus,
            gpus_per_node=gpus_per_node,
            grace_period_s=grace_period,
            cost=PreemptionCost(
                checkpoint_every_s=round(checkpoint_every * 60),
                restart_overhead_s=restart_overhead,
                enabled=preemption_cost,
            ),
            maintenance=MaintenanceConfig(
                rate=maintenance, seed=seed, repair_s=round(repair_hours * 3600)
            ),
            topology=TopologyConfig.parse(topology),
            late_losses=LateLossConfig(rate=late_losses, seed=seed),
        )
    except (TraceError, ValueError, OSError) as error:
        err_console.print(f"[red]cannot simulate:[/] {error}")
        raise typer.Exit(2) from error
    out_console = _out_console()
    out_console.print(_describe(scenario, len(jobs), config))
    try:
        run_simulation(
            jobs,
            weights,
            config,
            chosen,
            out,
            out_console,
            plots=plots,
            events_out=events_out,
            estimate_every=estimate_every,
            workers=workers,
        )
    except ValueError as error:
        err_console.print(f"[red]cannot simulate:[/] {error}")
        raise typer.Exit(2) from error


def _policies(policy: str, ablate: str, workers: int) -> list[str]:
    """The policies a run replays: ``--policy`` and fair share without each ``--ablate`` rule
    (exit 2 naming what is known for anything else)."""
    from services.simulator.ablation import parse_ablations, policy_name
    from services.simulator.runner import POLICIES

    chosen = list(POLICIES) if policy == "all" else [policy]
    if any(name not in POLICIES for name in chosen):
        err_console.print(f"[red]--policy:[/] expected one of {', '.join(POLICIES)} or all")
        raise typer.Exit(2)
    try:
        chosen += [policy_name(rule) for rule in parse_ablations(ablate)]
    except ValueError as error:
        err_console.print(f"[red]{error}[/]")
        raise typer.Exit(2) from error
    if workers < 1:
        err_console.print("[red]--workers:[/] at least 1")
        raise typer.Exit(2)
    return chosen


def _jobs_and_weights(
    trace: Path | None,
    budgets: Path | None,
    gpus: int | None,
    synthetic: bool,
    seed: int,
    days: float,
    limit: int | None,
) -> tuple[list[TraceJob], dict[str, float], int, str]:
    """The jobs, the budget weights, the cluster's GPUs and, for a synthetic scenario, what
    it is in words: from a trace and its budgets, or generated (``--synthetic``)."""
    from services.simulator.synthetic import SyntheticScenario, generate
    from services.simulator.trace import load_budgets, load_trace

    if synthetic:
        if trace is not None or budgets is not None:
            raise ValueError("--synthetic replaces --trace and --budgets: give one or the other")
        scenario = SyntheticScenario(gpus=gpus or 296, days=days, seed=seed)
        jobs, weights = generate(scenario)
        return jobs[:limit], weights, scenario.gpus, scenario.describe()
    if trace is None or budgets is None or gpus is None:
        raise ValueError("give --trace, --budgets and --gpus (or --synthetic)")
    return load_trace(trace, limit=limit), load_budgets(budgets), gpus, ""


def _out_console() -> Console:
    """Piped to a file or a pager, the tables keep every column whole instead of being cut to
    the 80 columns Rich assumes without a terminal."""
    return console if console.is_terminal else Console(width=320, soft_wrap=False)


def _describe(scenario: str, jobs: int, config: SimulationConfig) -> str:
    """What the run replays, in words: the scenario (when synthetic), the cluster, the rules."""
    nodes = config.gpus // config.gpus_per_node
    return (
        (f"{scenario}\n" if scenario else "")
        + f"{jobs} jobs, {config.gpus} GPUs ({nodes} nodes of {config.gpus_per_node}); "
        f"contracts: {config.contract.describe()}; {config.cost.describe()}; "
        f"{config.maintenance.describe()}; {config.topology.describe()}"
        + (f"; {config.late_losses.describe()}" if config.late_losses.rate > 0 else "")
    )
