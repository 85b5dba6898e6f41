"""Test vectors of the log's specification (``docs/spec/log-v1.md``), and their drift check.

An auditor who writes their own verifier from the specification needs more than prose: one
wrong byte (a missing newline after the domain tag, an attribute left in the canonical form, a
count in the wrong byte order) fails every signature, and prose cannot show every byte. So
this module signs a few fixed records and batches with a fixed test key, through the very
functions every Fairshare service signs with (``events.signing``), and writes what an
independent implementation must reproduce into ``docs/spec/vectors/`` as JSON: the records as
an export writes them and as Kafka carries them, their canonical bytes, the Merkle leaves,
roots and paths, the batch messages and the signatures, and tampered records that must fail.

**The key is a test key, never a real one.** Its 32-byte Ed25519 seed is the SHA-256 of a
fixed sentence (:data:`TEST_KEY_SEED_TEXT`), so anyone can re-derive it, which is exactly why
no log may ever register it. Ed25519 signatures are deterministic (RFC 8032), so the files are
the same on every run; CI keeps them equal to what the code produces::

    python -m events.spec_vectors           # (re)write docs/spec/vectors/
    python -m events.spec_vectors --check   # exit 1 if any file would change
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import sys
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import orjson
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from events.envelope import Envelope, derived_event_id, new_event
from events.models import (
    GpuHeartbeat,
    GpuReading,
    LedgerCharge,
    NodeGpus,
    NodeRegistered,
    Placement,
    SigningKeyRegistered,
    WorkloadFinished,
    WorkloadStarted,
    WorkloadSubmitted,
)
from events.models.keys import key_id_of
from events.models.ledger import budget_account, capacity_account, charge_id
from events.serde import encode_binary, encode_structured
from events.signing import (
    BATCH_DOMAIN,
    DOMAIN,
    Signer,
    batch_message,
    canonical_bytes,
    leaf_hash,
    merkle_paths,
    parse_proof,
    proof_text,
    raw_public_key,
    signed_message,
)
from events.times import HOUR

DEFAULT_VECTOR_DIR = Path(__file__).resolve().parent.parent / "docs" / "spec" / "vectors"
SPEC_VERSION = "log v1"
GENERATOR = "python -m events.spec_vectors"

#: The seed of the test key is the SHA-256 of this text: public, so never a real key.
TEST_KEY_SEED_TEXT = b"fairshare log v1 test vectors: a public test key, never a real key"
#: When the vectors' facts happen: 2027-01-04T10:00:00Z (epoch 1799056800, on the hour).
T0 = datetime(2027, 1, 4, 10, 0, tzinfo=UTC)
#: The sizes of the bare Merkle trees of ``merkle.json``: every shape up to 8 leaves
#: (unpaired nodes at one level and at several), and a full batch (``BATCH_MAX``).
MERKLE_SIZES = (1, 2, 3, 4, 5, 6, 7, 8, 16)

Json = dict[str, Any]


def vector_seed() -> bytes:
    """The 32-byte Ed25519 seed of the test key (see the module docstring)."""
    return hashlib.sha256(TEST_KEY_SEED_TEXT).digest()


def vector_signer() -> Signer:
    """The project's own signer over the test key: the vectors are what a service signs."""
    return Signer(Ed25519PrivateKey.from_private_bytes(vector_seed()))


def _event_id(n: int) -> str:
    """Fixed, readable event ids (valid UUID spellings), so the vectors never change."""
    return f"00000000-0000-4000-8000-{n:012d}"


def _event(
    data: Any,
    n: int,
    time: datetime,
    *,
    source: str = "fairshare/spec-vectors",
    correlationid: str | None = None,
    causationid: str | None = None,
    event_id: str | None = None,
) -> Envelope[Any]:
    return new_event(
        data,
        source=source,
        time=time,
        event_id=event_id or _event_id(n),
        correlationid=correlationid,
        causationid=causationid,
    )


# -- the facts -----------------------------------------------------------------------------------

_PLACEMENT = Placement(
    nodes=(NodeGpus(node="node-01", gpus=(0, 1)), NodeGpus(node="node-02", gpus=(0, 1)))
)


