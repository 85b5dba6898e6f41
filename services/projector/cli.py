"""``fairshare projector``: the SQL read models kept up to date from the log."""

from __future__ import annotations

from typing import Annotated

import typer

from events import Topics
from services.runtime.cli_options import KafkaOption, PrefixOption, bootstrap_or_exit, console

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
