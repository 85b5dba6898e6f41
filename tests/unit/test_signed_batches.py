"""Records signed a batch at a time (events/signing.py, "Batches"): each record still proves
its signer on its own, a reader verifies one Ed25519 signature per batch, and no change to a
record, its proof or its place in the batch survives, even after its batch mates were
believed."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from events import new_event
from events.envelope import Envelope
from events.lean import binary_decoder, structured_decoder
from events.models import NodeRegistered
from events.serde import (
    decode_binary,
    decode_structured,
    encode_binary,
    encode_structured,
)
from events.signing import (
    BATCH_MAX,
    leaf_hash,
    merkle_paths,
    parse_proof,
    proof_text,
    root_from,
    verifies,
)
from projections.trust import BAD_SIGNATURE, UNKNOWN_KEY, Trust
from services.bus.signing import SigningPublisher
from tests.signing import KEYS, mutated, registrations

T0 = datetime(2027, 1, 4, tzinfo=UTC)


def registered(count: int, start: int = 0) -> list[Envelope[Any]]:
    """``count`` unsigned facts cluster A's agent may state."""
    return [
        new_event(
            NodeRegistered(
                node=f"n-{start + i}", cluster="cluster-a", pool="p", gpus=8, gpu_type="A100"
            ),
            source="tests",
            time=T0 + timedelta(seconds=i),
        )
        for i in range(count)
    ]


def trusted() -> Trust:
    trust = Trust(keep_refusals=None)
    for envelope in registrations(T0 - timedelta(minutes=1)):
        assert trust.judge(envelope) is None
    return trust


class Recorder:
    """A publisher that keeps what it is handed, and what was flushed."""

    def __init__(self) -> None:
        self.handed: list[Envelope[Any]] = []
        self.flushes = 0
        self._lock = threading.Lock()

    def publish(self, envelope: Envelope[Any]) -> None:
        with self._lock:
            self.handed.append(envelope)

    def flush(self, timeout_s: float = 30.0) -> None:
        self.flushes += 1

    def close(self) -> None:
        pass


class CountingKey:
    """An Ed25519 public key that counts its verifications."""

    def __init__(self, key: Ed25519PublicKey) -> None:
        self.key = key
        self.calls = 0

    def verify(self, signature: bytes, message: bytes) -> None:
        self.calls += 1
        self.key.verify(signature, message)


def public(signer: Any) -> Ed25519PublicKey:
    return Ed25519PublicKey.from_public_bytes(signer.public_key)


@given(count=st.integers(1, 70))
def test_every_leaf_leads_back_to_the_root_and_not_from_the_next_index(count: int) -> None:
    leaves = [bytes([i % 256]) * 32 for i in range(count)]
    root, paths = merkle_paths(leaves)
    assert max(len(path) for path in paths) == (count - 1).bit_length()
    for index, path in enumerate(paths):
        assert root_from(leaves[index], index, count, path) == root
        text = proof_text(index, count, path)
        assert parse_proof(text) == (index, count, path)
        if index + 1 < count:
            assert root_from(leaves[index], index + 1, count, path) != root


@given(count=st.integers(1, 3 * BATCH_MAX + 1))
@settings(deadline=None, max_examples=30)
def test_a_batch_verifies_record_by_record_with_one_signature_checked_per_batch(
    count: int,
) -> None:
    signed = KEYS.agent_a.sign_batch(registered(count))
    assert [e.data for e in signed] == [e.data for e in registered(count)]
    chunks = -(-count // BATCH_MAX)
    assert len({e.signature for e in signed}) == chunks
    for envelope in signed:  # alone, with nothing remembered
        assert verifies(envelope, public(KEYS.agent_a))
    key = CountingKey(public(KEYS.agent_a))
    remembered: dict[bytes, None] = {}
    for envelope in reversed(signed):  # any order
        assert verifies(envelope, key, remembered)  # type: ignore[arg-type]
    lone = sum(1 for e in signed if e.batchproof is None)
    assert key.calls == chunks
    assert lone == (1 if count % BATCH_MAX == 1 else 0)


def test_a_batch_of_one_is_signed_as_a_single_record_is() -> None:
    (envelope,) = registered(1)
    (signed,) = KEYS.agent_a.sign_batch([envelope])
    assert signed == KEYS.agent_a.sign(envelope)
    assert signed.batchproof is None


@pytest.mark.parametrize("mode", ["binary", "structured", "lean binary", "lean structured"])
def test_a_batch_record_is_believed_after_any_trip_through_the_log(mode: str) -> None:
    trust = trusted()
    for envelope in KEYS.agent_a.sign_batch(registered(5)):
        record = encode_binary(envelope)
        if mode == "binary":
            read = decode_binary(record.value, record.headers)
        elif mode == "structured":
            read = decode_structured(encode_structured(envelope))
        elif mode == "lean binary":
            read = binary_decoder()(record.value, record.headers)
        else:
            read = structured_decoder()(encode_structured(envelope))
        assert read == envelope
        assert trust.judge(read) is None


BATCH = KEYS.agent_a.sign_batch(registered(7))
OTHER_BATCH = KEYS.agent_a.sign_batch(registered(7, start=100))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.filter_too_much])
@given(which=st.integers(0, len(BATCH) - 1), leaf=st.integers(0, 10_000), pick=st.integers())
def test_any_change_to_a_batch_record_is_refused_after_its_batch_mates_were_believed(
    which: int, leaf: int, pick: int
) -> None:
    """The remembered batch signature must not carry a changed record: its proof, its index
    and count, its signer and every field of it included."""
    trust = trusted()
    for envelope in BATCH:
        assert trust.judge(envelope) is None
    verdict = trust.judge(mutated(BATCH[which], leaf, pick))
    assert verdict is not None
    assert verdict.kind in (BAD_SIGNATURE, UNKNOWN_KEY), verdict


