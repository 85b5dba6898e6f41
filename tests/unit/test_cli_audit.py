"""``fairshare audit explain`` tells a workload's story in event-time order, whatever order the
log was read in (an export reads one topic after another: every charge after every fact)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
from typer.testing import CliRunner

from events.envelope import Envelope
from events.ndjson import write_events
from services.cli import app
from services.devtools.demo_data import small_lab

runner = CliRunner()


def test_explain_is_in_event_time_order(tmp_path: Path) -> None:
    events = small_lab()
    by_topic: list[Envelope[Any]] = sorted(events, key=lambda e: type(e.data).topic.value)
    assert by_topic != sorted(events, key=lambda e: e.epoch_seconds)
    log = tmp_path / "export.ndjson"
    write_events(log, by_topic)
    result = runner.invoke(app, ["audit", "explain", "robot-sim-1", "--events", str(log)])
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    times = [line.split(" ", 1)[0] for line in lines[:-1]]
    assert times == sorted(times)
    kinds = [line.split(" ", 2)[1].rstrip(":") for line in lines[:-1]]
    assert kinds == [
        "submitted",
        "placed",  # the place command
        "placement",  # the placement recorded
        "started",
        "charge",
        "charge",
        "preempt",
        "stopped",
        "charge",  # the last charge, posted as the run ended
        "requeued",
    ]
    assert lines[-1].startswith("total charged to its budget:")
    assert not [line for line in lines if "{" in line], "sentences, not Python dicts"


def test_explain_json_gives_each_event_its_time_type_sentence_and_payload(tmp_path: Path) -> None:
    log = tmp_path / "export.ndjson"
    write_events(log, small_lab())
    result = runner.invoke(app, ["audit", "explain", "robot-sim-1", "--events", str(log), "--json"])
    assert result.exit_code == 0, result.output
    document = orjson.loads(result.stdout)
    events = document["events"]
    assert [e["time"] for e in events] == sorted(e["time"] for e in events)
    assert events[0]["type"] == "fairshare.workload.submitted.v1"
    assert events[0]["data"]["workload_id"] == "robot-sim-1"
    assert all(e["sentence"] for e in events)
    assert document["charged_gpu_s"] == sum(
        e["data"]["amount"] * (-1 if e["data"]["debit_account"].startswith("capacity:") else 1)
        for e in events
        if e["type"] == "fairshare.ledger.charge.v1"
    )