def _heartbeat(node: str, sequence: int, *, occupied: bool = True) -> GpuHeartbeat:
    return GpuHeartbeat(
        node=node,
        cluster="cluster-a",
        sequence=sequence,
        gpus=(
            GpuReading(
                index=0,
                occupant="wl-1" if occupied else None,
                attempt=1 if occupied else None,
                utilisation_pct=37.5,
                memory_used_bytes=40 << 30,
                memory_total_bytes=80 << 30,
            ),
            # no occupant: its nulls are in the canonical form; 1e-7 shows the float rule
            GpuReading(index=1, utilisation_pct=1e-7, memory_used_bytes=0),
        ),
    )


def _single_records(signer: Signer) -> list[tuple[str, str, Envelope[Any]]]:
    """(name, what it shows, the record unsigned) of each lone signed record."""
    registration = SigningKeyRegistered(
        key_id=signer.key_id,
        public_key=signer.public_key_text,
        role="admin",
        registered_by="spec-vectors",
        required_from=datetime(1970, 1, 1, tzinfo=UTC),
        description="the log v1 test key: public, never a real key",
    )
    finished = WorkloadFinished(
        workload_id="wl-1",
        attempt=1,
        outcome="failed",
        exit_code=-9,
        message='line one\n\ttab, "quotes", back\\slash, \u00e9, \u2713, \U0001f600, \u2028',
    )
    submitted = WorkloadSubmitted(
        workload_id="wl-2",
        budget="lab/vision",
        pools=("a100", "h100"),
        gpus=4,
        gang="whole-nodes",
        min_runtime_s=3600,
        submitter="bo",
        spec={
            "b": [1, 2.0, 0.00001, 1e16, None, True, False],
            "a": {"z": "last", "Z": "upper before lower", "y": -0.5},
            "\u00e9": "U+00E9 sorts after every ASCII key",
            "\U0001f600": "U+1F600 sorts after U+FFFD (code points, not UTF-16 units)",
            "\ufffd": "U+FFFD",
            "big": 9007199254740993,
        },
    )
    bucket = (int(T0.timestamp()) - HOUR) // HOUR
    correction = LedgerCharge(
        charge_id=charge_id("wl-1", 1, bucket, 1),
        workload_id="wl-1",
        budget="lab/vision",
        pool="a100",
        bucket_start=datetime.fromtimestamp(bucket * HOUR, UTC),
        kind="allocated",
        debit_account=capacity_account("a100"),
        credit_account=budget_account("lab/vision"),
        gpu_seconds=404,
        amount=404,
        corrects=charge_id("wl-1", 1, bucket, 0),
    )
    return [
        (
            "key-self-registration",
            "The test key registering itself as the admin (a log's trust anchor): no "
            "correlationid/causationid (absent attributes are left out), a null payload field "
            "(cluster) kept as null, a time on the whole second (no fraction), a payload time.",
            _event(registration, 1, T0),
        ),
        (
            "heartbeat-microseconds",
            "A heartbeat stated at a time with microseconds (six digits kept), GPU readings "
            "with null occupant and attempt, and floats (37.5, and 1e-7 in exponent form).",
            _event(_heartbeat("node-01", 7), 2, T0 + timedelta(seconds=5, microseconds=123456)),
        ),
        (
            "finished-text",
            "A run's end whose message holds a newline, a tab, quotes, a backslash, non-ASCII "
            "characters, U+2028 included (written as UTF-8, never escaped); with "
            "correlationid and causationid.",
            _event(
                finished,
                3,
                T0 + timedelta(hours=1, microseconds=500000),
                source="fairshare/agent/cluster-a",
                correlationid=_event_id(90),
                causationid=_event_id(91),
            ),
        ),
        (
            "submission-spec",
            "A submission whose spec has keys sorted by Unicode code point at every depth "
            "(uppercase before lowercase, U+FFFD before U+1F600), floats in fixed and exponent "
            "form, an integer above 2^53, and defaults (resumable, priority) present.",
            _event(submitted, 4, T0 + timedelta(minutes=1)),
        ),
        (
            "charge-correction",
            "A correction of a posted charge: revision 1, corrects names revision 0, a "
            "decrease so the accounts are reversed (capacity debited), amount = GPU-seconds "
            "of the change; its id derives from the charge id, as charging derives it.",
            _event(
                correction,
                0,
                T0 + timedelta(seconds=30),
                source="fairshare/charging",
                causationid=_event_id(92),
                event_id=derived_event_id("ledger", correction.charge_id),
            ),
        ),
    ]


