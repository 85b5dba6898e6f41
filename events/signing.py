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

**Batches.** Verifying a signature costs about thirty times more than everything else a reader
does to judge a record, and every reader of a fact verifies it. So what a service publishes
at once (a scheduling pass, an agent's round, a batch of charges) is signed at once: the
records' canonical forms are the leaves of a Merkle tree (SHA-256, RFC 6962's leaf and node
prefixes), the key signs the root and the number of leaves, and each record carries the
signature and its ``batchproof``: its index, the count, and the sibling hashes from its leaf
to the root. A record still proves its signer alone (the proof and its own canonical form give
the root back), and a reader that verified a batch's signature once believes the batch's other
records for the price of a few hashes (:func:`verifies` with ``verified``). A lone record is
signed as before, without a proof.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
from collections.abc import MutableMapping, Sequence
from typing import Any

import orjson
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from events.envelope import Envelope
from events.models.keys import key_id_of

#: Prefixes every signed message (see the module docstring).
DOMAIN = b"fairshare/signed-fact/v1\n"
#: Prefixes a batch's signed message: the count of records, then the Merkle root.
BATCH_DOMAIN = b"fairshare/signed-batch/v1\n"
#: The most records one batch signature covers. A record carries a hash per level of its
#: tree: 16 keep the proof at 4 hashes (172 characters) while a reader verifies one
#: signature per 16 records.
BATCH_MAX = 16
_LEAF, _NODE = b"\x00", b"\x01"
_HASH_BYTES = 32
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
    """The 64 bytes of a signature attribute; None if it is not their one base64 spelling."""
    return _canonical_base64(text)


def _canonical_base64(text: str) -> bytes | None:
    """The bytes of ``text``; None unless it is their one base64 spelling (the last
    character before padding has bits that decoding ignores: a record whose signature or
    proof text was changed there is a changed record, and must not verify)."""
    try:
        raw = base64.b64decode(text, validate=True)
    except binascii.Error:
        return None
    return raw if base64.b64encode(raw).decode() == text else None


def leaf_hash(envelope: Envelope[Any]) -> bytes:
    """A record's leaf in its batch's tree: the hash of its canonical form."""
    return hashlib.sha256(_LEAF + canonical_bytes(envelope)).digest()


def _parent(left: bytes, right: bytes) -> bytes:
    return hashlib.sha256(_NODE + left + right).digest()


def merkle_paths(leaves: Sequence[bytes]) -> tuple[bytes, list[list[bytes]]]:
    """The root over ``leaves`` and each leaf's path of sibling hashes, bottom up. Leaves are
    paired left to right at each level; an odd last node moves up unpaired (no hash of its
    own, so no leaf can pose as two)."""
    if not leaves:
        raise ValueError("a batch has at least one record")
    paths: list[list[bytes]] = [[] for _ in leaves]
    level = list(leaves)
    members: list[list[int]] = [[index] for index in range(len(leaves))]
    while len(level) > 1:
        above: list[bytes] = []
        joined: list[list[int]] = []
        for at in range(0, len(level) - 1, 2):
            left, right = level[at], level[at + 1]
            for index in members[at]:
                paths[index].append(right)
            for index in members[at + 1]:
                paths[index].append(left)
            above.append(_parent(left, right))
            joined.append(members[at] + members[at + 1])
        if len(level) % 2:
            above.append(level[-1])
            joined.append(members[-1])
        level, members = above, joined
    return level[0], paths


def root_from(leaf: bytes, index: int, count: int, path: Sequence[bytes]) -> bytes | None:
    """The root that ``leaf`` at ``index`` of ``count`` and its ``path`` give, or None when the
    path does not fit a tree of ``count`` leaves (too short, too long, an index outside)."""
    if not 0 <= index < count:
        return None
    node, width, used = leaf, count, 0
    while width > 1:
        if index % 2 == 1 or index + 1 < width:  # it has a sibling at this level
            if used == len(path):
                return None
            sibling = path[used]
            used += 1
            node = _parent(sibling, node) if index % 2 else _parent(node, sibling)
        index //= 2
        width = (width + 1) // 2
    return node if used == len(path) else None


