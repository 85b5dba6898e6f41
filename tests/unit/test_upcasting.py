"""Older event versions are upcast on read, so the log is never rewritten."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from events import EventDecodeError, EventRegistry, decode_binary, decode_structured
from events.models import ALL_EVENT_MODELS, PlaceCommand, PreemptCommand, WorkloadSubmitted

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


# -- commands v1 (before fencing tokens) ---------------------------------------------------------
_V1_DECISION = {"pass_id": 3, "input_position": [], "reason": "fairshare"}
V1_COMMANDS = {
    "fairshare.command.place.v1": {
        "command_id": "place:w1:1",
        "cluster": "c1",
        "pool": "p1",
        "workload_id": "w1",
        "attempt": 1,
        "budget": "lab/a",
        "placement": {"nodes": [{"node": "n0", "gpus": [0, 1]}]},
        "allocated": False,
        "min_runtime_s": 0,
        "decision": _V1_DECISION,
    },
    "fairshare.command.preempt.v1": {
        "command_id": "preempt:w1:1",
        "cluster": "c1",
        "pool": "p1",
        "workload_id": "w1",
        "attempt": 1,
        "grace_period_s": 30,
        "requeue": True,
        "decision": {**_V1_DECISION, "reason": "cancel"},
    },
}


@pytest.mark.parametrize("old_type", sorted(V1_COMMANDS))
def test_a_v1_command_in_the_log_is_read_as_v2_with_epoch_zero(old_type: str) -> None:
    """Read with the default registry, as every consumer does: no reader ever sees a v1."""
    payload = V1_COMMANDS[old_type]
    headers = [
        (k, {"ce_type": old_type.encode(), "ce_subject": b"c1"}.get(k, v)) for k, v in HEADERS
    ]
    envelope = decode_binary(orjson.dumps(payload), headers)
    assert envelope.type == old_type.replace(".v1", ".v2")
    assert isinstance(envelope.data, PlaceCommand | PreemptCommand)
    assert envelope.data.epoch == 0
    assert envelope.data.command_id == payload["command_id"]
    document = {k[3:]: v.decode() for k, v in headers} | {"data": payload}
    assert decode_structured(orjson.dumps(document)).data == envelope.data


def test_a_v2_command_keeps_its_epoch_through_the_serde() -> None:
    payload = {**V1_COMMANDS["fairshare.command.preempt.v1"], "epoch": 4}
    headers = [
        (k, {"ce_type": b"fairshare.command.preempt.v2", "ce_subject": b"c1"}.get(k, v))
        for k, v in HEADERS
    ]
    data = decode_binary(orjson.dumps(payload), headers).data
    assert isinstance(data, PreemptCommand)
    assert data.epoch == 4
    with pytest.raises(EventDecodeError, match="epoch"):
        decode_binary(orjson.dumps({**payload, "epoch": -1}), headers)
