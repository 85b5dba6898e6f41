"""``fairshare api ...``: the Typer sub-app that runs the HTTP API."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from services.runtime.cli_options import (
    DEFAULT_DATA_DIR,
    CheckpointEveryOption,
    KafkaConfigOption,
    KafkaOption,
    PrefixOption,
    bootstrap_or_exit,
)

api_app = typer.Typer(no_args_is_help=True, help="The HTTP API (FastAPI; OpenAPI at /docs).")


@api_app.callback()
def _api() -> None:
    """The HTTP API (FastAPI; OpenAPI at /docs)."""


@api_app.command("serve")
def serve_command(
    kafka: KafkaOption = None,
    kafka_config: KafkaConfigOption = None,
    topic_prefix: PrefixOption = "fairshare.",
    tokens: Annotated[
        Path | None,
        typer.Option(
            "--tokens",
            envvar="FAIRSHARE_API_TOKENS",
            help="tokens file (hashes; see `fairshare tokens add`); default: the demo tokens, "
            "on a loopback --host only",
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
    checkpoint_every_s: CheckpointEveryOption = 300.0,
) -> None:
    """Serve the API over Kafka until interrupted."""
    from events import Topics
    from services.api.server import DemoTokensError, serve, tokens_for
    from services.api.tokens_file import TokenFileError

    try:
        tokens_for(tokens, host)  # before Kafka: a refusal says so at once
        bootstrap = bootstrap_or_exit(kafka, Topics(prefix=topic_prefix))
        serve(
            bootstrap,
            topic_prefix,
            tokens,
            host,
            port,
            database_url,
            checkpoint_every_s=checkpoint_every_s or None,
        )
    except (TokenFileError, DemoTokensError) as error:
        typer.echo(f"error: {error}", err=True)
        raise typer.Exit(2) from error


#: ``fairshare tokens ...``: the API's tokens file.
tokens_app = typer.Typer(
    no_args_is_help=True, help="The API's tokens file (SHA-256 hashes; tokens shown once)."
)

#: Inside the data dir, which git ignores: a tokens file holds no secret, but need not be public.
DEFAULT_TOKENS_FILE = DEFAULT_DATA_DIR / "tokens.json"
TokensFileOption = Annotated[
    Path,
    typer.Option(
        "--file",
        envvar="FAIRSHARE_API_TOKENS",
        help="the tokens file (the one `fairshare api serve --tokens` reads)",
    ),
]


@tokens_app.command("add")
def tokens_add(
    user: Annotated[str, typer.Argument(help="who the token is for")],
    file: TokensFileOption = DEFAULT_TOKENS_FILE,
    admin: Annotated[bool, typer.Option("--admin", help="an admin token")] = False,
) -> None:
    """Add a fresh token for USER (creating the file) and print it, once.

    The file keeps only the token's SHA-256, so it cannot be shown again. The API reads the
    file when it starts."""
    from services.api.tokens_file import TokenFileError, add_token

    try:
        token = add_token(file, user, admin=admin)
    except TokenFileError as error:
        typer.echo(f"error: {error}", err=True)
        raise typer.Exit(2) from error
    typer.echo(token)
    role = "an admin token" if admin else "a token"
    typer.echo(
        f"added {role} for {user} to {file} (only its hash is stored: pass the token on now; "
        "restart the API for it to take effect)",
        err=True,
    )


@tokens_app.command("list")
def tokens_list(file: TokensFileOption = DEFAULT_TOKENS_FILE) -> None:
    """Who holds tokens: user, admin, when added and the start of the hash (never a token)."""
    from services.api.tokens_file import TokenFileError, read_document

    try:
        document = read_document(file)
    except TokenFileError as error:
        typer.echo(f"error: {error}", err=True)
        raise typer.Exit(2) from error
    for record in document.tokens:
        role = "admin" if record.admin else "user"
        typer.echo(f"{record.user}\t{role}\t{record.added or '-'}\tsha256:{record.sha256[:12]}")


@tokens_app.command("remove")
def tokens_remove(
    user: Annotated[str, typer.Argument(help="whose tokens to remove")],
    file: TokensFileOption = DEFAULT_TOKENS_FILE,
) -> None:
    """Remove every token of USER (exit 1 if there was none).

    The API reads the file when it starts: restart it for the removal to take effect."""
    from services.api.tokens_file import TokenFileError, remove_tokens

    try:
        removed = remove_tokens(file, user)
    except TokenFileError as error:
        typer.echo(f"error: {error}", err=True)
        raise typer.Exit(2) from error
    typer.echo(f"removed {removed} token(s) of {user} from {file}")
    if not removed:
        raise typer.Exit(1)
