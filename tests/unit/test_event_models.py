"""The event language: strict validation, deterministic serde in both CloudEvents modes."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from events import (
    EventDecodeError,
    decode_binary,
    decode_structured,
    default_registry,
    encode_binary,
    encode_structured,
    new_event,
)
from events.models import ALL_EVENT_MODELS, LedgerCharge, NodeDown, WorkloadSubmitted
from events.types import MAX_MIN_RUNTIME_S, utc_epoch_seconds
from tests.factories import T0, sample_events, submitted


@pytest.mark.parametrize("envelope", sample_events(), ids=lambda e: e.type)
def test_every_event_round_trips_in_binary_mode(envelope: Any) -> None:
    record = encode_binary(envelope)
    assert record.key == envelope.subject.encode()
    headers = dict(record.headers)
    assert headers["ce_type"] == envelope.type.encode()
    assert headers["ce_id"] == envelope.id.encode()
    assert headers["ce_time"].endswith(b"Z")
    assert headers["content-type"] == b"application/json"
    decoded = decode_binary(record.value, record.headers)
    assert decoded == envelope
    assert encode_binary(decoded) == record, "re-encoding must give identical bytes"


@pytest.mark.parametrize("envelope", sample_events(), ids=lambda e: e.type)
def test_every_event_round_trips_in_structured_mode(envelope: Any) -> None:
    line = encode_structured(envelope)
    assert b"\n" not in line
    decoded = decode_structured(line)
    assert decoded == envelope
    assert encode_structured(decoded) == line


def _submitted_json(**changes: Any) -> bytes:
    payload = submitted("wl-1").model_dump(mode="json")
    payload.update(changes)
    return orjson.dumps({k: v for k, v in payload.items() if v is not _DROP})


_DROP = object()


def _decode_submitted(value: bytes, time: bytes = b"2026-11-02T09:00:00Z") -> Any:
    headers = [
        ("ce_specversion", b"1.0"),
        ("ce_id", b"0b7f4c1e-1d2a-4f35-9a0c-1b6f8e2d3c4a"),
        ("ce_source", b"tests"),
        ("ce_type", b"fairshare.workload.submitted.v1"),
        ("ce_time", time),
        ("ce_subject", b"wl-1"),
    ]
    return decode_binary(value, headers)


@pytest.mark.parametrize(
    ("changes", "field", "words"),
    [
        ({"colour": "blue"}, "data.colour", "Extra inputs are not permitted"),
        ({"gpus": "3"}, "data.gpus", "valid integer"),
        ({"gpus": -2}, "data.gpus", "greater than or equal to 1"),
        ({"gpus": 0}, "data.gpus", "greater than or equal to 1"),
        ({"min_runtime_s": MAX_MIN_RUNTIME_S + 1}, "data.min_runtime_s", "less than or equal"),
        ({"min_runtime_s": -1}, "data.min_runtime_s", "greater than or equal to 0"),
        ({"workload_id": ""}, "data.workload_id", "at least 1 character"),
        ({"workload_id": "has space"}, "data.workload_id", "pattern"),
        ({"budget": "/lab"}, "data.budget", "pattern"),
        ({"pools": []}, "data.pools", "at least 1 item"),
        ({"pools": ["a", "a"]}, "data", "pools: each pool may be listed only once"),
        ({"resumable": "yes"}, "data.resumable", "valid boolean"),
        ({"gang": "diagonal"}, "data.gang", "single-node"),
        ({"submitter": _DROP}, "data.submitter", "Field required"),
    ],
)
def test_invalid_payloads_are_rejected_naming_the_field(
    changes: dict[str, Any], field: str, words: str
) -> None:
    with pytest.raises(EventDecodeError) as caught:
        _decode_submitted(_submitted_json(**changes))
    message = str(caught.value)
    assert f"{field}:" in message
    assert words in message


def test_naive_times_are_rejected_in_headers_and_payloads() -> None:
    with pytest.raises(EventDecodeError, match=r"^time: .*timezone"):
        _decode_submitted(_submitted_json(), time=b"2026-11-02T09:00:00")
    with pytest.raises(ValidationError, match="last_heartbeat"):
        NodeDown(node="n1", last_heartbeat=datetime(2026, 1, 1))


def test_times_are_normalised_to_utc() -> None:
    plus_two = timezone(timedelta(hours=2))
    envelope = _decode_submitted(_submitted_json(), time=b"2026-11-02T11:00:00+02:00")
    assert envelope.time == T0
    assert envelope.time.tzinfo == UTC_TZ
    local = NodeDown(node="n1", last_heartbeat=datetime(2026, 11, 2, 11, tzinfo=plus_two))
    assert local.last_heartbeat.utcoffset() == timedelta(0)


UTC_TZ = UTC


@given(
    instant=st.datetimes(
        min_value=datetime(1971, 1, 1), max_value=datetime(2200, 1, 1), timezones=st.just(UTC)
    ),
    offset_minutes=st.integers(min_value=-14 * 60, max_value=14 * 60),
)
def test_any_offset_becomes_the_same_utc_instant_and_bytes(
    instant: datetime, offset_minutes: int
) -> None:
    """Both branches of the UTC type (offset 0 kept natively, other offsets converted) give
    the same instant, the same wire bytes and the same epoch seconds as ``timestamp()``."""
    local = instant.astimezone(timezone(timedelta(minutes=offset_minutes)))
    as_utc = NodeDown(node="n1", last_heartbeat=instant)
    as_local = NodeDown(node="n1", last_heartbeat=local)
    from_json = NodeDown.model_validate_json(as_local.model_dump_json())
    assert as_utc == as_local == from_json
    assert as_local.last_heartbeat.utcoffset() == timedelta(0)
    assert orjson.dumps(as_utc.model_dump()) == orjson.dumps(from_json.model_dump())
    for value in (as_utc.last_heartbeat, as_local.last_heartbeat, from_json.last_heartbeat):
        assert utc_epoch_seconds(value) == math.floor(instant.timestamp())


def test_epoch_seconds_refuses_a_naive_time() -> None:
    with pytest.raises(ValueError, match="naive"):
        utc_epoch_seconds(datetime(2026, 1, 1))


def test_payload_that_is_not_json_is_rejected() -> None:
    with pytest.raises(EventDecodeError, match="data"):
        _decode_submitted(b"\xff\x00not json")


def test_envelope_must_agree_with_its_payload() -> None:
    record = encode_binary(new_event(submitted("wl-1"), source="t", time=T0))
    wrong_subject = [(k, b"wl-2" if k == "ce_subject" else v) for k, v in record.headers]
    with pytest.raises(EventDecodeError, match="subject"):
        decode_binary(record.value, wrong_subject)
    without_type = [(k, v) for k, v in record.headers if k != "ce_type"]
    with pytest.raises(EventDecodeError, match=r"^type: missing"):
        decode_binary(record.value, without_type)
    bad_id = [(k, b"not-a-uuid" if k == "ce_id" else v) for k, v in record.headers]
    with pytest.raises(EventDecodeError, match=r"^id:"):
        decode_binary(record.value, bad_id)
    with pytest.raises(EventDecodeError, match="ce_specversion"):
        decode_binary(record.value, [])
    with pytest.raises(EventDecodeError, match="unknown event type"):
        decode_binary(
            record.value,
            [
                (k, b"fairshare.workload.teleported.v1" if k == "ce_type" else v)
                for k, v in record.headers
            ],
        )


def test_models_are_frozen() -> None:
    event = submitted("wl-1")
    with pytest.raises(ValidationError):
        event.gpus = 4  # type: ignore[misc]


def test_python_construction_is_strict_too() -> None:
    with pytest.raises(ValidationError, match="gpus"):
        WorkloadSubmitted(
            workload_id="w",
            budget="b",
            pools=("p",),
            gpus="2",
            min_runtime_s=0,
            submitter="u",  # type: ignore[arg-type]
        )


def test_ledger_charge_invariants() -> None:
    base: dict[str, Any] = {
        "charge_id": "c1",
        "workload_id": "wl-1",
        "budget": "lab/a",
        "pool": "p",
        "bucket_start": T0,
        "kind": "allocated",
        "debit_account": "budget:lab/a",
        "credit_account": "capacity:p",
        "gpu_seconds": 100,
        "amount": 100,
    }
    LedgerCharge(**base)
    with pytest.raises(ValidationError, match="bucket_start: must be on the hour"):
        LedgerCharge(**{**base, "bucket_start": T0 + timedelta(minutes=1)})
    with pytest.raises(ValidationError, match="unallocated occupancy is charged at zero"):
        LedgerCharge(**{**base, "kind": "unallocated"})
    with pytest.raises(ValidationError, match="exactly its GPU-seconds"):
        LedgerCharge(**{**base, "amount": 99})


def test_registry_knows_every_model_once() -> None:
    registry = default_registry()
    types = [model.event_type for model in ALL_EVENT_MODELS]
    assert len(set(types)) == len(types)
    assert registry.types() == sorted(types)
    for model in ALL_EVENT_MODELS:
        assert registry.model_for(model.event_type) is model


def test_commands_carry_a_fencing_epoch_and_their_v1_is_upcast() -> None:
    from events import default_registry
    from events.models import PlaceCommand, PreemptCommand

    registry = default_registry()
    for model in (PlaceCommand, PreemptCommand):
        assert model.event_type.endswith(".v2")
        assert model.model_fields["epoch"].default == 0
        assert registry.can_upcast(model.event_type.replace(".v2", ".v1"))
