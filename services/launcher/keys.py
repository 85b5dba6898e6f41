"""The signing keys of ``fairshare up``: one per signer, kept in the data directory, registered
on the log by the admin, each handed to the services that state facts under it.

A key per signer, not per process: the standby schedulers decide as the scheduler, the
charging shards charge as charging, so they share its key; each cluster's agent has its own,
and speaks for that cluster only (``projections.trust``). The projector states no fact (its
dead letters need no key). The files live in ``<data dir>/keys`` (0700; each key 0600), so a
second start of the same directory signs with the same keys and registers nothing twice.

The admin key is the log's trust anchor: its registration signs itself and is the first key
fact (``projections.trust.KeyBook``). ``required_from`` is the epoch on a log with nothing in
it yet (every record of every signer must be signed), and the moment of registration on a
data directory that holds unsigned history from before signed facts, which then stays
readable (docs/signed-facts.md, "Old logs").
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from events import new_event
from events.models import SigningKeyRegistered
from events.models.keys import identity
from events.signing import Signer
from events.topics import TopicKind, Topics
from projections.trust import Trust
from services.bus.signing import load_key, write_key
from services.launcher.config import UpConfig

KEYS_DIR = "keys"
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
#: Who registers the keys (``registered_by``).
ADMIN_USER = "admin"


@dataclass(frozen=True)
class Signatory:
    """A signer of the stack: its role, its cluster (agents), and its key file."""

    role: str
    cluster: str | None
    path: Path

    @property
    def identity(self) -> str:
        return identity(self.role, self.cluster)


#: The roles that state facts under one key however many processes run them (each cluster's
#: agent has its own, the admin registers them).
SERVICE_SIGNERS = ("api", "scheduler", "charging")


def signatory_of(service: str, config: UpConfig) -> Signatory | None:
    """The signer a service of the stack states its facts as (None: it states none)."""
    keys = config.data_dir / KEYS_DIR
    clusters = {
        "agent": config.cluster,
        "agent-slurm": config.slurm_cluster,
        "agent-kubernetes": config.kubernetes_cluster,
    }
    if service in clusters:
        cluster = clusters[service]
        return (
            None if cluster is None else Signatory("agent", cluster, keys / f"agent-{cluster}.key")
        )
    for role in SERVICE_SIGNERS:
        if service == role or service.startswith(f"{role}-"):
            return Signatory(role, None, keys / f"{role}.key")
    return None


def admin_signatory(config: UpConfig) -> Signatory:
    return Signatory("admin", None, config.data_dir / KEYS_DIR / "admin.key")


def key_of(signatory: Signatory) -> Signer:
    """The signatory's key, made (0600, in a 0700 directory) the first time it is asked for."""
    directory = signatory.path.parent
    if not directory.exists():
        directory.mkdir(parents=True, mode=0o700)
        os.chmod(directory, 0o700)  # whatever the umask
    if not signatory.path.exists():
        write_key(signatory.path, Signer.generate())
    return load_key(signatory.path)


def registrations(
    admin: Signer, signatories: Iterable[Signatory], known: Trust, required_from: datetime
) -> list[SigningKeyRegistered]:
    """What the admin must state so that every signatory's key (and its own) is registered:
    the keys ``known`` has not read yet, the admin's first."""
    facts = []
    for signatory in [Signatory("admin", None, Path()), *signatories]:
        signer = admin if signatory.role == "admin" else key_of(signatory)
        if known.book.key(signer.key_id) is not None:
            continue
        facts.append(
            SigningKeyRegistered(
                key_id=signer.key_id,
                public_key=signer.public_key_text,
                role=signatory.role,  # type: ignore[arg-type]
                cluster=signatory.cluster,
                registered_by=ADMIN_USER,
                required_from=required_from,
                description=f"fairshare up: {signatory.identity}",
            )
        )
    return facts


def required_from(known: Trust, history: bool, now: datetime) -> datetime:
    """The epoch for a log signed from its first record (no history before its first key, or
    every key so far says so); else ``now``, so unsigned history stays readable."""
    keys = known.book.keys.values()
    if keys:
        signed_from_start = all(key.required_from <= EPOCH.timestamp() for key in keys)
        return EPOCH if signed_from_start else now
    return now if history else EPOCH


def register_keys(
    bootstrap: str, topics: Topics, admin: Signer, signatories: Iterable[Signatory]
) -> int:
    """Register on the log every key not registered yet, signed by the admin; how many."""
    from services.bus.export import end_offsets
    from services.bus.kafka import KafkaEventPublisher
    from services.bus.signing import SigningPublisher
    from services.bus.trust import kafka_keys

    known = Trust()
    known.learn_keys(kafka_keys(bootstrap, topics)())
    others = [topics.name(kind) for kind in TopicKind if kind is not TopicKind.KEYS]
    history = any(end_offsets(bootstrap, others).values())
    now = datetime.now(UTC)
    facts = registrations(admin, signatories, known, required_from(known, history, now))
    if not facts:
        return 0
    publisher = SigningPublisher(
        KafkaEventPublisher(bootstrap, topics, client_id="fairshare-up"), admin
    )
    try:
        for data in facts:
            publisher.publish(new_event(data, source="fairshare/up", time=now))
        publisher.flush()
    finally:
        publisher.close()
    return len(facts)
