"""``fairshare bench audit-decisions`` on a tiny slice: the figures are there and agree with one
another, and a run whose audit found a violation exits non-zero after printing them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest
from typer.testing import CliRunner

from events.envelope import Envelope
from services.audit.decisions import DecisionAudit, Problem
from services.bench.audit import decisions as bench
from services.bench.audit.decisions import AuditDecisionsConfig, audit_decisions_benchmark
from services.bench.cli import bench_app

TINY = AuditDecisionsConfig(jobs=60, gpus=16)


@pytest.fixture(scope="module")
def figures() -> dict[str, Any]:
    return audit_decisions_benchmark(TINY)


def test_the_figures_are_present_and_consistent(figures: dict[str, Any]) -> None:
    assert figures["jobs"] == 60
    assert figures["gpus"] == 16
    assert figures["events"] > figures["jobs"]
    assert 0 < figures["passes"] <= figures["simulation_passes"]
    assert figures["commands"] >= figures["passes"]
    assert figures["violations"] == 0
    assert figures["bad_lines"] == 0
    assert figures["ok"] is True
    assert figures["problems"] == []
    sim, audit = figures["simulation_wall_s"], figures["audit_wall_s"]
    assert sim > 0
    assert audit > 0
    assert figures["simulation_cpu_s"] > 0
    assert figures["audit_over_simulation"] == pytest.approx(audit / sim, rel=0.01, abs=0.002)
    assert figures["within_target"] == (figures["audit_over_simulation"] <= 2.0)
    per_s = figures["audit_events_per_s"]
    assert per_s == pytest.approx(figures["events"] / audit, rel=0.01)
    assert figures["audit_s_per_million_events"] == pytest.approx(1e6 / per_s, rel=0.01)


def test_an_offset_slice_starts_later_in_the_trace() -> None:
    figures = audit_decisions_benchmark(AuditDecisionsConfig(jobs=40, gpus=16, offset=200))
    assert figures["offset"] == 200
    assert figures["jobs"] == 40
    assert figures["passes"] > 0
    assert figures["violations"] == 0


def test_an_offset_past_the_trace_is_refused() -> None:
    with pytest.raises(ValueError, match="no job"):
        audit_decisions_benchmark(AuditDecisionsConfig(jobs=10, gpus=16, offset=10**7))


def test_the_command_prints_and_writes_the_figures(tmp_path: Path) -> None:
    out = tmp_path / "figures.json"
    args = ["audit-decisions", "--jobs", "30", "--gpus", "16", "--json-out", str(out)]
    result = CliRunner().invoke(bench_app, args)
    assert result.exit_code == 0, result.output
    written = orjson.loads(out.read_bytes())
    assert orjson.loads(result.stdout) == written
    assert written["jobs"] == 30
    assert written["violations"] == 0


def test_a_violation_fails_the_command_after_printing(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(log: list[Envelope[Any]]) -> DecisionAudit:
        problem = Problem(pass_id=1, line=7, rule="victim", message="forged")
        return DecisionAudit(events=len(log), passes=1, commands=1, problems=[problem])

    monkeypatch.setattr(bench, "audit_decisions", broken)
    result = CliRunner().invoke(bench_app, ["audit-decisions", "--jobs", "30", "--gpus", "16"])
    assert result.exit_code == 1
    printed = orjson.loads(result.stdout)
    assert printed["violations"] == 1
    assert printed["ok"] is False
    assert printed["problems"] == ["pass 1 (line 7): victim: forged"]
