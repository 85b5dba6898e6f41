"""The specification of the log (docs/spec/log-v1.md) and its test vectors (docs/spec/vectors/).

An outside auditor verified every signature only after guessing the signed bytes by brute
force. The specification now states them, and these tests hold it to the code three ways:

* the vectors are exactly what the code generates (regenerating changes nothing);
* an *independent* verifier, written here from the specification alone (hashlib, base64, re,
  orjson and ``cryptography``'s Ed25519; it imports nothing of Fairshare, and uses RFC 9162's
  algorithms for the tree, not the project's), reproduces every canonical form, leaf, root and
  batch message, verifies every good vector and rejects every tampered one;
* the project's own verifier (``events.signing``) reaches the same verdict on every vector.

The spec's table of types and its worked charging example are checked against the code too, so
that neither can drift from what readers do.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import re
from pathlib import Path
from typing import Any

import orjson
import pytest
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

ROOT = Path(__file__).resolve().parents[2]
SPEC = ROOT / "docs" / "spec" / "log-v1.md"
VECTORS = ROOT / "docs" / "spec" / "vectors"


def _load(name: str) -> dict[str, Any]:
    document: dict[str, Any] = orjson.loads((VECTORS / name).read_bytes())
    return document


KEY = _load("key.json")
RECORDS: list[dict[str, Any]] = _load("records.json")["records"]
BATCHES: list[dict[str, Any]] = _load("batches.json")["batches"]
TREES: list[dict[str, Any]] = _load("merkle.json")["trees"]
TAMPERED: list[dict[str, Any]] = _load("tampered.json")["records"]
PUBLIC_KEY = bytes.fromhex(KEY["public_key_hex"])


# == The independent verifier: from docs/spec/log-v1.md alone; nothing of Fairshare below. =====

#: 5.3 and 6.4: each domain tag is followed by one newline byte.
SPEC_DOMAIN = b"fairshare/signed-fact/v1\n"
SPEC_BATCH_DOMAIN = b"fairshare/signed-batch/v1\n"
#: 5.2: the attributes of the canonical document (never signature nor batchproof).
SPEC_SIGNED_ATTRIBUTES = (
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
#: 6.3: two numbers in their one decimal spelling, then base64.
SPEC_PROOF = re.compile(r"(0|[1-9][0-9]*)/(0|[1-9][0-9]*)/([A-Za-z0-9+/]*={0,2})")


def sha256(data: bytes) -> bytes:
    return hashlib.sha256(data).digest()


def spec_base64(text: str) -> bytes | None:
    """5.5 and 6.3: the bytes of ``text`` if it is their one base64 spelling."""
    try:
        raw = base64.b64decode(text, validate=True)
    except binascii.Error:
        return None
    return raw if base64.b64encode(raw).decode() == text else None


def spec_canonical(attributes: dict[str, Any], data: Any, domain: bytes = SPEC_DOMAIN) -> bytes:
    """5.2 and 5.3, from a record's attributes and payload as a conforming writer wrote them
    (every payload field present, times as 4.2), so that re-encoding is normalising."""
    document = {
        name: attributes[name]
        for name in SPEC_SIGNED_ATTRIBUTES
        if attributes.get(name) is not None
    }
    document["datacontenttype"] = attributes.get("datacontenttype", "application/json")
    document["data"] = data
    return domain + orjson.dumps(document, option=orjson.OPT_SORT_KEYS)


def from_line(line: str) -> tuple[dict[str, Any], Any]:
    """2.4: a structured-mode line's attributes and payload."""
    document: dict[str, Any] = orjson.loads(line)
    data = document.pop("data")
    return document, data


def from_kafka(record: dict[str, Any]) -> tuple[dict[str, Any], Any]:
    """2.5: a binary-mode record's attributes (``ce_`` headers) and payload (the value)."""
    attributes = {
        name.removeprefix("ce_"): value
        for name, value in record["headers"]
        if name.startswith("ce_")
    }
    return attributes, orjson.loads(record["value"])


