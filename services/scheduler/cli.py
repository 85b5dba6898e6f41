"""``fairshare scheduler``: the scheduler service over Kafka, leader by lease or alone; with
``--lease-per-pool``, leader of the pools whose leases it holds (several instances share the
pools out, ``--pools`` naming the ones each prefers)."""

from __future__ import annotations

from typing import Annotated

import typer

from services.runtime.cli_options import (
    CheckpointEveryOption,
    KafkaConfigOption,
    KafkaOption,
    MetricsHostOption,
    MetricsPortOption,
    PrefixOption,
    bootstrap_or_exit,
    console,
)

#: ``scheduler``, merged into the top level of ``fairshare``.
scheduler_app = typer.Typer()


@scheduler_app.command()
def scheduler(
    kafka: KafkaOption = None,
    kafka_config: KafkaConfigOption = None,
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
    lease_ttl_s: Annotated[
        float, typer.Option(help="a standby claims the lease after no renewal for this long")
    ] = 10.0,
    lease_renew_s: Annotated[float, typer.Option(help="the leader renews this often")] = 2.0,
    min_pass_interval_s: Annotated[
        float, typer.Option(help="at most one pass this often: a burst is decided together")
    ] = 0.2,
    lease_per_pool: Annotated[
        bool,
        typer.Option(
            "--lease-per-pool",
            help="a lease per pool: lead the pools whose leases this instance holds (scale out)",
        ),
    ] = False,
    pools: Annotated[
        str,
        typer.Option(
            help="with --lease-per-pool: pools this instance prefers, comma-separated (claimed "
            "as soon as nobody renews them; any other pool only after --lease-adopt-s)"
        ),
    ] = "",
    lease_adopt_s: Annotated[
        float | None,
        typer.Option(
            help="with --lease-per-pool: claim a pool not preferred after no renewal for this "
            "long (default: twice --lease-ttl-s)"
        ),
    ] = None,
    warm_standby: Annotated[
        bool,
        typer.Option(
            "--warm-standby",
            help="without the lease, keep folding the log (default: read only the lease and "
            "catch up from the latest checkpoint on taking it over; always warm without "
            "checkpoints or with --lease-per-pool)",
        ),
    ] = False,
    checkpoint_every_s: CheckpointEveryOption = 300.0,
    metrics_port: MetricsPortOption = 0,
    metrics_host: MetricsHostOption = "127.0.0.1",
) -> None:
    """Run the scheduler service: the pure pass over the log, commands out (Ctrl-C stops)."""
    from events import Topics
    from services.metrics.endpoint import serve_metrics
    from services.runtime.signals import stop_requested_on_signals
    from services.scheduler import metrics
    from services.scheduler.host import SchedulerConfig
    from services.scheduler.lease import LeaseTiming, LogLease, LogPoolLeases
    from services.scheduler.serve import kafka_leases, kafka_scheduler

    preferred = sorted({pool.strip() for pool in pools.split(",") if pool.strip()})
    if preferred and not lease_per_pool:
        console.print("[red]--pools:[/] only with --lease-per-pool")
        raise typer.Exit(2)
    if lease_per_pool and not lease:
        console.print("[red]--lease-per-pool:[/] not with --sole")
        raise typer.Exit(2)
    if lease_adopt_s is not None and lease_adopt_s < lease_ttl_s:
        console.print("[red]--lease-adopt-s:[/] at least --lease-ttl-s")
        raise typer.Exit(2)
    topics = Topics(prefix=topic_prefix)
    bootstrap = bootstrap_or_exit(kafka, topics)
    leases: LogLease | LogPoolLeases | None = None
    if lease:
        margin_s = min(3.0, lease_ttl_s / 3)
        timing = LeaseTiming(ttl_s=lease_ttl_s, renew_s=lease_renew_s, margin_s=margin_s)
        leases = kafka_leases(
            bootstrap,
            topics,
            timing,
            per_pool=lease_per_pool,
            preferred=preferred,
            adopt_s=lease_adopt_s,
        )
    service = kafka_scheduler(
        bootstrap,
        topics,
        lease=leases if isinstance(leases, LogLease) else None,
        pool_leases=leases if isinstance(leases, LogPoolLeases) else None,
        config=SchedulerConfig(
            tick_s=tick_s,
            heartbeat_timeout_s=heartbeat_timeout_s,
            grace_period_s=grace_period_s,
            min_pass_interval_s=min_pass_interval_s,
            warm_standby=warm_standby,
        ),
        checkpoint_every_s=checkpoint_every_s or None,
    )
    metrics.register(service.figures)
    serve_metrics(metrics_port, metrics_host)
    mode = ""
    if lease_per_pool:
        mode = f"; a lease per pool, preferring {', '.join(preferred) or 'none'}"
    console.print(f"scheduling from {bootstrap} (topics {topic_prefix}*{mode}); Ctrl-C stops")
    with stop_requested_on_signals() as stop:
        service.run(stop)
    console.print(f"{service.passes} pass(es), {service.published} event(s) published")
