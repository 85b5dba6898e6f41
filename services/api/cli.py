"""``fairshare api ...``: the Typer sub-app that runs the HTTP API."""

from __future__ import annotations

import re
import time
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
    tls_cert: Annotated[
        Path | None,
        typer.Option(
            "--tls-cert",
            envvar="FAIRSHARE_API_TLS_CERT",
            help="serve HTTPS with this certificate (PEM, chain included); needs --tls-key",
        ),
    ] = None,
    tls_key: Annotated[
        Path | None,
        typer.Option(
            "--tls-key",
            envvar="FAIRSHARE_API_TLS_KEY",
            help="the certificate's private key (PEM, readable by its owner only)",
        ),
    ] = None,
    insecure_http: Annotated[
        bool,
        typer.Option(
            "--insecure-http",
            envvar="FAIRSHARE_API_INSECURE_HTTP",
            help="serve plain HTTP on a non-loopback --host: only behind a TLS-terminating "
            "proxy that alone reaches the API",
        ),
    ] = False,
) -> None:
    """Serve the API over Kafka until interrupted (HTTPS with --tls-cert and --tls-key)."""
    from events import Topics
    from services.api.serve import DemoTokensError, TransportError, preflight, serve
    from services.api.tokens_file import TokenFileError

    try:
        # before Kafka: a refusal says so at once
        _, tls = preflight(tokens, host, tls_cert, tls_key, insecure_http=insecure_http)
        bootstrap = bootstrap_or_exit(kafka, Topics(prefix=topic_prefix))
        serve(
            bootstrap,
            topic_prefix,
            tokens,
            host,
            port,
            database_url,
            checkpoint_every_s=checkpoint_every_s or None,
            tls=tls,
            insecure_http=insecure_http,
        )
    except (TokenFileError, DemoTokensError, TransportError) as error:
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


ExpiresInOption = Annotated[
    str | None,
    typer.Option(
        "--expires-in",
        help="how long the token is accepted: 90d, 12h, 30m, 3600 (seconds)",
    ),
]
NoExpiryOption = Annotated[
    bool,
    typer.Option(
        "--no-expiry",
        help="a token that never expires (a service's, rotated by its operator)",
    ),
]


_LIFETIME = re.compile(r"^(?:(\d+)d)?(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?$")


def _lifetime(expires_in: str | None, no_expiry: bool) -> float | None:
    """Seconds the new token is accepted, None for ever; a bad value is exit 2 (BadParameter).
    Written as the client's durations are (``90d``, ``12h``, ``1d12h``, a bare number of
    seconds), but not imported from it: the client's package imports this one."""
    if no_expiry:
        if expires_in is not None:
            raise typer.BadParameter("give --expires-in or --no-expiry, not both")
        return None
    if expires_in is None:
        from services.api.tokens_file import DEFAULT_EXPIRY_S

        return DEFAULT_EXPIRY_S
    value = expires_in.strip().lower()
    match = _LIFETIME.match(value)
    if value.isdigit():
        seconds = int(value)
    elif value and match and any(match.groups()):
        days, hours, minutes, rest = (int(group or 0) for group in match.groups())
        seconds = ((days * 24 + hours) * 60 + minutes) * 60 + rest
    else:
        raise typer.BadParameter(f"--expires-in {expires_in}: not a duration (90d, 12h, 30m)")
    if seconds <= 0:
        raise typer.BadParameter(f"--expires-in {expires_in}: a token needs some time to live")
    return seconds


def _expiry_note(lifetime: float | None) -> str:
    from services.api.tokens_file import timestamp

    if lifetime is None:
        return "it never expires"
    return f"it expires at {timestamp(time.time() + lifetime)}"


