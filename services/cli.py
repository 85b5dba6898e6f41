"""The ``fairshare`` command line.

Typer gives typed options, ``--help`` and shell completion for free; Rich renders the tables.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console

from events import Topics
from services.runtime.cli_options import KafkaOption, PrefixOption, bootstrap_or_exit

app = typer.Typer(
    no_args_is_help=True,
    add_completion=False,
    help="Fairshare: GPU time by budgets, hierarchical fair share, every fact an event on Kafka.",
)
schemas_app = typer.Typer(no_args_is_help=True, help="JSON Schemas of every event.")
broker_app = typer.Typer(no_args_is_help=True, help="Local Kafka-protocol brokers.")
app.add_typer(schemas_app, name="schemas")
app.add_typer(broker_app, name="broker")

console = Console()
err_console = Console(stderr=True, soft_wrap=True)

DEFAULT_DATA_DIR = Path(os.environ.get("FAIRSHARE_DATA_DIR", ".fairshare"))


@app.callback()
def _root(
    log_level: Annotated[str, typer.Option(envvar="FAIRSHARE_LOG_LEVEL")] = "WARNING",
    log_json: Annotated[bool, typer.Option("--log-json", help="JSON log lines")] = False,
) -> None:
    from services.runtime.logs import configure_logging

    configure_logging(log_level, json=log_json)


@app.command()
def up(
    kafka: Annotated[
        str | None,
        typer.Option(
            "--kafka",
            envvar="FAIRSHARE_KAFKA_BOOTSTRAP",
            help="bootstrap servers of an existing Kafka; default: start the embedded noida-db",
        ),
    ] = None,
    data_dir: Annotated[Path, typer.Option(help="broker data, the SQLite file and logs")] = (
        DEFAULT_DATA_DIR
    ),
    database_url: Annotated[
        str | None,
        typer.Option(
            envvar="FAIRSHARE_DATABASE_URL",
            help="read models' database (default: SQLite in --data-dir)",
        ),
    ] = None,
    duration: Annotated[
        float | None, typer.Option(help="stop after this many seconds (default: until Ctrl-C)")
    ] = None,
    topic_prefix: PrefixOption = "fairshare.",
    agent: Annotated[str, typer.Option(help="simulated, or local (really runs commands)")] = (
        "simulated"
    ),
    api_port: Annotated[int, typer.Option(help="port of the API and dashboard")] = 8000,
    nodes: Annotated[int, typer.Option(help="simulated nodes")] = 4,
    gpus_per_node: Annotated[int, typer.Option(help="GPUs per simulated node")] = 4,
    submit_every: Annotated[
        float, typer.Option(help="mean seconds between synthetic submissions (0: none)")
    ] = 4.0,
) -> None:
    """The whole system on embedded defaults: broker, API, scheduler, projections, a cluster
    agent and a steady stream of workloads. Ctrl-C stops everything."""
    from services.brokers import BrokerStartError, external_broker, start_noida
    from services.launcher import UpConfig, run_stack
    from services.runtime.signals import stop_requested_on_signals

    if agent not in ("simulated", "local"):
        err_console.print("[red]--agent:[/] simulated or local")
        raise typer.Exit(2)
    data_dir.mkdir(parents=True, exist_ok=True)
    try:
        if kafka:
            broker = external_broker(kafka)
        else:
            console.print(f"starting the embedded broker (noida-db, data in {data_dir}/broker)")
            broker = start_noida(data_dir / "broker")
    except BrokerStartError as error:
        err_console.print(f"[red]no broker:[/] {error}")
        raise typer.Exit(2) from error
    config = UpConfig(
        bootstrap=broker.bootstrap,
        topics=Topics(prefix=topic_prefix),
        data_dir=data_dir,
        database_url=database_url or f"sqlite:///{data_dir.resolve()}/fairshare.db",
        api_port=api_port,
        agent=agent,
        nodes=nodes,
        gpus_per_node=gpus_per_node,
        submit_every_s=submit_every,
    )
    started = time.monotonic()
    try:
        console.print(f"broker   {broker.description}")
        console.print(f"database {config.database_url}")
        console.print("starting charging, projector, scheduler, agent and API ...")
        with stop_requested_on_signals() as stop:

            def should_stop() -> bool:
                return stop() or (duration is not None and time.monotonic() - started > duration)

            if duration is None:
                console.print("press Ctrl-C to stop")
            stack, problems = run_stack(config, should_stop, lambda line: console.print(line))
    except RuntimeError as error:
        err_console.print(f"[red]failed:[/] {error}")
        raise typer.Exit(1) from error
    finally:
        broker.stop()
    console.print(f"stopped; {stack.submitted} workload(s) submitted by the demo stream")
    for problem in problems:
        err_console.print(f"[red]{problem}[/]")
    raise typer.Exit(1 if problems else 0)


@schemas_app.command("generate")
def schemas_generate(
    directory: Annotated[Path | None, typer.Option("--dir")] = None,
) -> None:
    """Write schemas/*.json from the event models."""
    from events.schema_export import DEFAULT_SCHEMA_DIR, write_schemas

    target = directory or DEFAULT_SCHEMA_DIR
    names = write_schemas(target)
    console.print(f"wrote {len(names)} schema files to {target}")


@schemas_app.command("check")
def schemas_check(
    directory: Annotated[Path | None, typer.Option("--dir")] = None,
) -> None:
    """Fail if the checked-in schemas differ from the models."""
    from events.schema_export import DEFAULT_SCHEMA_DIR, schema_drift

    target = directory or DEFAULT_SCHEMA_DIR
    problems = schema_drift(target)
    for problem in problems:
        err_console.print(f"[red]schema drift:[/] {problem}")
    if problems:
        err_console.print("regenerate with: fairshare schemas generate")
        raise typer.Exit(1)
    console.print(f"schemas up to date in {target}")


@broker_app.command("fetch-kafka")
def broker_fetch_kafka() -> None:
    """Download the Apache Kafka broker jars from Maven Central into the cache."""
    from services.brokers import KAFKA_VERSION, BrokerStartError, fetch_kafka_jars

    try:
        libs = fetch_kafka_jars()
    except BrokerStartError as error:
        err_console.print(f"[red]fetch failed:[/] {error}")
        raise typer.Exit(2) from error
    console.print(f"Apache Kafka {KAFKA_VERSION} jars in {libs}")


@broker_app.command("run")
def broker_run(
    kind: Annotated[str, typer.Option(help="apache-kafka or noida")] = "apache-kafka",
    data_dir: Annotated[Path, typer.Option()] = DEFAULT_DATA_DIR / "dev-broker",
) -> None:
    """Run a local broker in the foreground until Ctrl-C (for development)."""
    from services.brokers import BrokerStartError, start_broker

    try:
        broker = start_broker(kind, data_dir)
    except BrokerStartError as error:
        err_console.print(f"[red]no broker:[/] {error}")
        raise typer.Exit(2) from error
    console.print(f"{broker.description}\nbootstrap: {broker.bootstrap}  (Ctrl-C stops it)")
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        pass
    finally:
        broker.stop()


@app.command()
def simulate(
    trace: Annotated[Path, typer.Option(help="job trace CSV (timestamp,duration,num_gpus,...)")],
    budgets: Annotated[Path, typer.Option(help="budget weights CSV (budget,weight)")],
    gpus: Annotated[int, typer.Option(help="cluster size in GPUs")],
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
) -> None:
    """Replay a trace through the scheduler (and baselines) on a simulated cluster."""
    from services.simulator.engine import SimulationConfig
    from services.simulator.runner import POLICIES
    from services.simulator.runner import simulate as run_simulation
    from services.simulator.trace import TraceError, load_budgets, load_trace

    chosen = list(POLICIES) if policy == "all" else [policy]
    if any(name not in POLICIES for name in chosen):
        err_console.print(f"[red]--policy:[/] expected one of {', '.join(POLICIES)} or all")
        raise typer.Exit(2)
    try:
        config = SimulationConfig(
            gpus=gpus, gpus_per_node=gpus_per_node, grace_period_s=grace_period
        )
        jobs = load_trace(trace, limit=limit)
        weights = load_budgets(budgets)
    except (TraceError, ValueError, OSError) as error:
        err_console.print(f"[red]cannot simulate:[/] {error}")
        raise typer.Exit(2) from error
    console.print(
        f"{len(jobs)} jobs, {gpus} GPUs ({gpus // gpus_per_node} nodes of {gpus_per_node}); "
        f"contracts: {config.contract.describe()}"
    )
    try:
        run_simulation(
            jobs, weights, config, chosen, out, console, plots=plots, events_out=events_out
        )
    except ValueError as error:
        err_console.print(f"[red]cannot simulate:[/] {error}")
        raise typer.Exit(2) from error


bench_app = typer.Typer(no_args_is_help=True, help="Benchmarks (figures, not pass/fail).")
app.add_typer(bench_app, name="bench")


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

    from services.bench.benchmarks import scheduler_benchmark

    result = scheduler_benchmark(
        trace=trace,
        budgets=budgets,
        nodes=nodes,
        pending=pending,
        leaf_budgets=budget_count,
        trials=trials,
    )
    typer.echo(orjson.dumps(result).decode())


DatabaseOption = Annotated[
    str,
    typer.Option(
        "--database-url",
        envvar="FAIRSHARE_DATABASE_URL",
        help="SQLAlchemy URL of the read models (default: a SQLite file in .fairshare)",
    ),
]


@app.command()
def charging(
    kafka: KafkaOption = None,
    topic_prefix: PrefixOption = "fairshare.",
    host: Annotated[str, typer.Option(help="plain (confluent consumer) or faust")] = "plain",
) -> None:
    """Run the charging fold: facts in, charges and usage snapshots out (Ctrl-C stops)."""
    topics = Topics(prefix=topic_prefix)
    bootstrap = bootstrap_or_exit(kafka, topics)
    if host == "faust":
        os.environ["FAIRSHARE_KAFKA_BOOTSTRAP"] = bootstrap
        os.environ["FAIRSHARE_TOPIC_PREFIX"] = topic_prefix
        from services.charging.faust_host import main as faust_main

        faust_main()
        return
    if host != "plain":
        err_console.print("[red]--host:[/] plain or faust")
        raise typer.Exit(2)
    from services.charging.host import ChargingHost
    from services.runtime.signals import stop_requested_on_signals

    charging_host = ChargingHost(bootstrap, topics)
    console.print(f"charging from {bootstrap} (topics {topic_prefix}*); Ctrl-C stops")
    with stop_requested_on_signals() as stop:
        charging_host.run(stop)
    console.print(f"published {charging_host.published} charge(s)")


@app.command()
def projector(
    kafka: KafkaOption = None,
    topic_prefix: PrefixOption = "fairshare.",
    database_url: DatabaseOption = "sqlite:///.fairshare/fairshare.db",
) -> None:
    """Keep the SQL read models up to date from the log (migrates first; Ctrl-C stops)."""
    from services.projector.host import run_projector
    from services.read_models.migrate import engine_for, migrate
    from services.runtime.signals import stop_requested_on_signals

    topics = Topics(prefix=topic_prefix)
    bootstrap = bootstrap_or_exit(kafka, topics)
    engine = engine_for(database_url)
    migrate(engine)
    console.print(f"projecting {bootstrap} into {database_url}; Ctrl-C stops")
    with stop_requested_on_signals() as stop:
        applied = run_projector(bootstrap, engine, stop, topics)
    console.print(f"applied {applied} event(s)")


audit_app = typer.Typer(no_args_is_help=True, help="Replay, verify and explain the event log.")
app.add_typer(audit_app, name="audit")
EventsOption = Annotated[
    Path | None, typer.Option("--events", help="an exported event log (one envelope per line)")
]


def _log(events: Path | None, kafka: str | None, topic_prefix: str) -> Iterable[Any]:
    """The whole log, from a file or (with --kafka) from the live topics."""
    from services.audit.sources import log_from_file, log_from_kafka

    if events is not None:
        if not events.is_file():
            err_console.print(f"[red]--events:[/] {events} is not a file")
            raise typer.Exit(2)
        return log_from_file(events)
    if kafka:
        from events.ndjson import BadLine

        log = list(log_from_kafka(kafka, Topics(prefix=topic_prefix)))
        invalid = [item for item in log if isinstance(item, BadLine)]
        if invalid:
            # Records that never were events: consumers dead-lettered them; they are no facts.
            err_console.print(
                f"{len(invalid)} invalid record(s) on the topics skipped (they are in the "
                f"dead-letter topic), first: {invalid[0].reason}"
            )
        return [item for item in log if not isinstance(item, BadLine)]
    err_console.print("[red]give --events FILE or --kafka BOOTSTRAP[/]")
    raise typer.Exit(2)


@audit_app.command("replay")
def audit_replay(
    events: EventsOption = None,
    kafka: KafkaOption = None,
    topic_prefix: PrefixOption = "fairshare.",
    database_url: Annotated[
        str | None,
        typer.Option(help="compare with the ledger stored in these read models instead"),
    ] = None,
) -> None:
    """Recompute every charge from the facts and compare, entry by entry, with the charges
    recorded in the log (or stored in the read models, with --database-url)."""
    from services.audit.replay import compare, replay
    from services.audit.sources import stored_charges

    result = replay(_log(events, kafka, topic_prefix), keep_recomputed=bool(database_url))
    if database_url:
        stored = stored_charges(database_url)
        result.recorded_count = len(stored)
        result.differences = compare(stored, result.recomputed, check_order=False)
    for bad in result.bad_lines:
        err_console.print(f"[red]line {bad.line}:[/] {bad.reason}")
    for difference in result.differences:
        console.print(difference, highlight=False)
    where = "in the read models" if database_url else "in the log"
    console.print(
        f"{result.events} events, {result.recorded_count} charges {where}, "
        f"{result.recomputed_count} recomputed from the facts"
    )
    if result.identical:
        console.print("identical")
        return
    raise typer.Exit(1)


@audit_app.command("verify")
def audit_verify(
    events: EventsOption = None,
    kafka: KafkaOption = None,
    topic_prefix: PrefixOption = "fairshare.",
) -> None:
    """Check the ledger's invariants over the log."""
    from services.audit.verify import verify

    checked, problems = verify(_log(events, kafka, topic_prefix))
    for problem in problems:
        console.print(f"[red]violation:[/] {problem}", highlight=False)
    console.print(f"{checked} charges checked, {len(problems)} violation(s)")
    if problems:
        raise typer.Exit(1)


@audit_app.command("explain")
def audit_explain(
    workload: Annotated[str, typer.Argument(help="the workload id")],
    events: EventsOption = None,
    kafka: KafkaOption = None,
    topic_prefix: PrefixOption = "fairshare.",
) -> None:
    """The causal chain of one workload: submission, decisions, runs, charges, end."""
    from services.audit.explain import explain

    for line in explain(_log(events, kafka, topic_prefix), workload):
        console.print(line, highlight=False, soft_wrap=True)


events_app = typer.Typer(no_args_is_help=True, help="Export the event log.")
app.add_typer(events_app, name="events")


@events_app.command("export")
def events_export(
    out: Annotated[Path, typer.Option(help="file to write (one envelope per line)")],
    kafka: KafkaOption = None,
    topic_prefix: PrefixOption = "fairshare.",
) -> None:
    """Copy every event from Kafka (up to its current end) into a file an auditor can take."""
    from services.brokers import BrokerStartError, external_broker
    from services.bus.export import export_events

    try:
        broker = external_broker(kafka)
    except BrokerStartError as error:
        err_console.print(f"[red]no broker:[/] {error}")
        raise typer.Exit(2) from error
    result = export_events(broker.bootstrap, out, Topics(prefix=topic_prefix))
    console.print(
        f"{result.events} events from {result.partitions} partition(s) written to {out}"
        + (
            f"; {result.skipped} invalid record(s) skipped (see the dead-letter topic)"
            if result.skipped
            else ""
        )
    )


@bench_app.command("audit")
def bench_audit(
    events: Annotated[int, typer.Option(help="size of the synthetic log")] = 1_000_000,
    log: Annotated[
        Path | None, typer.Option("--events-file", help="replay this log instead")
    ] = None,
) -> None:
    """Audit replay throughput vs a bare orjson decode of the same file; one JSON object."""
    import orjson

    from services.bench.benchmarks import audit_benchmark

    typer.echo(orjson.dumps(audit_benchmark(events, log)).decode())


@bench_app.command("pipeline")
def bench_pipeline(
    events: Annotated[int, typer.Option(help="facts to push through")] = 100_000,
    kafka: KafkaOption = None,
) -> None:
    """Live projection through a broker (facts in, charges in SQL) vs a bare consume."""
    import orjson

    from services.bench.benchmarks import pipeline_benchmark

    typer.echo(orjson.dumps(pipeline_benchmark(events, kafka)).decode())


@app.command()
def scheduler(
    kafka: KafkaOption = None,
    topic_prefix: PrefixOption = "fairshare.",
    tick_s: Annotated[float, typer.Option(help="a pass at least this often")] = 5.0,
    heartbeat_timeout_s: Annotated[float, typer.Option(help="a silent node is down after")] = 60.0,
    grace_period_s: Annotated[int, typer.Option(help="SIGTERM-to-SIGKILL of preemptions")] = 30,
    lease: Annotated[
        bool,
        typer.Option(
            "--lease/--sole",
            help="take the lease (one active scheduler, standbys take over) or run alone",
        ),
    ] = True,
) -> None:
    """Run the scheduler service: the pure pass over the log, commands out (Ctrl-C stops)."""
    from services.runtime.signals import stop_requested_on_signals
    from services.scheduler.lease import KafkaGroupLease, SoleInstance
    from services.scheduler.service import SchedulerConfig, SchedulerService

    topics = Topics(prefix=topic_prefix)
    bootstrap = bootstrap_or_exit(kafka, topics)
    service = SchedulerService.over_kafka(
        bootstrap,
        topics,
        lease=KafkaGroupLease(bootstrap, topics) if lease else SoleInstance(),
        config=SchedulerConfig(
            tick_s=tick_s, heartbeat_timeout_s=heartbeat_timeout_s, grace_period_s=grace_period_s
        ),
    )
    console.print(f"scheduling from {bootstrap} (topics {topic_prefix}*); Ctrl-C stops")
    with stop_requested_on_signals() as stop:
        service.run(stop)
    console.print(f"{service.passes} pass(es), {service.published} event(s) published")


def _register_services() -> None:
    from services.agents.cli import agent_app
    from services.api.cli import api_app
    from services.client.commands import register as register_client
    from services.reports.cli import report_app

    app.add_typer(api_app, name="api")
    app.add_typer(report_app, name="report")
    app.add_typer(agent_app, name="agent")
    register_client(app)


_register_services()


def main() -> None:
    app()


if __name__ == "__main__":
    main()