def spec_parse_proof(text: str) -> tuple[int, int, list[bytes]] | None:
    """6.3."""
    match = SPEC_PROOF.fullmatch(text)
    if match is None:
        return None
    raw = spec_base64(match[3])
    if raw is None or len(raw) % 32:
        return None
    return int(match[1]), int(match[2]), [raw[at : at + 32] for at in range(0, len(raw), 32)]


def rfc9162_root(leaf: bytes, index: int, count: int, path: list[bytes]) -> bytes | None:
    """The root an inclusion proof leads to: RFC 9162 section 2.1.3.2, which 6.6 says gives
    what its own loop gives."""
    if index >= count:
        return None
    fn, sn, node = index, count - 1, leaf
    for sibling in path:
        if sn == 0:
            return None
        if fn & 1 or fn == sn:
            node = sha256(b"\x01" + sibling + node)
            while not fn & 1 and fn != 0:
                fn, sn = fn >> 1, sn >> 1
        else:
            node = sha256(b"\x01" + node + sibling)
        fn, sn = fn >> 1, sn >> 1
    return node if sn == 0 else None


def rfc9162_tree(inputs: list[bytes]) -> tuple[bytes, list[list[bytes]]]:
    """MTH(D[n]) and PATH(m, D[n]) of RFC 9162 section 2.1, which 6.2 says the tree is."""

    def mth(data: list[bytes]) -> bytes:
        if len(data) == 1:
            return sha256(b"\x00" + data[0])
        k = 1 << ((len(data) - 1).bit_length() - 1)  # the largest power of two below n
        return sha256(b"\x01" + mth(data[:k]) + mth(data[k:]))

    def path(m: int, data: list[bytes]) -> list[bytes]:
        if len(data) == 1:
            return []
        k = 1 << ((len(data) - 1).bit_length() - 1)
        if m < k:
            return [*path(m, data[:k]), mth(data[k:])]
        return [*path(m - k, data[k:]), mth(data[:k])]

    return mth(inputs), [path(m, inputs) for m in range(len(inputs))]


def spec_signed_message(
    attributes: dict[str, Any], data: Any, domain: bytes = SPEC_DOMAIN
) -> bytes | None:
    """5.3 for a lone record, 6.4 and 6.6 for a record of a batch (None: a malformed proof)."""
    canonical = spec_canonical(attributes, data, domain)
    proof = attributes.get("batchproof")
    if proof is None:
        return canonical
    parsed = spec_parse_proof(proof)
    if parsed is None:
        return None
    index, count, path = parsed
    root = rfc9162_root(sha256(b"\x00" + canonical), index, count, path)
    if root is None or count >= 1 << 32:
        return None
    return SPEC_BATCH_DOMAIN + count.to_bytes(4, "big") + root


def spec_verifies(
    attributes: dict[str, Any], data: Any, public_key: bytes, domain: bytes = SPEC_DOMAIN
) -> bool:
    """5.5 and 6.6."""
    text = attributes.get("signature")
    signature = spec_base64(text) if isinstance(text, str) else None
    if signature is None or len(signature) != 64:
        return False
    message = spec_signed_message(attributes, data, domain)
    if message is None:
        return False
    try:
        Ed25519PublicKey.from_public_bytes(public_key).verify(signature, message)
    except InvalidSignature:
        return False
    return True


def spec_key_id(public_key: bytes) -> str:
    """7.1: the first 16 bytes of SHA-256 over the 32 raw bytes, in hex."""
    return hashlib.sha256(public_key).digest()[:16].hex()


# == (b) the independent verifier against the vectors ===========================================


