"""``fairshare projector``: the SQL read models kept up to date from the log."""

from __future__ import annotations

import logging
from typing import Annotated

import typer

from services.runtime.cli_options import (
    KafkaConfigOption,
    KafkaOption,
    MetricsHostOption,
    MetricsPortOption,
    PrefixOption,
    bootstrap_or_exit,
    console,
)

log = logging.getLogger("services.projector")

#: The exit status when the log no longer holds the read models' positions.
TRUNCATED_EXIT = 3

#: ``projector``, merged into the top level of ``fairshare``.
projector_app = typer.Typer()

DatabaseOption = Annotated[
    str,
    typer.Option(
        "--database-url",
        envvar="FAIRSHARE_DATABASE_URL",
        help="SQLAlchemy URL of the read models (default: a SQLite file in .fairshare)",
    ),
]


@projector_app.command()
def projector(
    kafka: KafkaOption = None,
    kafka_config: KafkaConfigOption = None,
    topic_prefix: PrefixOption = "fairshare.",
    database_url: DatabaseOption = "sqlite:///.fairshare/fairshare.db",
    instance: Annotated[
        str,
        typer.Option(
            help="this projector's member id in its consumer group: give each of several "
            "projectors of one database its own, and they share the partitions out"
        ),
    ] = "static",
    metrics_port: MetricsPortOption = 0,
    metrics_host: MetricsHostOption = "127.0.0.1",
) -> None:
    """Keep the SQL read models up to date from the log (migrates first; Ctrl-C stops)."""
    from events import Topics
    from services.metrics.endpoint import serve_metrics
    from services.projector.host import LogTruncatedError
    from services.projector.serve import run_projector
    from services.read_models.migrate import engine_for, migrate
    from services.runtime.signals import stop_requested_on_signals

    topics = Topics(prefix=topic_prefix)
    bootstrap = bootstrap_or_exit(kafka, topics)
    engine = engine_for(database_url)
    migrate(engine)
    serve_metrics(metrics_port, metrics_host)
    console.print(f"projecting {bootstrap} into {database_url}; Ctrl-C stops")
    with stop_requested_on_signals() as stop:
        try:
            applied = run_projector(bootstrap, engine, stop, topics, instance=instance)
        except LogTruncatedError as error:
            # One line an operator can act on; the exit status stops `fairshare up` too.
            log.error(
                str(error),
                extra={
                    "topic": error.topic,
                    "partition": error.partition,
                    "stored_offset": error.stored,
                    "end_offset": error.end,
                },
            )
            raise typer.Exit(TRUNCATED_EXIT) from None
    console.print(f"applied {applied} event(s)")
