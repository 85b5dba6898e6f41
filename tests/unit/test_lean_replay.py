"""The audit replay decodes the log leanly by default (``events.lean``) and in full with
``--strict``; both give the same verdict, counts, differences and bad lines, from a file or
from the topics, including on logs with invalid records in them."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

import orjson
import pytest
from typer.testing import CliRunner

from events import TopicKind, Topics, encode_binary
from events.envelope import Envelope
from events.models import GpuHeartbeat, LedgerCharge
from events.ndjson import BadLine, read_events
from services.audit.replay import ReplayResult, replay
from services.audit.sources import log_from_file, log_from_records
from services.bench.fixtures import synthetic_log
from services.bus.records import RawRecord
from services.cli import app
from tests.unit.test_routing import POISON

TOPICS = Topics(prefix="lean.")


@pytest.fixture(scope="module")
def log(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("lean") / "log.ndjson"
    synthetic_log(path, 600)
    return path


def _summary(result: ReplayResult) -> tuple[Any, ...]:
    return (
        result.identical,
        result.events,
        result.recorded_count,
        result.recomputed_count,
        result.differences,
        result.bad_lines,
    )


def _both(path: Path) -> tuple[ReplayResult, ReplayResult]:
    return replay(log_from_file(path, strict=False)), replay(log_from_file(path, strict=True))


def test_the_benchmark_log_holds_only_valid_events(log: Path) -> None:
    """What the lean decode relies on, for the log ``fairshare bench audit`` replays."""
    strict = list(read_events(log))
    assert not [item for item in strict if isinstance(item, BadLine)]
    assert list(read_events(log, lean=True)) == strict


def test_lean_and_strict_replays_agree_on_a_valid_log(log: Path) -> None:
    lean, strict = _both(log)
    assert lean.identical
    assert _summary(lean) == _summary(strict)


def _corrupt(line: bytes, path: str, value: Any) -> bytes:
    document = orjson.loads(line)
    *parents, last = (int(p) if p.isdigit() else p for p in path.split("."))
    node: Any = document
    for part in parents:
        node = node[part]
    node[last] = value
    return orjson.dumps(document)


def _nth(lines: list[bytes], kind: type, n: int = 3) -> int:
    matching = [i for i, line in enumerate(lines) if kind.event_type.encode() in line]
    return matching[n]


@pytest.mark.parametrize(
    ("kind", "path", "value"),
    [
        (GpuHeartbeat, "data.gpus.0.attempt", "1"),  # a wrong JSON type
        (GpuHeartbeat, "data.gpus.0.attempt", 0),  # a value out of range
        (GpuHeartbeat, "data.gpus.0.garbage", {"nested": [1]}),  # an unknown key
        (LedgerCharge, "data.gpu_seconds", "3600"),
        (LedgerCharge, "data.kind", None),
    ],
)
def test_an_invalid_event_is_reported_by_both(
    log: Path, tmp_path: Path, kind: type, path: str, value: Any
) -> None:
    lines = log.read_bytes().splitlines()
    at = _nth(lines, kind)
    lines[at] = _corrupt(lines[at], path, value)
    bad = tmp_path / "bad.ndjson"
    bad.write_bytes(b"\n".join(lines) + b"\n")
    lean, strict = _both(bad)
    assert [b.line for b in strict.bad_lines] == [at + 1]
    assert not strict.identical
    assert _summary(lean) == _summary(strict)


def test_a_recorded_charge_breaking_a_skipped_rule_is_still_reported(
    log: Path, tmp_path: Path
) -> None:
    """The lean decode skips a charge's cross-field rules: its charge then differs from the
    one recomputed from the facts, so the audit fails either way."""
    lines = log.read_bytes().splitlines()
    at = _nth(lines, LedgerCharge)
    lines[at] = _corrupt(lines[at], "data.amount", 1)
    bad = tmp_path / "bad.ndjson"
    bad.write_bytes(b"\n".join(lines) + b"\n")
    lean, strict = _both(bad)
    assert not lean.identical
    assert not strict.identical
    charge = orjson.loads(lines[at])["data"]["charge_id"]
    assert any(d.startswith(f"differs: {charge}: amount") for d in lean.differences)


def _records(envelopes: Iterable[Envelope[Any]]) -> list[RawRecord]:
    records = []
    for offset, envelope in enumerate(envelopes):
        encoded = encode_binary(envelope)
        topic = TOPICS.name(type(envelope.data).topic)
        records.append(RawRecord(topic, 0, offset, encoded.key, encoded.value, encoded.headers))
    return records


def test_lean_and_strict_replays_of_the_topics_agree(log: Path) -> None:
    envelopes = [e for e in read_events(log) if not isinstance(e, BadLine)]
    records = _records(envelopes)
    heartbeat = next(
        i for i, r in enumerate(records) if r.topic == TOPICS.name(TopicKind.HEARTBEATS)
    )
    bad = records[heartbeat]
    records[heartbeat] = RawRecord(
        bad.topic,
        0,
        bad.offset,
        bad.key,
        _corrupt(bad.value or b"", "gpus.0.attempt", "1"),
        bad.headers,
    )
    records += [
        RawRecord(TOPICS.name(p.kind).replace("route.", "lean."), 0, 0, p.key, p.value, p.headers)
        for p in POISON
    ]
    lean = replay(log_from_records(records, TOPICS, strict=False))
    strict = replay(log_from_records(records, TOPICS, strict=True))
    assert len(strict.bad_lines) == 1 + len(POISON)
    assert _summary(lean) == _summary(strict)


runner = CliRunner()


@pytest.mark.parametrize("strict", [[], ["--strict"]])
def test_audit_replay_decodes_leanly_unless_strict(log: Path, strict: list[str]) -> None:
    result = runner.invoke(app, ["audit", "replay", "--events", str(log), *strict])
    assert result.exit_code == 0, result.output
    assert "identical" in result.stdout


@pytest.mark.parametrize(("flag", "decode"), [([], "lean"), (["--strict"], "strict")])
def test_the_benchmark_says_how_it_decoded(flag: list[str], decode: str) -> None:
    result = runner.invoke(app, ["bench", "audit", "--events", "300", *flag])
    assert result.exit_code == 0, result.output
    figures = orjson.loads(result.stdout)
    assert figures["decode"] == decode
    assert figures["identical"] is True
    # and split between two processes, with the very result of the one
    assert figures["workers"] == 2
    assert figures["parallel_same_result"] is True
    assert figures["parallel_fell_back"] is None


@pytest.mark.parametrize("signed", ["records", "batches"])
def test_the_benchmark_replays_the_log_signed_and_believes_all_of_it(signed: str) -> None:
    """Each signer's records 16 to a signature (or each alone), interleaved in log order as
    the services' flushes are: every record is believed and the charges match."""
    result = runner.invoke(app, ["bench", "audit", "--events", "300", "--signed", signed])
    assert result.exit_code == 0, result.output
    figures = orjson.loads(result.stdout)
    assert figures["signed"] == signed
    assert figures["not_believed"] == 0
    assert figures["identical"] is True
    assert figures["events"] > 300  # the four key registrations come first
    assert figures["parallel_same_result"] is True
    assert figures["parallel_fell_back"] is None


def test_the_benchmark_refuses_an_unknown_way_of_signing() -> None:
    result = runner.invoke(app, ["bench", "audit", "--events", "30", "--signed", "some"])
    assert result.exit_code == 2