def test_the_test_key_is_derived_as_key_json_says() -> None:
    seed = hashlib.sha256(KEY["seed_text"].encode()).digest()
    assert seed.hex() == KEY["seed_hex"]
    public = Ed25519PrivateKey.from_private_bytes(seed).public_key()
    raw = public.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    assert raw == PUBLIC_KEY
    assert base64.b64encode(raw).decode() == KEY["public_key_base64"]
    assert spec_key_id(raw) == KEY["key_id"]
    assert bytes.fromhex(KEY["domain_hex"]) == SPEC_DOMAIN
    assert bytes.fromhex(KEY["batch_domain_hex"]) == SPEC_BATCH_DOMAIN


@pytest.mark.parametrize("vector", RECORDS, ids=lambda v: v["name"])
def test_independent_verifier_reproduces_and_verifies_each_record(vector: dict[str, Any]) -> None:
    for attributes, data in (from_line(vector["line"]), from_kafka(vector["kafka"])):
        assert attributes["signer"] == KEY["key_id"]
        canonical = spec_canonical(attributes, data)
        assert canonical.hex() == vector["canonical_hex"]
        assert canonical.decode() == vector["canonical_text"]
        assert spec_verifies(attributes, data, PUBLIC_KEY)
        # the newline after the domain tag is part of what is signed: without it, nothing verifies
        assert not spec_verifies(attributes, data, PUBLIC_KEY, domain=SPEC_DOMAIN[:-1])


@pytest.mark.parametrize("vector", BATCHES, ids=lambda v: v["name"])
def test_independent_verifier_reproduces_and_verifies_each_batch(vector: dict[str, Any]) -> None:
    root = bytes.fromhex(vector["root_hex"])
    message = SPEC_BATCH_DOMAIN + vector["count"].to_bytes(4, "big") + root
    assert message.hex() == vector["message_hex"]
    for record in vector["records"]:
        for attributes, data in (from_line(record["line"]), from_kafka(record["kafka"])):
            canonical = spec_canonical(attributes, data)
            assert canonical.hex() == record["canonical_hex"]
            leaf = sha256(b"\x00" + canonical)
            assert leaf.hex() == record["leaf_hex"]
            parsed = spec_parse_proof(attributes["batchproof"])
            assert parsed is not None
            index, count, path = parsed
            assert (index, count) == (record["index"], vector["count"])
            assert [sibling.hex() for sibling in path] == record["path_hex"]
            assert rfc9162_root(leaf, index, count, path) == root
            assert spec_signed_message(attributes, data) == message
            assert attributes["signature"] == vector["signature"]
            assert spec_verifies(attributes, data, PUBLIC_KEY)


@pytest.mark.parametrize("tree", TREES, ids=lambda t: f"{t['count']} leaves")
def test_merkle_vectors_are_rfc9162_trees(tree: dict[str, Any]) -> None:
    inputs = [bytes.fromhex(data) for data in tree["leaf_inputs_hex"]]
    root, paths = rfc9162_tree(inputs)
    assert root.hex() == tree["root_hex"]
    assert [[sibling.hex() for sibling in path] for path in paths] == tree["paths_hex"]
    count = tree["count"]
    for index, (leaf, path) in enumerate(zip(tree["leaves_hex"], paths, strict=True)):
        assert leaf == sha256(b"\x00" + inputs[index]).hex()
        assert rfc9162_root(bytes.fromhex(leaf), index, count, path) == root
        proof = f"{index}/{count}/{base64.b64encode(b''.join(path)).decode()}"
        assert proof == tree["batchproofs"][index]


@pytest.mark.parametrize("vector", TAMPERED, ids=lambda v: v["name"])
def test_independent_verifier_rejects_each_tampered_record(vector: dict[str, Any]) -> None:
    attributes, data = from_line(vector["line"])
    assert not spec_verifies(attributes, data, PUBLIC_KEY)


