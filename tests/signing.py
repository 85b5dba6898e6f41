"""Keys for tests of signed facts: one per signer of a small deployment, fixed (from seeds) so
that a failing example can be replayed, and the key facts that register them."""

from __future__ import annotations

import string
from datetime import UTC, datetime
from typing import Any

import orjson
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from hypothesis import assume

from events import new_event
from events.envelope import Envelope
from events.models import EventData, SigningKeyRegistered, SigningKeyRevoked
from events.serde import EventDecodeError, decode_structured, encode_structured
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


def mutated(envelope: Envelope[Any], leaf: int, pick: int) -> Envelope[Any]:
    """``envelope`` with one field of its export line changed (the ``leaf``-th, to a value
    ``pick`` chooses), decoded again; Hypothesis drops the example when no change applies or
    the changed line no longer decodes (a refusal by the decoder proves nothing about
    signatures). Every field is a leaf: the payload's, the signer, the signature, the proof."""
    document = orjson.loads(encode_structured(envelope))
    leaves = _leaves(document)
    path = leaves[leaf % len(leaves)]
    changed = _changed(_read(document, path), pick)
    assume(changed is not None)
    _set(document, path, changed)
    try:
        result = decode_structured(orjson.dumps(document))
    except EventDecodeError:
        assume(False)
        raise
    assume(result != envelope)
    return result


def _leaves(document: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    if isinstance(document, dict):
        return [leaf for key in sorted(document) for leaf in _leaves(document[key], (*path, key))]
    if isinstance(document, list):
        return [leaf for i, item in enumerate(document) for leaf in _leaves(item, (*path, i))]
    return [path]


def _changed(value: Any, pick: int) -> Any:
    """Another value of the same JSON type, close to ``value`` (so that it often still
    decodes: a mutation the decoder refuses proves nothing about signatures)."""
    if isinstance(value, bool):
        return not value
    if isinstance(value, int):
        return value + (1 if pick % 2 else -1)
    if isinstance(value, float):
        return value + 0.5
    if isinstance(value, str) and value:
        i = pick % len(value)
        for alphabet in (string.digits, string.ascii_lowercase, string.ascii_uppercase):
            if value[i] in alphabet:
                choices = alphabet.replace(value[i], "")
                return value[:i] + choices[pick % len(choices)] + value[i + 1 :]
        return value + "x"
    return None


def _set(document: Any, path: tuple[Any, ...], value: Any) -> None:
    for step in path[:-1]:
        document = document[step]
    document[path[-1]] = value


def _read(document: Any, path: tuple[Any, ...]) -> Any:
    for step in path:
        document = document[step]
    return document
