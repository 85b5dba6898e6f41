"""An auditor's path, end to end: a simulated run writes its full event log, and
``fairshare audit replay | verify | explain`` work from that file alone."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from services.simulator.trace import DEVELOPMENT_TRACES as TRACES
from tests.processes import run_fairshare


def _simulated_log(tmp: Path, *extra: str) -> Path:
    """A 400-job Philly slice simulated on 32 GPUs, fair share only, its full log written."""
    lines = (TRACES / "philly-2017-09.csv").read_text().splitlines()[:401]
    trace = tmp / "slice.csv"
    trace.write_text("\n".join(lines) + "\n")
    log = tmp / "events.ndjson"
    result = run_fairshare(
        "simulate",
        "--trace",
        str(trace),
        "--budgets",
        str(TRACES / "philly-budgets.csv"),
        "--gpus",
        "32",
        "--policy",
        "fairshare",
        *extra,
        "--out",
        str(tmp / "out"),
        "--no-plots",
        "--events-out",
        str(log),
    )
    assert result.returncode == 0, result.stderr
    return log


@pytest.fixture(scope="module")
def event_log(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _simulated_log(tmp_path_factory.mktemp("audit"))


def _lines(log: Path) -> list[dict[str, object]]:
    return [orjson.loads(line) for line in log.read_bytes().splitlines()]


def test_the_simulated_log_has_facts_decisions_heartbeats_and_charges(event_log: Path) -> None:
    types = {str(e["type"]) for e in _lines(event_log)}
    for wanted in (
        "fairshare.budget.created.v1",
        "fairshare.node.registered.v1",
        "fairshare.workload.submitted.v1",
        "fairshare.command.place.v2",
        "fairshare.workload.placed.v1",
        "fairshare.workload.started.v1",
        "fairshare.node.heartbeat.v1",
        "fairshare.workload.finished.v1",
        "fairshare.command.preempt.v2",
        "fairshare.workload.preempted.v1",
        "fairshare.workload.requeued.v1",
        "fairshare.ledger.charge.v1",
    ):
        assert wanted in types, wanted


def test_replay_of_an_untouched_log_is_identical(event_log: Path) -> None:
    result = run_fairshare("audit", "replay", "--events", str(event_log))
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.strip().splitlines()[-1] == "identical"


def test_replay_lists_every_altered_dropped_or_invented_charge(
    event_log: Path, tmp_path: Path
) -> None:
    events = _lines(event_log)
    charges = [i for i, e in enumerate(events) if e["type"] == "fairshare.ledger.charge.v1"]
    altered, dropped, copied = charges[0], charges[1], charges[2]
    data = events[altered]["data"]
    assert isinstance(data, dict)
    data["gpu_seconds"] += 60
    data["amount"] += 60
    invented = orjson.loads(orjson.dumps(events[copied]))
    invented["data"]["charge_id"] = "charge:nobody:1:1504519200:0"
    invented["data"]["workload_id"] = "nobody"
    invented["subject"] = "nobody"
    kept = [e for i, e in enumerate(events) if i != dropped] + [invented]
    tampered = tmp_path / "tampered.ndjson"
    tampered.write_bytes(b"\n".join(orjson.dumps(e) for e in kept) + b"\n")
    result = run_fairshare("audit", "replay", "--events", str(tampered))
    assert result.returncode == 1
    out = " ".join(result.stdout.split())
    assert f"differs: {data['charge_id']}: gpu_seconds:" in out
    assert "missing in the log: " + str(events[dropped]["data"]["charge_id"]) in out  # type: ignore[index]
    assert "not supported by the facts: charge:nobody:1:1504519200:0" in out
    assert "identical" not in out


def test_verify_passes_then_catches_a_duplicate_and_an_overfull_hour(
    event_log: Path, tmp_path: Path
) -> None:
    ok = run_fairshare("audit", "verify", "--events", str(event_log))
    assert ok.returncode == 0, ok.stdout
    assert "0 violation(s)" in ok.stdout
    events = _lines(event_log)
    charge = next(e for e in events if e["type"] == "fairshare.ledger.charge.v1")
    huge = orjson.loads(orjson.dumps(charge))
    huge["data"]["charge_id"] = "charge:x:1:0:0"
    huge["data"]["gpu_seconds"] = huge["data"]["amount"] = 32 * 3600 + 1
    bad = tmp_path / "bad.ndjson"
    bad.write_bytes(b"\n".join(orjson.dumps(e) for e in [*events, charge, huge]) + b"\n")
    result = run_fairshare("audit", "verify", "--events", str(bad))
    assert result.returncode == 1
    out = " ".join(result.stdout.split())
    assert f"duplicate charge id {charge['data']['charge_id']}" in out  # type: ignore[index]
    assert "> capacity 115200" in out


def test_explain_tells_the_story_of_a_preempted_workload(event_log: Path) -> None:
    preempt = next(e for e in _lines(event_log) if e["type"] == "fairshare.command.preempt.v2")
    workload = str(preempt["data"]["workload_id"])  # type: ignore[index]
    result = run_fairshare("audit", "explain", workload, "--events", str(event_log))
    assert result.returncode == 0
    out = result.stdout
    assert "submitted by trace" in out
    assert "placed (attempt 1)" in out
    assert "stopped by its preemption (attempt 1)" in out
    assert "preempt command (attempt 1" in out
    assert "reason preempt-for" in out
    assert "requeued" in out
    assert "charge charge:" in out
    assert "total charged to its budget" in out


def test_a_log_with_corrections_audits_identically_in_log_order_and_shuffled(
    tmp_path: Path,
) -> None:
    """Late losses (an agent's loss dated before a heartbeat that confirmed an hour) make the
    simulated ledger post corrections. Its charges re-derive identically from the log as
    written and from shuffled reads of it (the audit folds in the canonical order of
    docs/spec/log-v1.md 8.9); folded as read, a shuffle breaks them; every pass re-derives."""
    log = _simulated_log(tmp_path, "--late-losses", "2", "--seed", "3")
    charges = [e["data"] for e in _lines(log) if e["type"] == "fairshare.ledger.charge.v1"]
    assert any(c["corrects"] for c in charges), "the late losses corrected confirmed hours"
    for order in ([], ["--shuffle", "1"], ["--shuffle", "2"]):
        result = run_fairshare("audit", "replay", "--events", str(log), *order)
        assert result.returncode == 0, result.stdout + result.stderr
        assert result.stdout.strip().splitlines()[-1] == "identical"
    as_read = run_fairshare(
        "audit", "replay", "--events", str(log), "--shuffle", "1", "--read-order"
    )
    assert as_read.returncode == 1
    decisions = run_fairshare("audit", "decisions", "--events", str(log))
    assert decisions.returncode == 0, decisions.stdout + decisions.stderr