def test_the_tampered_vectors_cover_what_an_auditor_must_get_right() -> None:
    names = {vector["name"] for vector in TAMPERED}
    assert {
        "record-data-byte-flipped",
        "record-time-one-microsecond-later",
        "record-causationid-removed",
        "record-correlationid-added",
        "record-signer-relabelled",
        "record-signature-other-spelling",
        "batch-proof-sibling-wrong",
        "batch-count-changed",
        "batch-index-leading-zero",
        "batch-path-too-short",
        "batch-path-too-long",
    } <= names
    sources = {vector["name"] for vector in [*RECORDS, *BATCHES]}
    assert {vector["from"] for vector in TAMPERED} <= sources
    assert all(vector["valid"] is False for vector in TAMPERED)
    assert all(vector["valid"] is True for vector in [*RECORDS, *BATCHES])


# == (c) the project's verifier agrees =============================================================


def _project_verdict(line: str) -> bool:
    from events.serde import decode_structured
    from events.signing import verifies

    envelope = decode_structured(line)  # every vector decodes: only its signature is at stake
    return verifies(envelope, Ed25519PublicKey.from_public_bytes(PUBLIC_KEY))


def test_the_project_verifier_agrees_on_every_vector() -> None:
    from events.serde import decode_binary, decode_structured
    from events.signing import canonical_bytes, leaf_hash, signed_message, verifies

    key = Ed25519PublicKey.from_public_bytes(PUBLIC_KEY)
    lone = [(record, None) for record in RECORDS]
    batched = [(record, batch) for batch in BATCHES for record in batch["records"]]
    for record, batch in [*lone, *batched]:
        assert _project_verdict(record["line"]) is True
        envelope = decode_structured(record["line"])
        assert canonical_bytes(envelope).hex() == record["canonical_hex"]
        kafka = record["kafka"]
        headers = [(name, value.encode()) for name, value in kafka["headers"]]
        from_topic = decode_binary(kafka["value"].encode(), headers)
        assert from_topic == envelope
        assert from_topic.key == kafka["key"].encode()
        assert verifies(from_topic, key)
        if batch is not None:
            assert leaf_hash(envelope).hex() == record["leaf_hex"]
            assert signed_message(envelope) == bytes.fromhex(batch["message_hex"])
    for vector in TAMPERED:
        assert _project_verdict(vector["line"]) is False, vector["name"]


# == (a) the vectors are what the code generates ==================================================


def test_regenerating_the_vectors_changes_nothing() -> None:
    from events.spec_vectors import DEFAULT_VECTOR_DIR, render_vectors, vector_drift

    assert DEFAULT_VECTOR_DIR == VECTORS
    assert vector_drift() == [], "run `python -m events.spec_vectors` and commit docs/spec/"
    assert render_vectors() == render_vectors()  # deterministic: Ed25519 signs deterministically


def test_check_fails_when_a_vector_file_would_change(tmp_path: Path) -> None:
    from events.spec_vectors import main, write_vectors

    write_vectors(tmp_path)
    assert main(["--check", "--dir", str(tmp_path)]) == 0
    records = tmp_path / "records.json"
    records.write_bytes(records.read_bytes().replace(b'"valid": true', b'"valid": false', 1))
    (tmp_path / "old.json").write_text("{}")
    assert main(["--check", "--dir", str(tmp_path)]) == 1
    write_vectors(tmp_path)
    assert not (tmp_path / "old.json").exists()
    assert main(["--check", "--dir", str(tmp_path)]) == 0


# == the spec's statements that are not vectors ===================================================

_TYPE_ROW = re.compile(
    r"^\| `(fairshare\.[a-z_.]+\.v[0-9]+)` \| `([a-z]+)` \| `([a-z_]+)` \| (.*) \|$"
)