def _batches() -> list[tuple[str, str, list[Envelope[Any]]]]:
    """(name, what it shows, the records unsigned, in their order) of each signed batch."""
    start = T0 + timedelta(hours=2)
    started = WorkloadStarted(
        workload_id="wl-1", attempt=2, pool="a100", placement=_PLACEMENT, allocated=True
    )
    registrations = [
        NodeRegistered(
            node=f"node-{i:02d}", cluster="cluster-a", pool="a100", gpus=8, gpu_type="A100"
        )
        for i in range(1, 4)
    ]
    return [
        (
            "agent-round-of-2",
            "An agent's round: a run's start and a heartbeat naming it. Two leaves, one node.",
            [
                _event(started, 10, start),
                _event(_heartbeat("node-01", 8), 11, start + timedelta(microseconds=1)),
            ],
        ),
        (
            "registrations-of-3",
            "Three node registrations: the third leaf has no pair at the first level and "
            "moves up unhashed.",
            [
                _event(data, 20 + i, start + timedelta(seconds=i))
                for i, data in enumerate(registrations)
            ],
        ),
        (
            "heartbeats-of-5",
            "Five heartbeats: the fifth leaf moves up unpaired twice before it is hashed "
            "with the root of the first four.",
            [
                _event(_heartbeat(f"node-{i:02d}", 100 + i, occupied=i < 3), 30 + i, start)
                for i in range(1, 6)
            ],
        ),
    ]


# -- rendering -----------------------------------------------------------------------------------


def _hex(raw: bytes) -> str:
    return raw.hex()


def _line(envelope: Envelope[Any]) -> str:
    """The record as an export writes it (structured mode, one line, no newline)."""
    return encode_structured(envelope).decode()


def _kafka(envelope: Envelope[Any]) -> Json:
    """The record as Kafka carries it (binary mode): key, headers and value, as text."""
    record = encode_binary(envelope)
    return {
        "topic_kind": type(envelope.data).topic.value,
        "key": record.key.decode(),
        "headers": [[name, value.decode()] for name, value in record.headers],
        "value": record.value.decode(),
    }


def _record_vector(name: str, about: str, signed: Envelope[Any]) -> Json:
    canonical = canonical_bytes(signed)
    signature = base64.b64decode(signed.signature or "")
    return {
        "name": name,
        "about": about,
        "type": signed.type,
        "line": _line(signed),
        "kafka": _kafka(signed),
        "canonical_hex": _hex(canonical),
        "canonical_text": canonical.decode(),
        "signature": signed.signature,
        "signature_hex": _hex(signature),
        "valid": True,
    }


def _batch_vector(name: str, about: str, signed: Sequence[Envelope[Any]]) -> Json:
    leaves = [leaf_hash(envelope) for envelope in signed]
    root, paths = merkle_paths(leaves)
    count = len(signed)
    records = []
    for index, envelope in enumerate(signed):
        proof = parse_proof(envelope.batchproof or "")
        if proof != (index, count, paths[index]):  # the signer's proof is the tree's path
            raise AssertionError(f"{name}: record {index}'s batchproof is not its path")
        canonical = canonical_bytes(envelope)
        records.append(
            {
                "line": _line(envelope),
                "kafka": _kafka(envelope),
                "canonical_hex": _hex(canonical),
                "leaf_hex": _hex(leaves[index]),
                "index": index,
                "path_hex": [_hex(sibling) for sibling in paths[index]],
                "batchproof": envelope.batchproof,
            }
        )
    message = batch_message(count, root)
    if any(signed_message(envelope) != message for envelope in signed):
        raise AssertionError(f"{name}: a record's proof does not lead to the batch's message")
    return {
        "name": name,
        "about": about,
        "count": count,
        "records": records,
        "root_hex": _hex(root),
        "message_hex": _hex(message),
        "signature": signed[0].signature,
        "signature_hex": _hex(base64.b64decode(signed[0].signature or "")),
        "valid": True,
    }


def _batch_of_one(signer: Signer, key: Ed25519PrivateKey) -> tuple[Json, Envelope[Any]]:
    """A record with the proof of a batch of one (``0/1/``, no sibling): a signer signs a lone
    record without a proof (:meth:`Signer.sign_batch`), but a verifier accepts this too, since
    its root is its leaf (``events.signing.root_from``)."""
    data = NodeRegistered(node="node-09", cluster="cluster-a", pool="a100", gpus=8, gpu_type="A100")
    unsigned = _event(data, 40, T0 + timedelta(hours=3)).model_copy(
        update={"signer": signer.key_id}
    )
    # what Signer._unsigned does, then the batch signature of Signer.sign_batch for one leaf
    leaf = leaf_hash(unsigned)
    root, paths = merkle_paths([leaf])
    signature = base64.b64encode(key.sign(batch_message(1, root))).decode()
    signed: Envelope[Any] = unsigned.model_copy(
        update={"signature": signature, "batchproof": proof_text(0, 1, paths[0])}
    )
    vector = _batch_vector(
        "proof-of-a-batch-of-one",
        "A batch of one record with its proof (0/1/, no sibling hash): the root is the leaf. "
        "Services sign a lone record without a proof; verifiers accept both.",
        [signed],
    )
    return vector, signed


