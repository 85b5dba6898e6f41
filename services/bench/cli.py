"""``fairshare bench scheduler | audit | audit-decisions | pipeline | rebuild | chaos | latency |
throughput | idle | history | kills | kubernetes``: each prints one JSON object (history: one
per history length, then a summary).

Only the standard library and Typer are imported here: assembling ``fairshare``'s command line
must stay cheap, so every benchmark is imported by its command when it runs."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

#: ``--kafka`` as every service command spells it (``services.runtime.cli_options``), declared
#: here so that importing this module imports no broker code.
KafkaOption = Annotated[
    str | None,
    typer.Option(
        "--kafka",
        envvar="FAIRSHARE_KAFKA_BOOTSTRAP",
        help="bootstrap servers of the Kafka to use",
    ),
]
JsonOut = Annotated[
    Path | None, typer.Option("--json-out", help="also write the JSON object to this file")
]

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
    strict: Annotated[
        bool, typer.Option("--strict", help="decode as `fairshare audit replay --strict`")
    ] = False,
    signed: Annotated[
        str,
        typer.Option(
            help="replay the log signed: none, records (each alone) or batches (each "
            "signer's records 16 to a signature, as services sign a flush)"
        ),
    ] = "none",
    workers: Annotated[
        int,
        typer.Option(
            min=1,
            help="also replay it split by workload between this many processes, as `fairshare "
            "audit replay --workers` (1: not)",
        ),
    ] = 2,
) -> None:
    """Audit replay throughput vs a bare orjson decode of the same file, and split between
    processes; one JSON object."""
    import orjson

    from services.bench.audit.bench import audit_benchmark

    if signed not in ("none", "records", "batches"):
        raise typer.BadParameter("none, records or batches", param_hint="--signed")
    result = audit_benchmark(events, log, strict, signed, workers)  # type: ignore[arg-type]
    typer.echo(orjson.dumps(result).decode())


@bench_app.command("audit-decisions")
def bench_audit_decisions(
    trace: Annotated[
        Path | None, typer.Option(help="trace to simulate (default: the Philly trace)")
    ] = None,
    budgets: Annotated[
        Path | None, typer.Option(help="budget weights (default: the Philly budgets)")
    ] = None,
    jobs: Annotated[
        int, typer.Option(min=1, help="jobs simulated (the first N after --offset)")
    ] = 1000,
    gpus: Annotated[int, typer.Option(help="simulated GPUs")] = 64,
    gpus_per_node: Annotated[int, typer.Option(help="GPUs per simulated node")] = 8,
    offset: Annotated[
        int, typer.Option(min=0, help="skip the first K jobs of the trace (sorted by arrival)")
    ] = 0,
    json_out: JsonOut = None,
) -> None:
    """Simulate a slice of a trace, then audit the decision log it wrote, in the same run.

    Prints one JSON object: events, passes, commands, violations, the simulation's and the
    audit's wall and CPU seconds and their ratio (target: the audit at most 2x the
    simulation). Exit 1 when the audit found a violation."""
    from services.bench.audit.decisions import AuditDecisionsConfig, audit_decisions_benchmark

    defaults = AuditDecisionsConfig()
    config = AuditDecisionsConfig(
        trace=trace or defaults.trace,
        budgets=budgets or defaults.budgets,
        jobs=jobs,
        offset=offset,
        gpus=gpus,
        gpus_per_node=gpus_per_node,
    )
    try:
        result = audit_decisions_benchmark(config)
    except (ValueError, OSError) as error:
        typer.echo(f"bench audit-decisions: {error}", err=True)
        raise typer.Exit(2) from None
    _emit(result, json_out)
    if not result["ok"]:
        raise typer.Exit(1)


@bench_app.command("budgets")
def bench_budgets(
    workdir: Annotated[Path, typer.Option(help="where the two databases are written")] = Path(
        ".fairshare/bench"
    ),
    large_weeks: Annotated[int, typer.Option(help="weeks of history of the large one")] = 26,
    fleet: Annotated[
        str | None,
        typer.Option(help="instead: a fleet's histories of these lengths (1d,1w,4w), GET /budgets"),
    ] = None,
    nodes: Annotated[int, typer.Option(help="--fleet: nodes of 8 GPUs")] = 24,
    heartbeat_s: Annotated[int, typer.Option(help="--fleet: seconds between heartbeats")] = 60,
) -> None:
    """GET /budgets' read of the read models at two history sizes (same last week); one JSON
    object with both p50s and their ratio. With ``--fleet``: GET /budgets p50/p99 on a fleet's
    history of each length, measured in one run, and the longest's over the shortest's."""
    import orjson

    from services.bench.budgets.fleet import fleet_benchmark
    from services.bench.budgets.read import budgets_read_benchmark

    workdir.mkdir(parents=True, exist_ok=True)
    if fleet is None:
        result = budgets_read_benchmark(workdir, large_weeks=large_weeks)
    else:
        lengths = tuple(part.strip() for part in fleet.split(",") if part.strip())
        result = fleet_benchmark(
            workdir,
            lengths,
            nodes=nodes,
            heartbeat_s=heartbeat_s,
            report=lambda line: typer.echo(line, err=True),
        )
    typer.echo(orjson.dumps(result, option=orjson.OPT_INDENT_2).decode())


@bench_app.command("pipeline")
def bench_pipeline(
    events: Annotated[int, typer.Option(help="facts to push through")] = 100_000,
    kafka: KafkaOption = None,
) -> None:
    """Live projection through a broker (facts in, charges in SQL) vs a bare consume."""
    import orjson

    from services.bench.pipeline import pipeline_benchmark

    typer.echo(orjson.dumps(pipeline_benchmark(events, kafka)).decode())


@bench_app.command("rebuild")
def bench_rebuild(
    events: Annotated[int, typer.Option(help="size of the synthetic log")] = 100_000,
    database_url: Annotated[
        str | None, typer.Option(help="project into this database (default: a new SQLite file)")
    ] = None,
) -> None:
    """The read models rebuilt from an existing log (the projector's first start), read a
    partition at a time; facts/s overall and per tenth, against a bare decode."""
    import orjson

    from services.bench.rebuild import rebuild_benchmark

    typer.echo(orjson.dumps(rebuild_benchmark(events, database_url)).decode())


@bench_app.command("chaos")
def bench_chaos(
    workloads: Annotated[int, typer.Option(help="submissions through the API")] = 1000,
    brokers: Annotated[int, typer.Option(help="Apache Kafka brokers: 1, or 3 (replicated)")] = 1,
    rate: Annotated[float, typer.Option(help="submissions per second")] = 20.0,
    security: Annotated[
        str,
        typer.Option(
            help="the brokers' listeners: sasl_ssl (as `fairshare up` starts them: every "
            "service its own principal) or plaintext"
        ),
    ] = "sasl_ssl",
    data_dir: Annotated[
        Path | None, typer.Option(help="keep the run here (logs, broker data) instead of a tmp dir")
    ] = None,
) -> None:
    """The stack under kill -9 (broker, each service, the lease holder) while workloads are
    submitted through the API; then the log is checked. Prints one JSON object; exit 1 when
    something acknowledged was lost or a check failed."""
    import orjson

    from services.bench.chaos.bench import ChaosConfig, chaos_benchmark
    from services.runtime.cli_options import err_console

    config = ChaosConfig(workloads=workloads, brokers=brokers, rate_per_s=rate, security=security)
    result = chaos_benchmark(config, data_dir, report=lambda line: err_console.print(line))
    typer.echo(orjson.dumps(result).decode())
    if not result["ok"]:
        raise typer.Exit(1)


def _emit(result: dict[str, object], json_out: Path | None) -> None:
    import orjson

    text = orjson.dumps(result, option=orjson.OPT_INDENT_2).decode()
    typer.echo(text)
    if json_out is not None:
        json_out.parent.mkdir(parents=True, exist_ok=True)
        json_out.write_text(text + "\n", encoding="utf-8")


@bench_app.command("latency")
def bench_latency(
    rate: Annotated[float, typer.Option(min=0.1, help="submissions per second")] = 50.0,
    duration: Annotated[float, typer.Option(min=1.0, help="seconds of submissions")] = 60.0,
    bootstrap: Annotated[
        str | None,
        typer.Option(
            "--bootstrap",
            help="an external Kafka (topics of a fresh prefix); default: an embedded Apache Kafka",
        ),
    ] = None,
    data_dir: Annotated[
        Path | None, typer.Option(help="keep the run here (logs, broker data) instead of a tmp dir")
    ] = None,
    json_out: JsonOut = None,
) -> None:
    """Submit-to-placed and submit-to-started latency at a steady rate, on Apache Kafka.

    The stack runs as `fairshare up` runs it; small 1-GPU jobs are submitted through the API;
    p50/p99/max from the send to the event times, with the broker round trip measured in the
    same run as the baseline. Prints one JSON object."""
    from services.bench.latency.bench import LatencyConfig, latency_benchmark
    from services.runtime.cli_options import err_console

    config = LatencyConfig(rate_per_s=rate, duration_s=duration)
    result = latency_benchmark(
        config, bootstrap, data_dir, report=lambda line: err_console.print(line, markup=False)
    )
    _emit(result, json_out)


@bench_app.command("throughput")
def bench_throughput(
    count: Annotated[int, typer.Option(min=1, help="jobs per phase (single and array)")] = 1000,
    clients: Annotated[int, typer.Option(min=1, help="threads submitting one job each")] = 16,
    large_array: Annotated[
        int, typer.Option(min=1, help="elements of the large array (target: accepted in 10 s)")
    ] = 10_000,
    sustained_rate: Annotated[float, typer.Option(min=0.1, help="submissions per second")] = 200.0,
    sustained_s: Annotated[float, typer.Option(min=1.0, help="seconds of sustained load")] = 60.0,
    slurm: Annotated[
        bool, typer.Option(help="measure sbatch on the local Slurm (bash .ci/start-slurm)")
    ] = True,
    bootstrap: Annotated[
        str | None,
        typer.Option(
            "--bootstrap",
            help="an external Kafka (topics of a fresh prefix); default: an embedded Apache Kafka",
        ),
    ] = None,
    data_dir: Annotated[
        Path | None, typer.Option(help="keep the run here (logs, broker data) instead of a tmp dir")
    ] = None,
    json_out: JsonOut = None,
) -> None:
    """Submissions per second, time to place them all and submit-to-start, Fairshare's API
    (single submissions from several clients, and arrays) against sbatch on a real Slurm in
    the same run, then a sustained rate. Prints one JSON object."""
    from services.bench.throughput.bench import ThroughputConfig, throughput_benchmark
    from services.runtime.cli_options import err_console

    config = ThroughputConfig(
        count=count,
        clients=clients,
        large_array=large_array,
        sustained_rate=sustained_rate,
        sustained_s=sustained_s,
        with_slurm=slurm,
    )
    result = throughput_benchmark(
        config, bootstrap, data_dir, report=lambda line: err_console.print(line, markup=False)
    )
    _emit(result, json_out)


@bench_app.command("idle")
def bench_idle(
    duration: Annotated[float, typer.Option(min=1.0, help="seconds measured")] = 30.0,
    warmup: Annotated[float, typer.Option(min=0.0, help="seconds idle before measuring")] = 60.0,
    nodes: Annotated[int, typer.Option(min=1, help="simulated nodes")] = 4,
    data_dir: Annotated[
        Path | None, typer.Option(help="run `fairshare up` here instead of in a tmp dir")
    ] = None,
    json_out: JsonOut = None,
) -> None:
    """CPU of an idle `fairshare up` (no submissions), per process, in % of one core.

    Every process of the stack (broker, launcher, each service) with its busiest threads, from
    /proc over the measured window after a warm-up. Prints one JSON object."""
    from services.bench.idle import IdleConfig, idle_benchmark
    from services.runtime.cli_options import err_console

    config = IdleConfig(duration_s=duration, warmup_s=warmup, nodes=nodes)
    result = idle_benchmark(
        config, data_dir, report=lambda line: err_console.print(line, markup=False)
    )
    _emit(result, json_out)


@bench_app.command("history")
def bench_history(
    nodes: Annotated[int, typer.Option(min=1, help="nodes of 8 GPUs in the synthetic fleet")] = 24,
    lengths: Annotated[
        str, typer.Option(help="history lengths, comma-separated (m, h, d, w: 1h,6h,1d,1w,4w)")
    ] = "1d,1w,4w",
    keep_dir: Annotated[
        Path | None,
        typer.Option(help="keep the run here (brokers, read models, logs) instead of a tmp dir"),
    ] = None,
    service_timeout: Annotated[
        float, typer.Option(min=1.0, help="seconds a service may take to catch up")
    ] = 3600.0,
    json_out: JsonOut = None,
) -> None:
    """Restarts, memory and reads against histories of a fleet at the agents' real cadence.

    For each length: a synthetic history of NODES nodes (heartbeats every 10 s with all 8
    readings, workloads placed, started and finished, their charges and usage snapshots)
    written to an Apache Kafka broker of its own; then every service started as `fairshare up`
    starts it, first on the history and again after it checkpointed: time to caught up and
    peak memory of each, `GET /budgets` p50/p99, a month's charges report and bytes on the
    broker per fleet-day. Prints one JSON object per history, then the summary: each figure
    per history, the ratio longest/shortest and the targets of issue 23."""
    from services.bench.history.bench import HistoryBenchConfig, history_benchmark
    from services.bench.history.gen import parse_length
    from services.bench.workdir import bench_dir
    from services.runtime.cli_options import err_console

    chosen = tuple(part.strip() for part in lengths.split(",") if part.strip())
    try:
        for length in chosen:
            parse_length(length)
    except ValueError as error:
        raise typer.BadParameter(str(error), param_hint="--lengths") from None
    if not chosen:
        raise typer.BadParameter("at least one length", param_hint="--lengths")
    config = HistoryBenchConfig(nodes=nodes, lengths=chosen, service_timeout_s=service_timeout)
    histories: list[dict[str, object]] = []

    def on_history(result: dict[str, object]) -> None:
        histories.append(result)
        _emit(result, None)

    with bench_dir(keep_dir, "history") as directory:
        summary = history_benchmark(
            config,
            directory,
            report=lambda line: err_console.print(line, markup=False),
            on_history=on_history,
        )
    _emit(summary, None)
    if json_out is not None:
        _emit_file({"histories": histories, "summary": summary}, json_out)


@bench_app.command("kills")
def bench_kills(
    length: Annotated[str, typer.Option(help="the history written first (m, h, d, w)")] = "1w",
    nodes: Annotated[int, typer.Option(min=1, help="nodes of 8 GPUs in the history")] = 2,
    checkpoint_every: Annotated[
        float, typer.Option(min=1.0, help="the services' checkpoint interval, seconds")
    ] = 20.0,
    keep_dir: Annotated[
        Path | None,
        typer.Option(help="keep the run here (broker, read models, logs) instead of a tmp dir"),
    ] = None,
    json_out: JsonOut = None,
) -> None:
    """`fairshare up` on a pre-generated history, every service killed with -9 in turn.

    A history of LENGTH (the fleet's real cadence) is written into the broker of a data dir,
    the stack is started on it as `fairshare up` starts it, and once every checkpointing
    service has saved a checkpoint the projector, charging, the API, the agent and the
    scheduler holding the lease are each killed with -9 and timed until back; then the log is
    audited (charges and decisions). Prints one JSON object; exit 1 when a service did not
    come back or an audit failed."""
    from services.bench.history.gen import parse_length
    from services.bench.history.kills import KillsConfig, kills_benchmark
    from services.bench.workdir import bench_dir
    from services.runtime.cli_options import err_console

    try:
        parse_length(length)
    except ValueError as error:
        raise typer.BadParameter(str(error), param_hint="--length") from None
    config = KillsConfig(length=length, nodes=nodes, checkpoint_every_s=checkpoint_every)
    with bench_dir(keep_dir, "kills") as directory:
        result = kills_benchmark(
            config, directory, report=lambda line: err_console.print(line, markup=False)
        )
    _emit(result, json_out)
    if not result["ok"]:
        raise typer.Exit(1)


@bench_app.command("kubernetes")
def bench_kubernetes(
    kubeconfig: Annotated[
        Path,
        typer.Option(
            envvar="FAIRSHARE_KUBECONFIG",
            help="kubeconfig of the cluster's admin (bash .ci/start-kubernetes writes this one)",
        ),
    ] = Path("/var/lib/fairshare-k8s/admin.kubeconfig"),
    jobs: Annotated[int, typer.Option(min=1, help="Jobs created")] = 100,
    pods_per_job: Annotated[int, typer.Option(min=1, help="one-GPU pods per Job (one gang)")] = 10,
    nodes: Annotated[int, typer.Option(min=1, help="KWOK nodes")] = 100,
    gpus_per_node: Annotated[int, typer.Option(min=1, help="GPUs per node")] = 10,
    timeout: Annotated[
        float, typer.Option("--timeout-s", min=1.0, help="seconds every pod may take to be bound")
    ] = 300.0,
    kafka: KafkaOption = None,
    data_dir: Annotated[
        Path | None, typer.Option(help="keep the run here (logs, broker data) instead of a tmp dir")
    ] = None,
    json_out: JsonOut = None,
) -> None:
    """Native Jobs bound by Fairshare on a real Kubernetes (KWOK nodes): pods bound per second
    against the API server's own pod-creation rate in the same run (target: ratio >= 0.9), and
    submit-to-bound p50/p99/max. A table on stderr, one JSON object on stdout; exit 1 when not
    every pod was bound, 2 when the run could not be made (no cluster, a load that does not
    fit, a service that died)."""
    from services.bench.kubernetes.bench import KubernetesBenchConfig
    from services.bench.kubernetes.command import run_command

    config = KubernetesBenchConfig(
        kubeconfig=kubeconfig, jobs=jobs, pods_per_job=pods_per_job, nodes=nodes,
        gpus_per_node=gpus_per_node, timeout_s=timeout,
    )  # fmt: skip
    run_command(config, kafka, data_dir, json_out)


def _emit_file(result: dict[str, object], path: Path) -> None:
    import orjson

    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(orjson.dumps(result, option=orjson.OPT_INDENT_2).decode() + "\n")
