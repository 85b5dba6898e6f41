"""The lean decode of the audit (``events.lean``) gives the strict decode's models for every
valid heartbeat and charge, in both CloudEvents modes, and never accepts a record the strict
decode refuses for its shape or a field's value: those are decoded again strictly, so they
fail with the strict reason. Only the cross-field rules it documents are skipped."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from events import (
    EventDecodeError,
    EventRegistry,
    decode_binary,
    decode_structured,
    encode_binary,
    encode_structured,
    new_event,
)
from events.envelope import Envelope
from events.lean import binary_decoder, structured_decoder
from events.models import GpuHeartbeat, GpuReading, LedgerCharge, WorkloadSubmitted
from events.models.ledger import budget_account, capacity_account, charge_id, free_account
from tests.factories import T0, sample_events

LEAN = structured_decoder()
LEAN_BINARY = binary_decoder()

ids = st.from_regex(r"[A-Za-z0-9._:@/-]{1,24}", fullmatch=True)
#: Budget paths (and pool names: every budget path is one).
names = st.from_regex(
    r"[A-Za-z0-9][A-Za-z0-9_.-]{0,8}(/[A-Za-z0-9][A-Za-z0-9_.-]{0,8}){0,2}", fullmatch=True
)
offsets = st.sampled_from([UTC, timezone(timedelta(hours=2)), timezone(timedelta(hours=-9.5))])
times = st.datetimes(datetime(1990, 1, 1), datetime(2090, 1, 1), timezones=offsets)


@st.composite
def readings(draw: st.DrawFn) -> tuple[GpuReading, ...]:
    gpus = []
    for index in draw(st.lists(st.integers(0, 1023), max_size=8, unique=True)):
        occupant = draw(st.none() | ids)
        used = draw(st.integers(0, 2**50))
        gpus.append(
            GpuReading(
                index=index,
                occupant=occupant,
                attempt=None if occupant is None else draw(st.none() | st.integers(1, 10**6)),
                utilisation_pct=draw(st.floats(0, 100, allow_nan=False)),
                memory_used_bytes=used,
                memory_total_bytes=draw(st.none() | st.integers(used, 2**51)),
            )
        )
    return tuple(gpus)


heartbeats = st.builds(
    GpuHeartbeat, node=ids, cluster=ids, sequence=st.integers(0, 2**40), gpus=readings()
)


@st.composite
def charges(draw: st.DrawFn) -> LedgerCharge:
    workload, attempt = draw(ids), draw(st.integers(1, 100))
    bucket, revision = draw(st.integers(0, 800_000)), draw(st.integers(0, 3))
    budget, pool = draw(names), draw(names)
    allocated, reversal = draw(st.booleans()), draw(st.booleans())
    debit = budget_account(budget) if allocated else free_account(pool)
    credit = capacity_account(pool)
    seconds = draw(st.integers(0, 3600 * 1_000_000))
    return LedgerCharge(
        charge_id=charge_id(workload, attempt, bucket, revision),
        workload_id=workload,
        budget=budget,
        pool=pool,
        bucket_start=datetime.fromtimestamp(bucket * 3600, UTC),
        kind="allocated" if allocated else "unallocated",
        debit_account=credit if reversal else debit,
        credit_account=debit if reversal else credit,
        gpu_seconds=seconds,
        amount=seconds if allocated else 0,
        corrects=charge_id(workload, attempt, bucket, 0) if revision else None,
    )


def envelopes(payloads: st.SearchStrategy[Any]) -> st.SearchStrategy[Envelope[Any]]:
    return st.builds(
        lambda data, time, source, correlation: new_event(
            data, source=source, time=time, correlationid=correlation
        ),
        payloads,
        times,
        ids,
        st.none() | st.uuids().map(str),
    )


def assert_same(lean: Envelope[Any], strict: Envelope[Any]) -> None:
    """Equal models, down to which fields were given, and equal bytes when written again."""
    assert lean == strict
    assert type(lean) is type(strict)
    assert type(lean.data) is type(strict.data)
    for a, b in [(lean, strict), (lean.data, strict.data)]:
        assert a.__pydantic_fields_set__ == b.__pydantic_fields_set__
    if isinstance(lean.data, GpuHeartbeat):
        for a, b in zip(lean.data.gpus, strict.data.gpus, strict=True):
            assert a.__pydantic_fields_set__ == b.__pydantic_fields_set__
    assert encode_structured(lean) == encode_structured(strict)
    assert encode_binary(lean) == encode_binary(strict)


@settings(max_examples=150, deadline=None)
@given(envelope=envelopes(heartbeats | charges()))
def test_lean_decode_equals_strict_decode(envelope: Envelope[Any]) -> None:
    line = encode_structured(envelope)
    assert_same(LEAN(line), decode_structured(line))
    record = encode_binary(envelope)
    assert_same(
        LEAN_BINARY(record.value, record.headers), decode_binary(record.value, record.headers)
    )


@settings(max_examples=100, deadline=None)
@given(envelope=envelopes(heartbeats | charges()), data=st.data())
def test_valid_lines_not_written_by_us_decode_equal_too(
    envelope: Envelope[Any], data: st.DataObject
) -> None:
    """Another producer's valid JSON: keys in any order, defaults left out, times at offsets."""
    document = orjson.loads(encode_structured(envelope))
    payload = document["data"]
    for reading in payload.get("gpus", []):
        for key in ("occupant", "attempt", "memory_total_bytes"):
            if reading[key] is None and data.draw(st.booleans()):
                del reading[key]
    offset = data.draw(offsets)
    document["time"] = envelope.time.astimezone(offset).isoformat()
    keys = data.draw(st.permutations(list(document)))
    line = orjson.dumps({key: document[key] for key in keys})
    assert_same(LEAN(line), decode_structured(line))