@tokens_app.command("add")
def tokens_add(
    user: Annotated[str, typer.Argument(help="who the token is for")],
    file: TokensFileOption = DEFAULT_TOKENS_FILE,
    admin: Annotated[bool, typer.Option("--admin", help="an admin token")] = False,
    finance: Annotated[
        bool, typer.Option("--finance", help="a finance token: reads every budget's money")
    ] = False,
    expires_in: ExpiresInOption = None,
    no_expiry: NoExpiryOption = False,
) -> None:
    """Add a fresh token for USER (creating the file) and print it, once.

    The file keeps only the token's SHA-256, so it cannot be shown again. It expires in 90
    days unless --expires-in or --no-expiry says otherwise. The API re-reads the file within a
    second of a change."""
    from services.api.tokens_file import TokenFileError, add_token

    lifetime = _lifetime(expires_in, no_expiry)
    try:
        token = add_token(file, user, admin=admin, finance=finance, expires_in_s=lifetime)
    except TokenFileError as error:
        typer.echo(f"error: {error}", err=True)
        raise typer.Exit(2) from error
    typer.echo(token)
    role = "an admin token" if admin else "a finance token" if finance else "a token"
    typer.echo(
        f"added {role} for {user} to {file}; {_expiry_note(lifetime)} (only its hash is "
        "stored: pass the token on now)",
        err=True,
    )


@tokens_app.command("renew")
def tokens_renew(
    user: Annotated[str, typer.Argument(help="whose tokens to replace")],
    file: TokensFileOption = DEFAULT_TOKENS_FILE,
    expires_in: ExpiresInOption = None,
    no_expiry: NoExpiryOption = False,
) -> None:
    """Replace every token of USER with one fresh token (admin if theirs were) and print it,
    once (exit 1 if USER held none).

    Their old tokens stop working as soon as the API re-reads the file (within a second): hand
    the new one over first where a gap matters, with `tokens add`, then renew or remove."""
    from services.api.tokens_file import TokenFileError, read_document, renew_token

    lifetime = _lifetime(expires_in, no_expiry)
    try:
        if not any(r.user == user for r in read_document(file).tokens):
            typer.echo(f"error: {user} holds no token in {file}: `fairshare tokens add`", err=True)
            raise typer.Exit(1)
        token = renew_token(file, user, expires_in_s=lifetime)
    except TokenFileError as error:
        typer.echo(f"error: {error}", err=True)
        raise typer.Exit(2) from error
    typer.echo(token)
    typer.echo(
        f"renewed {user}'s token in {file}; {_expiry_note(lifetime)}; their old tokens are "
        "refused from now on (only the new one's hash is stored: pass it on now)",
        err=True,
    )


@tokens_app.command("list")
def tokens_list(file: TokensFileOption = DEFAULT_TOKENS_FILE) -> None:
    """Who holds tokens: user, admin, when added, when it expires and the start of the hash
    (never a token). A token of a file written before tokens expired is marked to be renewed."""
    from services.api.tokens_file import NEVER, TokenFileError, read_document

    try:
        document = read_document(file)
    except TokenFileError as error:
        typer.echo(f"error: {error}", err=True)
        raise typer.Exit(2) from error
    now = time.time()
    undated = 0
    for record in document.tokens:
        role = "admin" if record.admin else "finance" if record.finance else "user"
        expires_at = record.expires_at
        if record.expires is None:
            undated += 1
            expiry = "no expiry (old file): renew"
        elif record.expires == NEVER:
            expiry = "never"
        elif expires_at is not None and expires_at <= now:
            expiry = f"EXPIRED {record.expires}"
        else:
            expiry = record.expires
        added = record.added or "-"
        typer.echo(f"{record.user}\t{role}\t{added}\t{expiry}\tsha256:{record.sha256[:12]}")
    if undated:
        typer.echo(
            f"warning: {undated} token(s) were written before tokens expired and are accepted "
            "for ever: `fairshare tokens renew USER` gives each user a token that expires",
            err=True,
        )


@tokens_app.command("remove")
def tokens_remove(
    user: Annotated[str, typer.Argument(help="whose tokens to remove")],
    file: TokensFileOption = DEFAULT_TOKENS_FILE,
) -> None:
    """Remove every token of USER (exit 1 if there was none).

    The API re-reads the file within a second: the tokens are refused from then on."""
    from services.api.tokens_file import TokenFileError, remove_tokens

    try:
        removed = remove_tokens(file, user)
    except TokenFileError as error:
        typer.echo(f"error: {error}", err=True)
        raise typer.Exit(2) from error
    typer.echo(f"removed {removed} token(s) of {user} from {file}")
    if not removed:
        raise typer.Exit(1)
