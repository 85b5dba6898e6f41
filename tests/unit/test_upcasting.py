"""Older event versions are upcast on read, so the log is never rewritten."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from events import EventDecodeError, EventRegistry, decode_binary, decode_structured
from events.models import ALL_EVENT_MODELS, WorkloadSubmitted

V0 = "fairshare.workload.submitted.v0"


def _v0_to_v1(payload: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    # v0 had a single ``pool`` and counted the contract in minutes.
    upgraded = dict(payload)
    upgraded["pools"] = [upgraded.pop("pool")]
    upgraded["min_runtime_s"] = upgraded.pop("min_runtime_min") * 60
    return "fairshare.workload.submitted.v1", upgraded


V0_PAYLOAD = {
    "workload_id": "old-1",
    "budget": "lab/a",
    "pool": "a100",
    "gpus": 1,
    "min_runtime_min": 10,
    "submitter": "bo",
}
HEADERS = [
    ("ce_specversion", b"1.0"),
    ("ce_id", b"0b7f4c1e-1d2a-4f35-9a0c-1b6f8e2d3c4a"),
    ("ce_source", b"legacy"),
    ("ce_type", V0.encode()),
    ("ce_time", b"2025-01-01T00:00:00Z"),
    ("ce_subject", b"old-1"),
]


@pytest.fixture
def registry() -> EventRegistry:
    registry = EventRegistry(ALL_EVENT_MODELS)
    registry.register_upcaster(V0, _v0_to_v1)
    return registry


def test_old_binary_record_is_read_as_the_current_model(registry: EventRegistry) -> None:
    envelope = decode_binary(orjson.dumps(V0_PAYLOAD), HEADERS, registry)
    assert envelope.type == "fairshare.workload.submitted.v1"
    assert isinstance(envelope.data, WorkloadSubmitted)
    assert envelope.data.pools == ("a100",)
    assert envelope.data.min_runtime_s == 600


def test_old_exported_line_is_read_as_the_current_model(registry: EventRegistry) -> None:
    document = {k[3:]: v.decode() for k, v in HEADERS} | {"data": V0_PAYLOAD}
    envelope = decode_structured(orjson.dumps(document), registry)
    assert isinstance(envelope.data, WorkloadSubmitted)


def test_without_an_upcaster_the_old_type_is_unknown() -> None:
    with pytest.raises(EventDecodeError, match="unknown event type"):
        decode_binary(orjson.dumps(V0_PAYLOAD), HEADERS, EventRegistry(ALL_EVENT_MODELS))


def test_upcast_output_is_still_validated(registry: EventRegistry) -> None:
    bad = {**V0_PAYLOAD, "min_runtime_min": 10_000}
    with pytest.raises(EventDecodeError, match=r"data\.min_runtime_s"):
        decode_binary(orjson.dumps(bad), HEADERS, registry)


def test_an_upcaster_failing_on_bad_input_is_a_decode_error(registry: EventRegistry) -> None:
    with pytest.raises(EventDecodeError, match="upcasting failed"):
        decode_binary(orjson.dumps({"workload_id": "x"}), HEADERS, registry)


def test_an_upcasting_cycle_is_reported_not_looped() -> None:
    registry = EventRegistry(ALL_EVENT_MODELS)
    registry.register_upcaster("fairshare.x.v1", lambda p: ("fairshare.x.v2", p))
    registry.register_upcaster("fairshare.x.v2", lambda p: ("fairshare.x.v1", p))
    headers = [(k, b"fairshare.x.v1" if k == "ce_type" else v) for k, v in HEADERS]
    with pytest.raises(EventDecodeError, match="did not reach a current type"):
        decode_binary(b"{}", headers, registry)


def test_current_types_cannot_be_shadowed_by_an_upcaster() -> None:
    registry = EventRegistry(ALL_EVENT_MODELS)
    with pytest.raises(ValueError, match="current type"):
        registry.register_upcaster("fairshare.workload.submitted.v1", _v0_to_v1)
