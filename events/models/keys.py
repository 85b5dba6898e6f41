"""Who may sign what (topic: keys, keyed by key id): signing keys are facts an admin states.

A fact is believed only when it is signed by a key registered for a role that may state it
(``projections/trust.py``); the registrations are themselves in the log, so an auditor who
holds nothing but the log can tell which key stood for whom at any instant. A key is named by
its fingerprint (:func:`key_id_of`), so an id can never be registered again for another key.
Rotation is a registration of the new key and a revocation of the old one; what the old key
signed before its revocation stays believed (docs/signed-facts.md).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
from typing import Annotated, ClassVar, Literal

from pydantic import Field, StringConstraints, model_validator

from events.models.base import EventData
from events.topics import TopicKind
from events.types import Identifier, ShortText, UtcDateTime

#: Who a key speaks for. An agent's key speaks for one cluster (``cluster``); the others for
#: the one service of their name, and ``admin`` for the operators (key facts, the demo lab).
SignerRole = Literal["admin", "api", "scheduler", "charging", "agent"]
#: The fingerprint of a public key: the first 16 bytes of its SHA-256, in hex.
KeyId = Annotated[str, StringConstraints(pattern=r"^[0-9a-f]{32}$")]
#: A raw 32-byte Ed25519 public key in standard base64 (44 characters).
PublicKeyText = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9+/]{43}=$")]

ED25519_PUBLIC_KEY_BYTES = 32


def key_id_of(public_key: bytes) -> str:
    """A key's id: derived from the key, so a registration cannot give a known id to a key
    of its choosing (and two registrations of one key agree on its id)."""
    return hashlib.sha256(public_key).hexdigest()[:32]


def public_key_bytes(text: str) -> bytes:
    """The raw key of a :data:`PublicKeyText` (ValueError if it is not 32 bytes)."""
    try:
        raw = base64.b64decode(text, validate=True)
    except binascii.Error as error:
        raise ValueError(f"public_key: not base64 ({error})") from None
    if len(raw) != ED25519_PUBLIC_KEY_BYTES:
        raise ValueError(f"public_key: an Ed25519 key is 32 bytes, not {len(raw)}")
    if base64.b64encode(raw).decode() != text:  # bits decoding ignores: one key, one text
        raise ValueError("public_key: not the canonical base64 of its bytes")
    return raw


def identity(role: str, cluster: str | None) -> str:
    """How a signer is named in reasons and reports: ``api``, ``agent:<cluster>``."""
    return f"{role}:{cluster}" if cluster is not None else role


class SigningKeyRegistered(EventData):
    """From its event time on, ``public_key`` speaks for ``role`` (an agent's: for ``cluster``).

    ``required_from``: records that this role (this cluster's agent) states with an event time
    from then on must be signed; those before it are believed unsigned. A log signed from its
    first record says the epoch; a log with unsigned history says when signing began, so that
    history stays readable (docs/signed-facts.md, "Old logs")."""

    event_type: ClassVar[str] = "fairshare.signing_key.registered.v1"
    topic: ClassVar[TopicKind] = TopicKind.KEYS
    subject_field: ClassVar[str] = "key_id"

    key_id: KeyId = Field(
        description=(
            "The key's id: the first 16 bytes of SHA-256 of the raw public key, in hex (32 "
            "characters, spec 7.1); must be public_key's. The record's subject, and what records "
            "the key signs name as their signer. Stated by an admin."
        )
    )
    public_key: PublicKeyText = Field(
        description=(
            "The raw 32-byte Ed25519 public key in standard base64 (44 characters, its one "
            "spelling): readers verify with it the signatures of records whose signer is key_id "
            "(spec 5.5, 6.6). Stated by an admin."
        )
    )
    role: SignerRole = Field(
        description=(
            "Who the key speaks for: admin (key facts, operators), api, scheduler, charging, or "
            "agent (one cluster's agent). Decides which types the records it signs may state "
            "(spec 3.3, 7.4). A key id registered again with another role is refused. Stated by "
            "an admin."
        )
    )
    cluster: Identifier | None = Field(
        default=None,
        description=(
            "For an agent's key, the cluster it speaks for: its records must be about that "
            "cluster's nodes and runs (spec 7.6). None for every other role. Stated by an admin."
        ),
    )
    registered_by: Identifier = Field(
        description=("The operator who registered the key; informational. Stated by an admin.")
    )
    required_from: UtcDateTime = Field(
        description=(
            "From this event time on (UTC, compared to the microsecond), the records this role "
            "(this cluster's agent) states must be signed; unsigned ones dated before it stay "
            "believed. An identity's is the earliest of its keys' (spec 7.2, 7.5). The epoch for "
            "a log signed from its first record. Stated by an admin."
        )
    )
    description: ShortText = Field(
        default="",
        description=(
            "Free text about the key (where it is kept, ...); informational. Stated by an admin."
        ),
    )

    @model_validator(mode="after")
    def _consistent(self) -> SigningKeyRegistered:
        raw = public_key_bytes(self.public_key)
        if self.key_id != key_id_of(raw):
            raise ValueError("key_id: must be the fingerprint of public_key (key_id_of)")
        if (self.role == "agent") != (self.cluster is not None):
            raise ValueError("cluster: an agent's key names its cluster; no other key does")
        return self

    @property
    def identity(self) -> str:
        return identity(self.role, self.cluster)


class SigningKeyRevoked(EventData):
    """From its event time on, the key speaks for no one; what it signed before stays valid."""

    event_type: ClassVar[str] = "fairshare.signing_key.revoked.v1"
    topic: ClassVar[TopicKind] = TopicKind.KEYS
    subject_field: ClassVar[str] = "key_id"

    key_id: KeyId = Field(
        description=(
            "The key revoked, the record's subject: records it signs dated at or after this event "
            "time (to the microsecond) are refused; those dated before stay believed (spec 7.2). "
            "Stated by an admin."
        )
    )
    revoked_by: Identifier = Field(
        description="The operator who revoked it; informational. Stated by an admin."
    )
    reason: ShortText = Field(
        default="",
        description=("Free text: why (rotation, compromise); informational. Stated by an admin."),
    )