def _merkle_vectors() -> list[Json]:
    """Bare trees over made-up leaves, for an implementation's tree code alone."""
    trees = []
    for count in MERKLE_SIZES:
        inputs = [f"leaf {i}".encode() for i in range(count)]
        leaves = [hashlib.sha256(b"\x00" + data).digest() for data in inputs]
        root, paths = merkle_paths(leaves)
        trees.append(
            {
                "count": count,
                "leaf_inputs_hex": [_hex(data) for data in inputs],
                "leaves_hex": [_hex(leaf) for leaf in leaves],
                "root_hex": _hex(root),
                "paths_hex": [[_hex(sibling) for sibling in path] for path in paths],
                "batchproofs": [proof_text(i, count, path) for i, path in enumerate(paths)],
            }
        )
    return trees


# -- tampering -----------------------------------------------------------------------------------


def _replace_once(text: str, old: str, new: str) -> str:
    """``text`` with its one occurrence of ``old`` replaced (a vector must change one thing)."""
    if text.count(old) != 1:
        raise AssertionError(f"{old!r} occurs {text.count(old)} times, not once")
    return text.replace(old, new)


def _with_attributes(line: str, **changes: Any) -> str:
    """An export line with attributes set (None: removed), re-written as the exporter writes
    (attribute order kept, new ones before ``datacontenttype``)."""
    document: dict[str, Any] = orjson.loads(line)
    data, content_type = document.pop("data"), document.pop("datacontenttype")
    for name, value in changes.items():
        if value is None:
            document.pop(name, None)
        else:
            document[name] = value
    document["datacontenttype"], document["data"] = content_type, data
    return orjson.dumps(document).decode()


def _other_spelling(signature: str) -> str:
    """The same 64 bytes with the two bits base64 ignores set: not the one spelling."""
    body, last = signature[:85], signature[85]
    alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
    # the last character carries 2 bits of the signature and 4 that must be zero
    return body + alphabet[alphabet.index(last) | 0b0001] + "=="


def _flip_sibling(proof: str) -> str:
    index, count, path = proof.split("/", 2)
    raw = bytearray(base64.b64decode(path))
    raw[0] ^= 0x01
    return f"{index}/{count}/{base64.b64encode(bytes(raw)).decode()}"


def _path_changed(proof: str, change: Callable[[bytes], bytes]) -> str:
    index, count, path = proof.split("/", 2)
    return f"{index}/{count}/{base64.b64encode(change(base64.b64decode(path))).decode()}"


def _tampered(records: list[Json], batches: list[Json]) -> list[Json]:
    """Records that must not verify, each one change away from a good vector."""
    return [
        {"name": name, "from": source, "about": about, "line": line, "valid": False}
        for name, source, about, line in [*_tampered_records(records), *_tampered_batches(batches)]
    ]


