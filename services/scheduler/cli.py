"""``fairshare scheduler``: the scheduler service over Kafka, leader by lease or alone."""

from __future__ import annotations

from typing import Annotated

import typer

from services.runtime.cli_options import KafkaOption, PrefixOption, bootstrap_or_exit, console

#: ``scheduler``, merged into the top level of ``fairshare``.
scheduler_app = typer.Typer()


@scheduler_app.command()
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
    lease_ttl_s: Annotated[
        float, typer.Option(help="a standby claims the lease after no renewal for this long")
    ] = 10.0,
    lease_renew_s: Annotated[float, typer.Option(help="the leader renews this often")] = 2.0,
    min_pass_interval_s: Annotated[
        float, typer.Option(help="at most one pass this often: a burst is decided together")
    ] = 0.2,
) -> None:
    """Run the scheduler service: the pure pass over the log, commands out (Ctrl-C stops)."""
    from events import Topics
    from services.runtime.signals import stop_requested_on_signals
    from services.scheduler.lease import LeaseTiming, LogLease, SoleInstance
    from services.scheduler.service import SchedulerConfig, SchedulerService

    topics = Topics(prefix=topic_prefix)
    bootstrap = bootstrap_or_exit(kafka, topics)
    service = SchedulerService.over_kafka(
        bootstrap,
        topics,
        lease=(
            LogLease(
                bootstrap,
                topics,
                timing=LeaseTiming(
                    ttl_s=lease_ttl_s, renew_s=lease_renew_s, margin_s=min(3.0, lease_ttl_s / 3)
                ),
            )
            if lease
            else SoleInstance()
        ),
        config=SchedulerConfig(
            tick_s=tick_s,
            heartbeat_timeout_s=heartbeat_timeout_s,
            grace_period_s=grace_period_s,
            min_pass_interval_s=min_pass_interval_s,
        ),
    )
    console.print(f"scheduling from {bootstrap} (topics {topic_prefix}*); Ctrl-C stops")
    with stop_requested_on_signals() as stop:
        service.run(stop)
    console.print(f"{service.passes} pass(es), {service.published} event(s) published")
