"""``fairshare bench scheduler | audit | pipeline``: each prints one JSON object."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from services.runtime.cli_options import KafkaOption

bench_app = typer.Typer(no_args_is_help=True, help="Benchmarks (figures, not pass/fail).")


@bench_app.command("scheduler")
def bench_scheduler(
    trace: Annotated[Path | None, typer.Option(help="trace to replay")] = None,
    budgets: Annotated[Path | None, typer.Option(help="budget weights")] = None,
    nodes: Annotated[int, typer.Option(help="nodes of 8 GPUs for the synthetic pass")] = 10_000,
    pending: Annotated[
        int, typer.Option(help="pending workloads for the synthetic pass")
    ] = 100_000,
    budget_count: Annotated[int, typer.Option("--budgets-count", help="leaf budgets")] = 500,
    trials: Annotated[int, typer.Option(help="incremental passes to time")] = 50,
) -> None:
    """Replay wall time, one full pass and incremental passes; prints one JSON object."""
    import orjson

    from services.bench.scheduler import scheduler_benchmark

    result = scheduler_benchmark(
        trace=trace,
        budgets=budgets,
        nodes=nodes,
        pending=pending,
        leaf_budgets=budget_count,
        trials=trials,
    )
    typer.echo(orjson.dumps(result).decode())


@bench_app.command("audit")
def bench_audit(
    events: Annotated[int, typer.Option(help="size of the synthetic log")] = 1_000_000,
    log: Annotated[
        Path | None, typer.Option("--events-file", help="replay this log instead")
    ] = None,
) -> None:
    """Audit replay throughput vs a bare orjson decode of the same file; one JSON object."""
    import orjson

    from services.bench.audit import audit_benchmark

    typer.echo(orjson.dumps(audit_benchmark(events, log)).decode())


@bench_app.command("pipeline")
def bench_pipeline(
    events: Annotated[int, typer.Option(help="facts to push through")] = 100_000,
    kafka: KafkaOption = None,
) -> None:
    """Live projection through a broker (facts in, charges in SQL) vs a bare consume."""
    import orjson

    from services.bench.pipeline import pipeline_benchmark

    typer.echo(orjson.dumps(pipeline_benchmark(events, kafka)).decode())
