"""Signatures on envelopes: who stated a fact, checkable by anyone who reads the log.

A record's ``signer`` (the key id) and ``signature`` are CloudEvents extension attributes, so
the payload and every other attribute stay as they were, and a reader that ignores them reads
the same event. The signature covers the *canonical form* of the envelope without its
signature (:func:`canonical_bytes`): every attribute and the payload as JSON with sorted keys
and UTC ``Z`` times. It is computed from the decoded model, not from the bytes on the wire, so
a record verifies the same whether it was read from Kafka (binary mode, attributes in
headers) or from an export file (structured mode), and a change of any field, the signer's
key id included, breaks it.

The key id is signed too, so a signature cannot be re-labelled as another key's; a domain
tag prefixes what is signed, so a Fairshare key's signature over a fact can never be taken
for its signature over anything else. A type whose payload is later upcast must be verified
before its upcasting; today's signed types have no upcaster (docs/signed-facts.md).
"""

from __future__ import annotations

import base64
import binascii
from typing import Any

import orjson
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from events.envelope import Envelope
from events.models.keys import key_id_of

#: Prefixes every signed message (see the module docstring).
DOMAIN = b"fairshare/signed-fact/v1\n"
_OPTIONS = orjson.OPT_SORT_KEYS | orjson.OPT_UTC_Z
#: The attributes covered, in the envelope's order (the signature itself is not).
_SIGNED_ATTRIBUTES = (
    "specversion",
    "id",
    "source",
    "type",
    "time",
    "subject",
    "correlationid",
    "causationid",
    "signer",
    "datacontenttype",
)
_CONTENT_ATTRIBUTES = tuple(name for name in _SIGNED_ATTRIBUTES if name != "signer")


def canonical_bytes(envelope: Envelope[Any]) -> bytes:
    """What a signature covers: the envelope without its signature, as sorted-key JSON."""
    return DOMAIN + _document(envelope, _SIGNED_ATTRIBUTES)


def content_bytes(envelope: Envelope[Any]) -> bytes:
    """The envelope without its signature and its signer: what was stated, whoever signed it
    (a fact re-stated under a rotated key is the same fact)."""
    return _document(envelope, _CONTENT_ATTRIBUTES)


def _document(envelope: Envelope[Any], attributes: tuple[str, ...]) -> bytes:
    document: dict[str, Any] = {}
    for name in attributes:
        value = getattr(envelope, name)
        if value is not None:
            document[name] = value
    document["data"] = envelope.data.model_dump(mode="python")
    return orjson.dumps(document, option=_OPTIONS)


def raw_public_key(key: Ed25519PublicKey) -> bytes:
    return key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)


def signature_bytes(text: str) -> bytes | None:
    """The 64 bytes of a signature attribute; None if it is not their one base64 spelling
    (the last character before ``==`` has bits that decoding ignores: a record whose
    signature text was changed there is a changed record, and must not verify)."""
    try:
        raw = base64.b64decode(text, validate=True)
    except binascii.Error:
        return None
    return raw if base64.b64encode(raw).decode() == text else None


def verifies(envelope: Envelope[Any], key: Ed25519PublicKey) -> bool:
    """Whether ``envelope``'s signature is ``key``'s over its canonical form."""
    if envelope.signature is None:
        return False
    signature = signature_bytes(envelope.signature)
    if signature is None:
        return False
    try:
        key.verify(signature, canonical_bytes(envelope))
    except InvalidSignature:
        return False
    return True


class Signer:
    """A private key and the id it signs under: what a service is given to state facts."""

    def __init__(self, private_key: Ed25519PrivateKey) -> None:
        self._key = private_key
        self.public_key = raw_public_key(private_key.public_key())
        self.key_id = key_id_of(self.public_key)

    @classmethod
    def generate(cls) -> Signer:
        return cls(Ed25519PrivateKey.generate())

    @classmethod
    def from_pem(cls, pem: bytes) -> Signer:
        """A key as :meth:`pem` writes it (PKCS #8, unencrypted: the file's mode protects
        it, as a service must read it unattended). ValueError if it is no Ed25519 key."""
        key = serialization.load_pem_private_key(pem, password=None)
        if not isinstance(key, Ed25519PrivateKey):
            raise ValueError("not an Ed25519 private key")
        return cls(key)

    def pem(self) -> bytes:
        return self._key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )

    @property
    def public_key_text(self) -> str:
        """The public key as a registration states it (base64 of the 32 raw bytes)."""
        return base64.b64encode(self.public_key).decode()

    def sign(self, envelope: Envelope[Any]) -> Envelope[Any]:
        """``envelope`` signed under this key (a copy; an earlier signature is replaced)."""
        unsigned = envelope.model_copy(update={"signer": self.key_id, "signature": None})
        signature = self._key.sign(canonical_bytes(unsigned))
        signed: Envelope[Any] = unsigned.model_copy(
            update={"signature": base64.b64encode(signature).decode()}
        )
        return signed
