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


@bench_app.command("chaos")
def bench_chaos(
    workloads: Annotated[int, typer.Option(help="submissions through the API")] = 1000,
    brokers: Annotated[int, typer.Option(help="Apache Kafka brokers: 1, or 3 (replicated)")] = 1,
    rate: Annotated[float, typer.Option(help="submissions per second")] = 20.0,
    data_dir: Annotated[
        Path | None, typer.Option(help="keep the run here (logs, broker data) instead of a tmp dir")
    ] = None,
) -> None:
    """The stack under kill -9 (broker, each service, the lease holder) while workloads are
    submitted through the API; then the log is checked. Prints one JSON object; exit 1 when
    something acknowledged was lost or a check failed."""
    import orjson

    from services.bench.chaos import ChaosConfig, chaos_benchmark
    from services.runtime.cli_options import err_console

    config = ChaosConfig(workloads=workloads, brokers=brokers, rate_per_s=rate)
    result = chaos_benchmark(config, data_dir, report=lambda line: err_console.print(line))
    typer.echo(orjson.dumps(result).decode())
    if not result["ok"]:
        raise typer.Exit(1)