@pytest.mark.parametrize("envelope", sample_events(), ids=lambda e: e.type)
def test_every_other_type_is_decoded_strictly(envelope: Envelope[Any]) -> None:
    line, record = encode_structured(envelope), encode_binary(envelope)
    assert_same(LEAN(line), decode_structured(line))
    assert_same(
        LEAN_BINARY(record.value, record.headers), decode_binary(record.value, record.headers)
    )


HEARTBEAT = new_event(
    GpuHeartbeat(
        node="n1",
        cluster="c",
        sequence=3,
        gpus=(
            GpuReading(
                index=0, occupant="w1", attempt=1, utilisation_pct=90.0, memory_used_bytes=1
            ),
            GpuReading(
                index=1, occupant="w1", attempt=1, utilisation_pct=80.0, memory_used_bytes=2
            ),
        ),
    ),
    source="tests",
    time=T0,
)
CHARGE = next(e for e in sample_events() if isinstance(e.data, LedgerCharge))
Edit = Callable[[dict[str, Any]], None]


def _edit(path: str, change: Callable[[Any, Any], None]) -> Edit:
    """Applies ``change(container, key)`` at a dotted path of the JSON document."""
    *parents, last = (int(part) if part.isdigit() else part for part in path.split("."))

    def edit(document: dict[str, Any]) -> None:
        node: Any = document
        for part in parents:
            node = node[part]
        change(node, last)

    return edit


def _set(path: str, value: Any) -> Edit:
    return _edit(path, lambda node, key: node.__setitem__(key, value))


def _drop(path: str) -> Edit:
    return _edit(path, lambda node, key: node.__delitem__(key))


