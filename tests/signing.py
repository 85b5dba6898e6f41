"""Keys for tests of signed facts: one per signer of a small deployment, fixed (from seeds) so
that a failing example can be replayed, and the key facts that register them."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from events import new_event
from events.envelope import Envelope
from events.models import EventData, SigningKeyRegistered, SigningKeyRevoked
from events.signing import Signer

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def fixed_signer(seed: int) -> Signer:
    return Signer(Ed25519PrivateKey.from_private_bytes(bytes([seed]) * 32))


class Keys:
    admin = fixed_signer(1)
    api = fixed_signer(2)
    scheduler = fixed_signer(3)
    charging = fixed_signer(4)
    agent_a = fixed_signer(5)
    agent_b = fixed_signer(6)
    #: Registered by no one.
    stranger = fixed_signer(7)

    def roles(self) -> list[tuple[Signer, str, str | None]]:
        return [
            (self.admin, "admin", None),
            (self.api, "api", None),
            (self.scheduler, "scheduler", None),
            (self.charging, "charging", None),
            (self.agent_a, "agent", "cluster-a"),
            (self.agent_b, "agent", "cluster-b"),
        ]


KEYS = Keys()


def at_time(at: float | datetime) -> datetime:
    return at if isinstance(at, datetime) else datetime.fromtimestamp(at, UTC)


def fact(
    data: EventData,
    at: float | datetime,
    signer: Signer | None = None,
    *,
    event_id: str | None = None,
    source: str = "tests",
) -> Envelope[Any]:
    """``data`` as an event at ``at``, signed by ``signer`` (None: unsigned)."""
    envelope = new_event(data, source=source, time=at_time(at), event_id=event_id)
    return envelope if signer is None else signer.sign(envelope)


def registration(
    signer: Signer,
    role: str,
    cluster: str | None,
    at: float | datetime,
    *,
    by: Signer | None = None,
    required_from: datetime = EPOCH,
) -> Envelope[Any]:
    data = SigningKeyRegistered(
        key_id=signer.key_id,
        public_key=signer.public_key_text,
        role=role,  # type: ignore[arg-type]
        cluster=cluster,
        registered_by="admin",
        required_from=required_from,
    )
    return fact(data, at, by or KEYS.admin)


def revocation(signer: Signer, at: float | datetime, *, by: Signer | None = None) -> Envelope[Any]:
    return fact(SigningKeyRevoked(key_id=signer.key_id, revoked_by="admin"), at, by or KEYS.admin)


def registrations(
    at: float | datetime, *, required_from: datetime = EPOCH, keys: Keys = KEYS
) -> list[Envelope[Any]]:
    """Every key of ``keys`` registered at ``at`` by the admin (whose own key comes first,
    registering itself)."""
    return [
        registration(signer, role, cluster, at, required_from=required_from)
        for signer, role, cluster in keys.roles()
    ]