@pytest.mark.parametrize("which", range(len(BATCH)))
def test_a_proof_moved_to_another_record_or_batch_is_refused(which: int) -> None:
    trust = trusted()
    for envelope in [*BATCH, *OTHER_BATCH]:
        assert trust.judge(envelope) is None
    envelope = BATCH[which]
    neighbour = BATCH[(which + 1) % len(BATCH)]
    stranger = OTHER_BATCH[which]
    swaps = [
        envelope.model_copy(update={"batchproof": neighbour.batchproof}),
        envelope.model_copy(update={"batchproof": stranger.batchproof}),
        envelope.model_copy(
            update={"batchproof": stranger.batchproof, "signature": stranger.signature}
        ),
        envelope.model_copy(update={"signature": stranger.signature}),
    ]
    for swapped in swaps:
        verdict = trust.judge(swapped)
        assert verdict is not None, swapped
        assert verdict.kind == BAD_SIGNATURE, swapped


def test_a_batch_record_without_its_proof_or_with_a_stretched_one_is_refused() -> None:
    trust = trusted()
    envelope = BATCH[2]
    assert envelope.batchproof is not None
    index, count, path = parse_proof(envelope.batchproof) or (0, 0, [])
    tampered = [
        envelope.model_copy(update={"batchproof": None}),
        envelope.model_copy(update={"batchproof": proof_text(index, count, [*path, path[0]])}),
        envelope.model_copy(update={"batchproof": proof_text(index, count, path[:-1])}),
        envelope.model_copy(update={"batchproof": proof_text(index, count + 1, path)}),
        envelope.model_copy(update={"batchproof": proof_text(count, count, path)}),
    ]
    for record in tampered:
        verdict = trust.judge(record)
        assert verdict is not None, record.batchproof
        assert verdict.kind == BAD_SIGNATURE, record.batchproof


def test_a_leaf_is_the_records_canonical_form_whoever_carries_it() -> None:
    """The leaf covers the signer: the same record under another key is another leaf."""
    (envelope,) = registered(1)
    assert leaf_hash(KEYS.agent_a.sign(envelope)) != leaf_hash(KEYS.agent_b.sign(envelope))


def test_what_a_thread_publishes_between_flushes_is_one_batch_and_threads_do_not_mix() -> None:
    recorder = Recorder()
    publisher = SigningPublisher(recorder, KEYS.agent_a)
    first, second = registered(3), registered(4, start=10)
    ready = threading.Barrier(2)

    def publish(envelopes: list[Envelope[Any]]) -> None:
        for envelope in envelopes:
            publisher.publish(envelope)
        ready.wait()  # both threads hold unflushed records at once
        publisher.flush()

    threads = [threading.Thread(target=publish, args=(e,)) for e in (first, second)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    published = recorder.handed
    assert sorted(e.id for e in published) == sorted(e.id for e in first + second)
    by_signature: dict[str | None, set[str]] = {}
    for envelope in published:
        by_signature.setdefault(envelope.signature, set()).add(envelope.id)
    assert sorted(by_signature.values(), key=len) == [
        {e.id for e in first},
        {e.id for e in second},
    ]
    trust = trusted()
    assert all(trust.judge(envelope) is None for envelope in published)


def test_nothing_is_handed_to_the_log_before_the_flush() -> None:
    recorder = Recorder()
    publisher = SigningPublisher(recorder, KEYS.agent_a)
    for envelope in registered(2):
        publisher.publish(envelope)
    assert recorder.handed == []
    publisher.flush()
    assert len(recorder.handed) == 2
    assert recorder.flushes == 1
    publisher.publish(registered(1, start=5)[0])
    publisher.close()  # what was published is handed over before the inner publisher closes
    assert len(recorder.handed) == 3
