"""What every client command shares: its options, the connection to the API, and the one
way an answer is printed (the API's JSON with ``--json``, else for people, through
:mod:`services.client.terminal` so that nothing the API says can drive the terminal)."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, TypeVar

import typer

from services.client.terminal import console, styled

if TYPE_CHECKING:
    from rich.console import Console

    from services.api.models import Answer
    from services.client.api import ApiError, FairshareClient

T = TypeVar("T")

#: Makes the client for ``--api`` and ``--token`` (tests pass one over a TestClient).
ClientFactory = Callable[[str, str | None], "FairshareClient"]

ApiOption = Annotated[
    str, typer.Option("--api", envvar="FAIRSHARE_API", help="base URL of the Fairshare API")
]
TokenOption = Annotated[
    str | None,
    typer.Option("--token", envvar="FAIRSHARE_TOKEN", help="bearer token", show_default=False),
]
CaOption = Annotated[
    str | None,
    typer.Option(
        "--ca",
        envvar="FAIRSHARE_API_CA",
        help="CA certificate (PEM) that signed an https --api's certificate, when it is not "
        "one the system trusts",
        show_default=False,
    ),
]
JsonOption = Annotated[bool, typer.Option("--json", help="print the API's JSON")]
PoolFilter = Annotated[str | None, typer.Option("--pool", "-p", help="only this pool")]
BudgetFilter = Annotated[str | None, typer.Option("--budget", "-A", help="budget subtree")]
UserFilter = Annotated[str | None, typer.Option("--user", "-u", help="submitter")]
ArrayFilter = Annotated[
    str | None, typer.Option("--array", "-a", help="only the elements of this job array")
]
MeFilter = Annotated[
    bool, typer.Option("--me", help="only my work (the user of the token), like squeue --me")
]
VerboseOption = Annotated[bool, typer.Option("--verbose", "-v", help="every detail")]


@dataclass(frozen=True)
class ClientSource:
    """The factory commands use, carried in the Typer context (``context_settings`` obj), so
    the commands stay plain functions that any Typer app can mount."""

    factory: ClientFactory


def ask(
    ctx: typer.Context,
    api: str,
    token: str | None,
    ca: str | None,
    call: Callable[[FairshareClient], T],
) -> T:
    """``call`` on a client of the API (trusting ``ca`` for https, besides the system's CAs;
    a factory of the context, the tests', makes its own); an error prints the status and
    detail and exits 1."""
    from services.client.api import ApiError, FairshareClient

    source = ctx.find_object(ClientSource)
    try:
        client = (
            source.factory(api, token) if source is not None else FairshareClient(api, token, ca=ca)
        )
    except ApiError as error:
        console(stderr=True).print(styled("red", "error: ", _for_people(error)))
        raise typer.Exit(1) from error
    try:
        return call(client)
    except ApiError as error:
        console(stderr=True).print(styled("red", "error: ", _for_people(error)))
        raise typer.Exit(1) from error
    finally:
        client.close()


def _for_people(error: ApiError) -> str:
    """The API's refusal as a command-line user acts on it: a 401 names this command's
    ``--token`` and ``FAIRSHARE_TOKEN``, not the HTTP header the API asks for."""
    if error.status != 401:
        return str(error)
    if "expired" in str(error.detail):
        return f"HTTP 401: {error.detail}"
    if "unknown" in str(error.detail):
        return (
            "HTTP 401: the API does not know this token: check --token or FAIRSHARE_TOKEN "
            "(`fairshare tokens add USER` makes one)"
        )
    return "HTTP 401: no token given: pass --token TOKEN or set FAIRSHARE_TOKEN"


def submitter_filter(client: FairshareClient, user: str | None, me: bool) -> str | None:
    """``--user``, or with ``--me`` the user the token belongs to (asked of the API)."""
    if me:
        return client.me().user
    return user


def emit(answer: Answer, as_json: bool, human: Callable[[Console], object]) -> None:
    """Print ``answer``: with ``--json`` exactly the JSON the API sent (every key, in order;
    ASCII only, so a control character in a value is an escape, not a byte), else as ``human``
    renders it on a console that reads no markup (``human`` prints through
    :func:`~services.client.terminal.plain` and :class:`~services.client.terminal.FittedTable`)."""
    if as_json:
        typer.echo(
            json.dumps(answer.model_dump(mode="json", by_alias=True), indent=2, ensure_ascii=True)
        )
    else:
        human(console())


_DURATION = re.compile(r"^(?:(\d+)d)?(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?$")


def parse_duration(text: str) -> int:
    """Seconds from ``3600``, ``90s``, ``30m``, ``2h``, ``1h30m``, ``1d``, ``MM:SS`` or
    ``HH:MM:SS``. A bare number is seconds (unlike Slurm's ``--time``, which means minutes)."""
    value = text.strip().lower()
    if value.isdigit():
        return int(value)
    if ":" in value:
        parts = value.split(":")
        if len(parts) in (2, 3) and all(p.isdigit() for p in parts):
            seconds = 0
            for part in parts:
                seconds = seconds * 60 + int(part)
            return seconds
    match = _DURATION.match(value)
    if value and match and any(match.groups()):
        days, hours, minutes, seconds = (int(g or 0) for g in match.groups())
        return ((days * 24 + hours) * 60 + minutes) * 60 + seconds
    raise typer.BadParameter(f"{text!r} is not a duration (e.g. 3600, 45m, 2h, 1h30m, 01:30:00)")


def hours(gpu_seconds: float | None, digits: int = 1) -> str:
    return "-" if gpu_seconds is None else f"{gpu_seconds / 3600:,.{digits}f}"


def num(value: float | None, digits: int = 4) -> str:
    return "-" if value is None else f"{value:.{digits}g}"


def duration(seconds: int) -> str:
    hours_, rest = divmod(seconds, 3600)
    return f"{hours_}:{rest // 60:02d}:{rest % 60:02d}"


def elapsed(seconds: int | None) -> str:
    """Slurm's ``[D-]HH:MM:SS``; ``-`` when there is none."""
    if seconds is None:
        return "-"
    days, rest = divmod(seconds, 86_400)
    text = f"{rest // 3600:02d}:{rest % 3600 // 60:02d}:{rest % 60:02d}"
    return f"{days}-{text}" if days else text


def nodelist(parts: list[str]) -> list[str]:
    """The nodes a workload runs on, one a line of its cell (each name whole, see
    :class:`~services.client.terminal.FittedTable`); ``-`` for none."""
    return parts or ["-"]
