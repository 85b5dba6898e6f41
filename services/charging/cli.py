"""``fairshare charging``: the ledger fold as a service, on either host."""

from __future__ import annotations

import os
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
    err_console,
)

#: ``charging``, merged into the top level of ``fairshare``.
charging_app = typer.Typer()


@charging_app.command()
def charging(
    kafka: KafkaOption = None,
    kafka_config: KafkaConfigOption = None,
    topic_prefix: PrefixOption = "fairshare.",
    host: Annotated[str, typer.Option(help="plain (confluent consumer) or faust")] = "plain",
    instance: Annotated[
        str | None,
        typer.Option(
            help="run as one shard of the charging group, named NAME (give each of several "
            "instances its own): the group shares the workloads topic's partitions out"
        ),
    ] = None,
    checkpoint_every_s: CheckpointEveryOption = 300.0,
    period_length: Annotated[
        str,
        typer.Option(
            envvar="FAIRSHARE_PERIOD_LENGTH",
            help="the ledger's closed periods: month (default), or day or hour (tests, "
            "benches); each is sealed once the horizon has passed its end (docs/design.md 4.5)",
        ),
    ] = "month",
    horizon_s: Annotated[
        int | None,
        typer.Option(
            envvar="FAIRSHARE_CHARGING_HORIZON_S",
            min=3600,
            help="a run's charges are final this long after its end: it leaves the fold, and "
            "a period is sealed once the horizon has passed its end (default: a week, the "
            "usage window; shorter for tests and benches)",
        ),
    ] = None,
    metrics_port: MetricsPortOption = 0,
    metrics_host: MetricsHostOption = "127.0.0.1",
) -> None:
    """Run the charging fold: facts in, charges and usage snapshots out (Ctrl-C stops)."""
    from events import TopicKind, Topics

    topics = Topics(prefix=topic_prefix)
    bootstrap = bootstrap_or_exit(kafka, topics)
    if host == "faust":
        os.environ["FAIRSHARE_KAFKA_BOOTSTRAP"] = bootstrap
        os.environ["FAIRSHARE_TOPIC_PREFIX"] = topic_prefix
        from services.charging.faust_serve import main as faust_main

        faust_main()
        return
    if host != "plain":
        err_console.print("[red]--host:[/] plain or faust")
        raise typer.Exit(2)
    from projections.periods import LENGTHS

    if period_length not in LENGTHS:
        err_console.print(f"[red]--period-length:[/] one of {', '.join(LENGTHS)}")
        raise typer.Exit(2)
    from events.times import DEFAULT_WINDOW_S
    from services.charging.serve import kafka_charging_host, kafka_charging_shard

    horizon_s = DEFAULT_WINDOW_S if horizon_s is None else horizon_s
    from services.charging import metrics
    from services.metrics.endpoint import serve_metrics
    from services.runtime.signals import stop_requested_on_signals

    every = checkpoint_every_s or None
    if instance is not None:
        shard = kafka_charging_shard(
            bootstrap,
            topics,
            instance,
            checkpoint_every_s=every,
            period_length=period_length,
            horizon_s=horizon_s,
        )
        group = shard.membership.group
        console.print(f"charging shard {instance} from {bootstrap} (group {group}); Ctrl-C stops")
    else:
        shard = kafka_charging_host(
            bootstrap,
            topics,
            checkpoint_every_s=every,
            period_length=period_length,
            horizon_s=horizon_s,
        )
        console.print(f"charging from {bootstrap} (topics {topic_prefix}*); Ctrl-C stops")
    inputs = [topics.name(kind) for kind in (TopicKind.WORKLOADS, TopicKind.HEARTBEATS)]
    metrics.register(shard.host, inputs)
    serve_metrics(metrics_port, metrics_host)
    with stop_requested_on_signals() as stop:
        shard.run(stop)
    console.print(f"published {shard.host.published} charge(s)")