def test_the_spec_table_of_types_is_the_code() -> None:
    """Section 3.3: every type, its topic, its subject field and who may state it."""
    from events.models import ALL_EVENT_MODELS
    from projections.trust import STATED_BY, UNJUDGED

    rows = {}
    for line in SPEC.read_text().splitlines():
        match = _TYPE_ROW.match(line)
        if match:
            type_, topic, subject, roles = match.groups()
            rows[type_] = (topic, subject, frozenset(re.findall(r"`([a-z]+)`", roles)))
    expected = {
        model.event_type: (
            model.topic.value,
            model.subject_field,
            STATED_BY.get(model, frozenset()),
        )
        for model in ALL_EVENT_MODELS
    }
    assert rows == expected
    assert {model.event_type for model in UNJUDGED} == {
        type_ for type_, (_, _, roles) in rows.items() if not roles
    }


def test_the_spec_worked_charging_example() -> None:
    """Section 8.8: floored times, a confirmation exactly at the hour's end, one GPU of a gang
    confirming the run, a loss ending it at its floored last heartbeat, and the correction."""
    from datetime import UTC, datetime

    from events import new_event
    from events.envelope import Envelope
    from events.models import (
        GpuHeartbeat,
        GpuReading,
        NodeGpus,
        Placement,
        WorkloadLost,
        WorkloadStarted,
        WorkloadSubmitted,
    )
    from projections.ledger import Ledger, charge_totals

    def at(text: str) -> datetime:
        return datetime.fromisoformat(text.replace("Z", "+00:00")).astimezone(UTC)

    submitted = WorkloadSubmitted(
        workload_id="wl-1",
        budget="lab/vision",
        pools=("a100",),
        gpus=2,
        gang="whole-nodes",
        min_runtime_s=600,
        submitter="bo",
    )
    started = WorkloadStarted(
        workload_id="wl-1",
        attempt=1,
        pool="a100",
        allocated=True,
        placement=Placement(
            nodes=(NodeGpus(node="node-01", gpus=(0,)), NodeGpus(node="node-02", gpus=(0,)))
        ),
    )
    heartbeat = GpuHeartbeat(
        node="node-02",
        cluster="cluster-a",
        sequence=1,
        gpus=(
            GpuReading(
                index=0, occupant="wl-1", attempt=1, utilisation_pct=90.0, memory_used_bytes=1
            ),
        ),
    )
    lost = WorkloadLost(
        workload_id="wl-1",
        attempt=1,
        node="node-01",
        last_heartbeat=at("2027-01-04T10:58:20.999999Z"),
    )
    facts: list[Envelope[Any]] = [
        new_event(submitted, source="spec", time=at("2027-01-04T09:00:00Z")),
        new_event(started, source="spec", time=at("2027-01-04T09:59:59.700000Z")),
        new_event(heartbeat, source="spec", time=at("2027-01-04T11:00:00Z")),
        new_event(lost, source="spec", time=at("2027-01-04T11:00:20Z")),
    ]
    assert facts[1].epoch_seconds == 1799056799

    def fold(order: list[int]) -> list[tuple[str, int, str, str, str | None]]:
        ledger = Ledger()
        for i in order:
            ledger.apply(facts[i].data, facts[i].epoch_seconds)
        entries = ledger.entries
        assert charge_totals(entries)[("lab/vision", "a100", 1799056800)] == 7000
        return [
            (c.charge_id, c.gpu_seconds, c.debit_account, c.credit_account, c.corrects)
            for c in entries
        ]

    budget, capacity = "budget:lab/vision", "capacity:a100"
    assert fold([0, 1, 2, 3]) == [
        ("charge:wl-1:1:1799053200:0", 2, budget, capacity, None),
        ("charge:wl-1:1:1799056800:0", 7200, budget, capacity, None),
        ("charge:wl-1:1:1799056800:1", 200, capacity, budget, "charge:wl-1:1:1799056800:0"),
    ]
    # folded as read, the loss before the heartbeat: not the canonical order (8.9)
    assert fold([0, 1, 3, 2]) == [
        ("charge:wl-1:1:1799053200:0", 2, budget, capacity, None),
        ("charge:wl-1:1:1799056800:0", 7000, budget, capacity, None),
    ]