#: Records whose shape or a field's value is wrong: the strict decode refuses each.
MALFORMED: list[tuple[str, Envelope[Any], Edit]] = [
    ("missing field", HEARTBEAT, _drop("data.sequence")),
    ("reading without its index", HEARTBEAT, _drop("data.gpus.1.index")),
    ("attempt as a string", HEARTBEAT, _set("data.gpus.0.attempt", "1")),
    ("attempt as a float", HEARTBEAT, _set("data.gpus.0.attempt", 1.0)),
    ("attempt as a boolean", HEARTBEAT, _set("data.gpus.0.attempt", True)),
    ("attempt zero", HEARTBEAT, _set("data.gpus.0.attempt", 0)),
    ("occupant empty", HEARTBEAT, _set("data.gpus.0.occupant", "")),
    ("occupant as a number", HEARTBEAT, _set("data.gpus.0.occupant", 7)),
    ("utilisation as a string", HEARTBEAT, _set("data.gpus.0.utilisation_pct", "95")),
    ("nested garbage in a reading", HEARTBEAT, _set("data.gpus.0.extra", {"x": [1, {}]})),
    ("a reading that is null", HEARTBEAT, _set("data.gpus.1", None)),
    ("readings as an object", HEARTBEAT, _set("data.gpus", {"0": {}})),
    ("payload as a list", HEARTBEAT, _set("data", [])),
    ("naive time", HEARTBEAT, _set("time", "2026-11-02T09:00:00")),
    ("subject not the node", HEARTBEAT, _set("subject", "n2")),
    ("type of another payload", HEARTBEAT, _set("type", "fairshare.ledger.charge.v1")),
    ("unknown envelope attribute", HEARTBEAT, _set("colour", "red")),
    ("GPU-seconds as a string", CHARGE, _set("data.gpu_seconds", "7200")),
    ("negative GPU-seconds", CHARGE, _set("data.gpu_seconds", -1)),
    ("missing bucket", CHARGE, _drop("data.bucket_start")),
    ("bucket not a time", CHARGE, _set("data.bucket_start", 1_700_000_000)),
    ("corrects as a number", CHARGE, _set("data.corrects", 5)),
    ("unknown kind", CHARGE, _set("data.kind", "free")),
    ("budget not a path", CHARGE, _set("data.budget", "/lab")),
]


def _edited(envelope: Envelope[Any], edit: Edit) -> bytes:
    document = orjson.loads(encode_structured(envelope))
    edit(document)
    return orjson.dumps(document)


def _reason(decode: Callable[[], object]) -> str:
    with pytest.raises(EventDecodeError) as error:
        decode()
    return str(error.value)


@pytest.mark.parametrize(("name", "envelope", "edit"), MALFORMED, ids=[m[0] for m in MALFORMED])
def test_malformed_records_fail_with_the_strict_reason(
    name: str, envelope: Envelope[Any], edit: Edit
) -> None:
    line = _edited(envelope, edit)
    assert _reason(lambda: LEAN(line)) == _reason(lambda: decode_structured(line))
    document = orjson.loads(line)
    if isinstance(document.get("data"), dict) and "colour" not in document:
        payload = orjson.dumps(document.pop("data"))
        headers = [
            (f"ce_{k}", str(v).encode()) for k, v in document.items() if k != "datacontenttype"
        ]
        assert _reason(lambda: LEAN_BINARY(payload, headers)) == _reason(
            lambda: decode_binary(payload, headers)
        )


@pytest.mark.parametrize(
    "line", [b"", b"{", b"[]", b"null", encode_structured(HEARTBEAT)[:-40], b'{"type":"x"}']
)
def test_lines_that_are_no_event_fail_with_the_strict_reason(line: bytes) -> None:
    assert _reason(lambda: LEAN(line)) == _reason(lambda: decode_structured(line))


def test_a_registry_without_the_hot_types_decodes_them_strictly() -> None:
    registry = EventRegistry([WorkloadSubmitted])
    line = encode_structured(HEARTBEAT)
    assert "unknown event type" in _reason(lambda: structured_decoder(registry)(line))


#: Records that break only a cross-field rule the lean decode skips (events.lean says why none
#: of them can change a charge). The strict decode refuses them; the lean one reads them as is.
SKIPPED_RULES: list[tuple[str, Envelope[Any], Edit]] = [
    ("an index twice", HEARTBEAT, _set("data.gpus.1.index", 0)),
    ("an attempt without occupant", HEARTBEAT, _set("data.gpus.0.occupant", None)),
    ("more memory used than there is", HEARTBEAT, _set("data.gpus.0.memory_total_bytes", 0)),
    ("an amount that is not the GPU-seconds", CHARGE, _set("data.amount", 1)),
    ("a bucket off the hour", CHARGE, _set("data.bucket_start", "2026-11-02T09:05:00Z")),
]


@pytest.mark.parametrize(
    ("name", "envelope", "edit"), SKIPPED_RULES, ids=[m[0] for m in SKIPPED_RULES]
)
def test_only_the_documented_cross_field_rules_are_skipped(
    name: str, envelope: Envelope[Any], edit: Edit
) -> None:
    line = _edited(envelope, edit)
    with pytest.raises(EventDecodeError):
        decode_structured(line)
    assert encode_structured(LEAN(line)) == line