def batch_message(count: int, root: bytes) -> bytes:
    """What a batch's signature covers."""
    return BATCH_DOMAIN + count.to_bytes(4, "big") + root


def proof_text(index: int, count: int, path: Sequence[bytes]) -> str:
    return f"{index}/{count}/{base64.b64encode(b''.join(path)).decode()}"


def parse_proof(text: str) -> tuple[int, int, list[bytes]] | None:
    """Index, count and path of a ``batchproof``; None unless it is their one spelling (as
    for signatures, a changed character must not leave the same proof)."""
    parts = text.split("/", 2)
    if len(parts) != 3 or not all(_decimal(part) for part in parts[:2]):
        return None
    raw = _canonical_base64(parts[2])
    if raw is None or len(raw) % _HASH_BYTES:
        return None
    path = [raw[at : at + _HASH_BYTES] for at in range(0, len(raw), _HASH_BYTES)]
    return int(parts[0]), int(parts[1]), path


def _decimal(text: str) -> bool:
    """Whether ``text`` is a number's one decimal spelling (no sign, no leading zero)."""
    return text.isdigit() and text.isascii() and str(int(text)) == text


def signed_message(envelope: Envelope[Any]) -> bytes | None:
    """What ``envelope``'s signature must be over: its canonical form, or for a record of a
    batch the batch's message its proof leads to (None: the proof is malformed)."""
    if envelope.batchproof is None:
        return canonical_bytes(envelope)
    proof = parse_proof(envelope.batchproof)
    if proof is None:
        return None
    index, count, path = proof
    root = root_from(leaf_hash(envelope), index, count, path)
    return None if root is None else batch_message(count, root)


def verifies(
    envelope: Envelope[Any],
    key: Ed25519PublicKey,
    verified: MutableMapping[bytes, None] | None = None,
) -> bool:
    """Whether ``envelope``'s signature is ``key``'s over its canonical form (or over the
    root of the batch its proof places it in). ``verified`` remembers the batch signatures
    this key was found to have made, so a batch's other records skip the Ed25519 check; it
    must be kept per key, and holds only what verified."""
    if envelope.signature is None:
        return False
    signature = signature_bytes(envelope.signature)
    if signature is None:
        return False
    message = signed_message(envelope)
    if message is None:
        return False
    remembered = signature + message if envelope.batchproof is not None else None
    if verified is not None and remembered is not None and remembered in verified:
        return True
    try:
        key.verify(signature, message)
    except InvalidSignature:
        return False
    if verified is not None and remembered is not None:
        verified[remembered] = None
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
        unsigned = self._unsigned(envelope)
        signature = self._key.sign(canonical_bytes(unsigned))
        signed: Envelope[Any] = unsigned.model_copy(
            update={"signature": base64.b64encode(signature).decode()}
        )
        return signed

    def sign_batch(self, envelopes: Sequence[Envelope[Any]]) -> list[Envelope[Any]]:
        """``envelopes`` signed under this key, :data:`BATCH_MAX` to a signature (copies, in
        their order). A batch of one is signed as :meth:`sign` signs it."""
        signed: list[Envelope[Any]] = []
        for start in range(0, len(envelopes), BATCH_MAX):
            chunk = envelopes[start : start + BATCH_MAX]
            if len(chunk) == 1:
                signed.append(self.sign(chunk[0]))
                continue
            unsigned = [self._unsigned(envelope) for envelope in chunk]
            root, paths = merkle_paths([leaf_hash(envelope) for envelope in unsigned])
            count = len(unsigned)
            signature = base64.b64encode(self._key.sign(batch_message(count, root))).decode()
            for index, envelope in enumerate(unsigned):
                signed.append(
                    envelope.model_copy(
                        update={
                            "signature": signature,
                            "batchproof": proof_text(index, count, paths[index]),
                        }
                    )
                )
        return signed

    def _unsigned(self, envelope: Envelope[Any]) -> Envelope[Any]:
        return envelope.model_copy(
            update={"signer": self.key_id, "signature": None, "batchproof": None}
        )
