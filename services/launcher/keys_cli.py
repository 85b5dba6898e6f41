"""``fairshare keys create | register | revoke | list | setup``: the signing keys of a
deployment that ``fairshare up`` does not run, and the rotation of any key
(docs/signed-facts.md).

Registering and revoking are facts the admin states, signed with the admin key: the first
registration of a log registers the admin's own key, signed by itself (the anchor). A service
is given its key file by ``$FAIRSHARE_SIGNING_KEY``; rotation is: ``create`` a new key,
``register`` it for the same role, restart the service with it, then ``revoke`` the old one.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from services.runtime.cli_options import (
    KafkaConfigOption,
    KafkaOption,
    PrefixOption,
    console,
    err_console,
)

if TYPE_CHECKING:
    from events.models import EventData

keys_app = typer.Typer(no_args_is_help=True, help="Signing keys: who may state which facts.")

AdminKeyOption = Annotated[
    Path,
    typer.Option("--admin-key", help="the admin's private key file (signs the key fact)"),
]
Roles = ("admin", "api", "scheduler", "charging", "agent")


def _signer(path: Path) -> object:
    from services.bus.signing import SigningKeyError, load_key

    try:
        return load_key(path)
    except SigningKeyError as error:
        err_console.print(f"[red]{error}[/]")
        raise typer.Exit(2) from error


def _publish(kafka: str | None, prefix: str, admin_path: Path, data: EventData) -> None:
    from events import Topics, new_event
    from events.signing import Signer
    from services.bus.kafka import KafkaEventPublisher
    from services.bus.signing import SigningPublisher
    from services.runtime.cli_options import bootstrap_or_exit

    admin = _signer(admin_path)
    assert isinstance(admin, Signer)
    topics = Topics(prefix=prefix)
    bootstrap = bootstrap_or_exit(kafka, topics)
    publisher = SigningPublisher(
        KafkaEventPublisher(bootstrap, topics, client_id="fairshare-keys"), admin
    )
    try:
        publisher.publish(new_event(data, source="fairshare/keys", time=datetime.now(UTC)))
        publisher.flush()
    finally:
        publisher.close()


@keys_app.command("create")
def keys_create(
    file: Annotated[Path, typer.Argument(help="where to write the new private key (0600)")],
) -> None:
    """Make a new Ed25519 key (never over an existing file); print its id and public key."""
    from events.signing import Signer
    from services.bus.signing import write_key

    signer = Signer.generate()
    try:
        write_key(file, signer)
    except FileExistsError as error:
        err_console.print(f"[red]{file} exists:[/] a key in use is never overwritten")
        raise typer.Exit(2) from error
    console.print(f"key {signer.key_id}  public {signer.public_key_text}  in {file}")


@keys_app.command("register")
def keys_register(
    key: Annotated[Path, typer.Argument(help="the private key file of the key to register")],
    role: Annotated[str, typer.Option(help="admin, api, scheduler, charging or agent")],
    admin_key: AdminKeyOption,
    cluster: Annotated[str | None, typer.Option(help="an agent's cluster")] = None,
    required_from: Annotated[
        str,
        typer.Option(
            help="records of this signer dated from then on must be signed: 'now' for a log "
            "with unsigned history, 'epoch' for one signed from its first record, or a time",
        ),
    ] = "now",
    kafka: KafkaOption = None,
    kafka_config: KafkaConfigOption = None,
    topic_prefix: PrefixOption = "fairshare.",
) -> None:
    """State that a key speaks for a role from now on (signed by the admin key)."""
    from events.models import SigningKeyRegistered
    from events.signing import Signer

    if role not in Roles:
        err_console.print(f"[red]--role:[/] one of {', '.join(Roles)}, not {role!r}")
        raise typer.Exit(2)
    signer = _signer(key)
    assert isinstance(signer, Signer)
    since = _time(required_from)
    try:
        data = SigningKeyRegistered(
            key_id=signer.key_id,
            public_key=signer.public_key_text,
            role=role,  # type: ignore[arg-type]
            cluster=cluster,
            registered_by="admin",
            required_from=since,
        )
    except ValueError as error:
        err_console.print(f"[red]{error}[/]")
        raise typer.Exit(2) from error
    _publish(kafka, topic_prefix, admin_key, data)
    console.print(f"registered {signer.key_id} for {data.identity}")


@keys_app.command("revoke")
def keys_revoke(
    key_id: Annotated[str, typer.Argument(help="the id of the key to revoke")],
    admin_key: AdminKeyOption,
    reason: Annotated[str, typer.Option(help="why (kept in the log)")] = "",
    kafka: KafkaOption = None,
    kafka_config: KafkaConfigOption = None,
    topic_prefix: PrefixOption = "fairshare.",
) -> None:
    """State that a key speaks for no one from now on; what it signed before stays valid."""
    from events.models import SigningKeyRevoked

    try:
        data = SigningKeyRevoked(key_id=key_id, revoked_by="admin", reason=reason)
    except ValueError as error:
        err_console.print(f"[red]{error}[/]")
        raise typer.Exit(2) from error
    _publish(kafka, topic_prefix, admin_key, data)
    console.print(f"revoked {key_id}")


@keys_app.command("list")
def keys_list(
    kafka: KafkaOption = None,
    kafka_config: KafkaConfigOption = None,
    topic_prefix: PrefixOption = "fairshare.",
) -> None:
    """Every registered key as the log states it, and any key fact not believed."""
    from events import Topics
    from projections.trust import Trust
    from services.bus.trust import kafka_keys
    from services.runtime.cli_options import bootstrap_or_exit

    topics = Topics(prefix=topic_prefix)
    trust = Trust()
    refused = trust.learn_keys(kafka_keys(bootstrap_or_exit(kafka, topics), topics)())
    for key in sorted(trust.book.keys.values(), key=lambda k: k.registered_at):
        revoked = f"revoked {_iso(key.revoked_at)}" if key.revoked_at is not None else "in use"
        console.print(
            f"{key.key_id}  {key.identity:<24} registered {_iso(key.registered_at)}  "
            f"signs since {_iso(key.required_from)}  {revoked}",
            highlight=False,
        )
    for refusal in refused:
        console.print(f"[red]not believed:[/] {refusal.reason}", highlight=False)
    if refused:
        raise typer.Exit(1)


def _iso(at: float) -> str:
    return datetime.fromtimestamp(at, UTC).isoformat().replace("+00:00", "Z")


def _time(text: str) -> datetime:
    if text == "now":
        return datetime.now(UTC)
    if text == "epoch":
        return datetime(1970, 1, 1, tzinfo=UTC)
    try:
        value = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError as error:
        err_console.print(f"[red]--required-from:[/] not a time: {text!r}")
        raise typer.Exit(2) from error
    if value.tzinfo is None:
        err_console.print("[red]--required-from:[/] give a time zone (e.g. 2026-12-01T00:00Z)")
        raise typer.Exit(2)
    return value


@keys_app.command("setup")
def keys_setup(
    directory: Annotated[
        Path, typer.Option("--dir", help="where the keys are kept (0700; each key 0600)")
    ],
    cluster: Annotated[
        list[str] | None,
        typer.Option("--cluster", help="a cluster whose agent gets a key (repeatable)"),
    ] = None,
    kafka: KafkaOption = None,
    kafka_config: KafkaConfigOption = None,
    topic_prefix: PrefixOption = "fairshare.",
) -> None:
    """A deployment's keys as ``fairshare up`` makes its own: one per signer (admin, api,
    scheduler, charging, each cluster's agent) in DIR, made when missing, and every one not
    registered yet registered by the admin. Run again to add a cluster; nothing is made or
    registered twice. Each service then gets its file by $FAIRSHARE_SIGNING_KEY."""
    from events import Topics
    from services.launcher.keys import SERVICE_SIGNERS, Signatory, key_of, register_keys
    from services.runtime.cli_options import bootstrap_or_exit

    topics = Topics(prefix=topic_prefix)
    bootstrap = bootstrap_or_exit(kafka, topics)
    admin = Signatory("admin", None, directory / "admin.key")
    signatories = [Signatory(role, None, directory / f"{role}.key") for role in SERVICE_SIGNERS]
    signatories += [
        Signatory("agent", name, directory / f"agent-{name}.key") for name in cluster or []
    ]
    for signatory in signatories:
        key_of(signatory)
    registered = register_keys(bootstrap, topics, key_of(admin), signatories)
    console.print(f"{registered} key(s) registered; keys in {directory}")
    for signatory in [admin, *signatories]:
        console.print(f"{signatory.identity:<20} {signatory.path}")
