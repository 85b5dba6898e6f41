"""``fairshare api ...``: the Typer sub-app that runs the HTTP API."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from events import Topics
from services.runtime.cli_options import KafkaOption, PrefixOption, bootstrap_or_exit

api_app = typer.Typer(no_args_is_help=True, help="The HTTP API (FastAPI; OpenAPI at /docs).")


@api_app.callback()
def _api() -> None:
    """The HTTP API (FastAPI; OpenAPI at /docs)."""


@api_app.command("serve")
def serve_command(
    kafka: KafkaOption = None,
    topic_prefix: PrefixOption = "fairshare.",
    tokens: Annotated[
        Path | None,
        typer.Option(
            "--tokens",
            envvar="FAIRSHARE_API_TOKENS",
            help='JSON file {"<token>": {"user": "ana", "admin": false}}; default: demo tokens',
        ),
    ] = None,
    host: Annotated[str, typer.Option(help="interface to listen on")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="port to listen on")] = 8000,
    database_url: Annotated[
        str | None,
        typer.Option(
            envvar="FAIRSHARE_DATABASE_URL",
            help="read models for the reports and the dashboard's usage series",
        ),
    ] = None,
) -> None:
    """Serve the API over Kafka until interrupted."""
    from services.api.auth import TokenFileError
    from services.api.server import serve

    bootstrap = bootstrap_or_exit(kafka, Topics(prefix=topic_prefix))
    try:
        serve(bootstrap, topic_prefix, tokens, host, port, database_url)
    except TokenFileError as error:
        typer.echo(f"error: {error}", err=True)
        raise typer.Exit(2) from error