def _tampered_records(records: list[Json]) -> list[tuple[str, str, str, str]]:
    """Lone records one change away from a good one: (name, from, about, line)."""
    heartbeat = next(r for r in records if r["name"] == "heartbeat-microseconds")["line"]
    finished = next(r for r in records if r["name"] == "finished-text")["line"]
    registration = next(r for r in records if r["name"] == "key-self-registration")["line"]
    signature = orjson.loads(heartbeat)["signature"]
    return [
        (
            "record-data-byte-flipped",
            "heartbeat-microseconds",
            'One byte of the payload changed: "sequence":7 became "sequence":6.',
            _replace_once(heartbeat, '"sequence":7', '"sequence":6'),
        ),
        (
            "record-time-one-microsecond-later",
            "heartbeat-microseconds",
            "The time attribute moved by one microsecond (.123456Z to .123457Z): the "
            "canonical form keeps microseconds.",
            _replace_once(heartbeat, ".123456Z", ".123457Z"),
        ),
        (
            "record-source-changed",
            "finished-text",
            "The source attribute changed.",
            _with_attributes(finished, source="fairshare/agent/cluster-b"),
        ),
        (
            "record-causationid-removed",
            "finished-text",
            "An attribute removed: an absent attribute is not the same as a present one.",
            _with_attributes(finished, causationid=None),
        ),
        (
            "record-correlationid-added",
            "key-self-registration",
            "An attribute added that the signed record did not have.",
            _with_attributes(registration, correlationid=_event_id(93)),
        ),
        (
            "record-signer-relabelled",
            "heartbeat-microseconds",
            "The signer attribute changed (verified with the test key): the key id is signed, "
            "so a signature cannot be re-labelled as another key's.",
            _with_attributes(heartbeat, signer="0" * 32),
        ),
        (
            "record-signature-other-spelling",
            "heartbeat-microseconds",
            "The signature's last base64 character changed in the bits decoding ignores: the "
            "same 64 bytes, but not their one base64 spelling.",
            _with_attributes(heartbeat, signature=_other_spelling(signature)),
        ),
        (
            "record-proof-added",
            "heartbeat-microseconds",
            "A lone record given the proof of a batch of one (0/1/): its signature is over the "
            "fact's domain, not a batch message.",
            _with_attributes(heartbeat, batchproof="0/1/"),
        ),
    ]


def _tampered_batches(batches: list[Json]) -> list[tuple[str, str, str, str]]:
    """Records of a batch one change away from a good one: (name, from, about, line)."""
    five = next(b for b in batches if b["name"] == "heartbeats-of-5")["records"]
    three = next(b for b in batches if b["name"] == "registrations-of-3")["records"]
    first, second, last = five[0], five[1], five[4]
    return [
        (
            "batch-record-data-changed",
            "heartbeats-of-5",
            'Record 1 of the batch with one byte of its payload changed ("sequence":102 '
            'became "sequence":103): its leaf, hence the root, changes.',
            _replace_once(second["line"], '"sequence":102', '"sequence":103'),
        ),
        (
            "batch-proof-sibling-wrong",
            "heartbeats-of-5",
            "Record 0 with one bit of the first sibling hash of its path flipped.",
            _with_attributes(first["line"], batchproof=_flip_sibling(first["batchproof"])),
        ),
        (
            "batch-count-changed",
            "heartbeats-of-5",
            "Record 0's proof says 6 records instead of 5. Its path still fits a tree of 6 "
            "and gives the same root, so only the count in the signed batch message differs.",
            _with_attributes(
                first["line"], batchproof=_replace_once(first["batchproof"], "0/5/", "0/6/")
            ),
        ),
        (
            "batch-index-changed",
            "heartbeats-of-5",
            "Record 1's proof says index 0 instead of 1: the leaf is hashed on the wrong side.",
            _with_attributes(
                second["line"], batchproof=_replace_once(second["batchproof"], "1/5/", "0/5/")
            ),
        ),
        (
            "batch-index-leading-zero",
            "heartbeats-of-5",
            "Record 1's proof spells its index 01: not a number's one decimal spelling.",
            _with_attributes(
                second["line"], batchproof=_replace_once(second["batchproof"], "1/5/", "01/5/")
            ),
        ),
        (
            "batch-path-too-short",
            "heartbeats-of-5",
            "Record 4's path without its last sibling hash.",
            _with_attributes(
                last["line"], batchproof=_path_changed(last["batchproof"], lambda p: p[:-32])
            ),
        ),
        (
            "batch-path-too-long",
            "heartbeats-of-5",
            "Record 4's path with one more sibling hash (its own leaf) appended.",
            _with_attributes(
                last["line"],
                batchproof=_path_changed(
                    last["batchproof"], lambda p: p + bytes.fromhex(last["leaf_hex"])
                ),
            ),
        ),
        (
            "batch-proof-moved",
            "heartbeats-of-5",
            "Record 1 carrying record 0's proof.",
            _with_attributes(second["line"], batchproof=first["batchproof"]),
        ),
        (
            "batch-proof-removed",
            "registrations-of-3",
            "Record 2 of its batch without its batchproof: verified as a lone record, its "
            "signature (over the batch message) does not cover its canonical form.",
            _with_attributes(three[2]["line"], batchproof=None),
        ),
    ]


def _dump(document: Any) -> bytes:
    return orjson.dumps(document, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS) + b"\n"


