"""A checkpoint of the live fold at any cut, then the tail, is the fold of the whole log (issue
23), and a checkpoint this code may not trust is rejected, never restored."""

from __future__ import annotations

import os
import pickle
import zlib
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from events.envelope import Envelope
from events.models import PlaceCommand, PreemptCommand
from projections.checkpoint import CheckpointRejectedError, decode, encode
from projections.live_state import LiveState
from scheduling.scheduling_pass import PassContext, run_pass
from tests.unit.test_audit_decisions import simulated_log

CODE = "the fold's code"
Log = list[Envelope[Any]]


@pytest.fixture(scope="module")
def log() -> Log:
    return simulated_log(0, 150, maintenance=1.0)


def _fold(log: Log, state: LiveState | None = None) -> LiveState:
    state = state or LiveState()
    for envelope in log:
        state.apply(envelope)
    return state


def _facts(state: LiveState) -> tuple[Any, ...]:
    return (
        state.cluster.workloads,
        state.cluster.nodes,
        state.tree.nodes,
        state.usage,
        state.settings,
        state.commands,
        state.command_ids,
        state.event_ids,
        state.charged_gpu_s,
        state.free_gpu_s,
        [e.id for e in state.waiting],
        state.rejected,
        state.latest_time,
        state.events,
    )


def _decisions(state: LiveState, now: float) -> list[str]:
    """What a pass decides from ``state`` (the indexes the fold keeps included)."""
    result = run_pass(state.cluster, state.tree, state.usage_source(now), PassContext(now=now))
    return [
        c.model_dump_json() for c in result.commands if isinstance(c, PlaceCommand | PreemptCommand)
    ]


@settings(max_examples=25, deadline=None)
@given(data=st.data())
def test_a_checkpoint_at_any_cut_then_the_tail_is_the_whole_fold(log: Log, data: Any) -> None:
    cut = data.draw(st.integers(min_value=0, max_value=len(log)), label="cut")
    blob = encode(_fold(log[:cut]), {("topic", 0): cut}, CODE)
    checkpoint = decode(blob, CODE)
    assert checkpoint.positions == {("topic", 0): cut}
    resumed = _fold(log[cut:], checkpoint.state)
    whole = _fold(log)
    assert _facts(resumed) == _facts(whole)
    now = log[-1].time.timestamp() + 60
    assert _decisions(resumed, now) == _decisions(whole, now)


def test_a_fold_of_records_decoded_from_the_log_checkpoints(log: Log) -> None:
    """Times decoded from the log's bytes carry pydantic's own UTC tzinfo (the simulated log's
    do not): a checkpoint of such a fold is restored, not refused (a bench of a real history
    found every restart refused for it)."""
    from events.serde import decode_structured, encode_structured

    decoded = [decode_structured(encode_structured(e)) for e in log[:300]]
    assert type(decoded[0].time.tzinfo).__name__ == "TzInfo"
    state = decode(encode(_fold(decoded), {}, CODE), CODE).state
    assert _facts(state) == _facts(_fold(decoded))


def test_held_facts_travel_with_the_checkpoint(log: Log) -> None:
    """A fact that waits for one not read yet (here: placements, whose nodes register only
    later) is in the checkpoint, and applies once the tail brings what it waited for."""
    nodes = [e for e in log if type(e.data).__name__ == "NodeRegistered"]
    rest = [e for e in log if type(e.data).__name__ != "NodeRegistered"]
    cut = next(i for i, e in enumerate(rest) if isinstance(e.data, PlaceCommand)) + 5
    reordered = rest[:cut] + nodes + rest[cut:]
    early = _fold(reordered[:cut])
    assert early.waiting  # placements held: their nodes are not known yet
    resumed = _fold(reordered[cut:], decode(encode(early, {}, CODE), CODE).state)
    assert _facts(resumed)[:2] == _facts(_fold(reordered))[:2]
    assert not resumed.waiting


def test_a_damaged_checkpoint_is_rejected(log: Log) -> None:
    blob = bytearray(encode(_fold(log[:100]), {}, CODE))
    blob[-10] ^= 0xFF
    with pytest.raises(CheckpointRejectedError, match="checksum"):
        decode(bytes(blob), CODE)


def test_a_checkpoint_of_other_code_or_format_is_rejected(log: Log) -> None:
    blob = encode(_fold(log[:100]), {}, CODE)
    with pytest.raises(CheckpointRejectedError, match="other code"):
        decode(blob, "another version of the fold")
    with pytest.raises(CheckpointRejectedError, match="not a Fairshare checkpoint"):
        decode(b"PK\x03\x04 a zip file", CODE)


class _Hostile:
    def __reduce__(self) -> tuple[Any, ...]:
        return (os.system, ("echo pwned > /dev/null",))


def test_a_body_that_names_other_types_cannot_run_code() -> None:
    """Even with a matching checksum (whoever wrote it computed one), a body may build only
    the fold's own types."""
    import hashlib

    import orjson

    body = zlib.compress(pickle.dumps(_Hostile()))
    header = {"format": 1, "code": CODE, "sha256": hashlib.sha256(body).hexdigest()}
    blob = b"fairshare-checkpoint\n" + orjson.dumps(header) + b"\n" + body
    with pytest.raises(CheckpointRejectedError, match="not a type of the fold"):
        decode(blob, CODE)