def _file(about: str, key: str, items: list[Json]) -> bytes:
    return _dump({"spec": SPEC_VERSION, "generated_by": GENERATOR, "about": about, key: items})


def render_vectors() -> dict[str, bytes]:
    """File name -> content of every vector file (deterministic: same bytes every run)."""
    signer = vector_signer()
    private_key = Ed25519PrivateKey.from_private_bytes(vector_seed())
    public_key = raw_public_key(private_key.public_key())
    if public_key != signer.public_key or key_id_of(public_key) != signer.key_id:
        raise AssertionError("the test signer is not the test key")
    records = [
        _record_vector(name, about, signer.sign(unsigned))
        for name, about, unsigned in _single_records(signer)
    ]
    batches = [
        _batch_vector(name, about, signer.sign_batch(unsigned))
        for name, about, unsigned in _batches()
    ]
    one, _ = _batch_of_one(signer, private_key)
    batches.append(one)
    key = {
        "spec": SPEC_VERSION,
        "generated_by": GENERATOR,
        "warning": "A PUBLIC TEST KEY: its seed is printed here. Never register it in a log.",
        "seed_text": TEST_KEY_SEED_TEXT.decode(),
        "seed_hex": _hex(vector_seed()),
        "seed_rule": "seed = SHA-256(seed_text as ASCII); the Ed25519 private key of RFC 8032",
        "public_key_hex": _hex(public_key),
        "public_key_base64": signer.public_key_text,
        "key_id": signer.key_id,
        "key_id_rule": "the first 16 bytes of SHA-256(the 32 raw public key bytes), in "
        "lowercase hex (log-v1 section 7.1)",
        "domain_hex": _hex(DOMAIN),
        "batch_domain_hex": _hex(BATCH_DOMAIN),
    }
    return {
        "key.json": _dump(key),
        "records.json": _file(
            "Lone signed records: the signature is Ed25519 over canonical_hex (log-v1 "
            "section 5). line: as an export writes it; kafka: as the topic carries it.",
            "records",
            records,
        ),
        "batches.json": _file(
            "Signed batches: leaf = SHA-256(0x00 || canonical), Merkle root, each record's "
            "path and batchproof, and the signature over message_hex (log-v1 section 6).",
            "batches",
            batches,
        ),
        "merkle.json": _file(
            "Bare Merkle trees over the leaves SHA-256(0x00 || leaf input): roots and paths "
            "(log-v1 section 6.2).",
            "trees",
            _merkle_vectors(),
        ),
        "tampered.json": _file(
            "Records one change away from a good vector (from): each MUST fail verification "
            "with the test key (log-v1 sections 5 and 6).",
            "records",
            _tampered(records, batches),
        ),
    }


def write_vectors(directory: Path = DEFAULT_VECTOR_DIR) -> list[str]:
    """Writes the vectors, removing stale ``*.json`` files; returns the names written."""
    directory.mkdir(parents=True, exist_ok=True)
    files = render_vectors()
    for stale in directory.glob("*.json"):
        if stale.name not in files:
            stale.unlink()
    for name, content in files.items():
        (directory / name).write_bytes(content)
    return sorted(files)


def vector_drift(directory: Path = DEFAULT_VECTOR_DIR) -> list[str]:
    """What a regeneration would change in ``directory`` (empty: nothing)."""
    files = render_vectors()
    present = {path.name for path in directory.glob("*.json")} if directory.is_dir() else set()
    problems = []
    for name, content in sorted(files.items()):
        if name not in present:
            problems.append(f"{name}: missing")
        elif (directory / name).read_bytes() != content:
            problems.append(f"{name}: differs from what the code generates")
    problems += [f"{name}: no longer generated" for name in sorted(present - set(files))]
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog=GENERATOR, description=__doc__)
    parser.add_argument("--dir", type=Path, default=DEFAULT_VECTOR_DIR)
    parser.add_argument(
        "--check", action="store_true", help="exit 1 if any vector file would change"
    )
    args = parser.parse_args(argv)
    if args.check:
        problems = vector_drift(args.dir)
        for problem in problems:
            print(f"vector drift: {problem}", file=sys.stderr)
        if problems:
            print(f"regenerate with: {GENERATOR}", file=sys.stderr)
            return 1
        print(f"spec vectors up to date ({len(render_vectors())} files in {args.dir})")
        return 0
    names = write_vectors(args.dir)
    print(f"wrote {len(names)} vector files to {args.dir}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
