"""The README's main job, run as a user would: the ``fairshare`` command in a subprocess."""

from __future__ import annotations

import os
import re
import sqlite3
import subprocess
import uuid
from pathlib import Path

import pytest

from services.brokers import BrokerHandle
from tests.processes import free_port, run_fairshare


def _run(
    *args: str, timeout: float = 120, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    if env is None:
        env = {**os.environ, "COLUMNS": "200"}
        env.pop("FAIRSHARE_KAFKA_BOOTSTRAP", None)
    return run_fairshare(*args, timeout=timeout, env=env)


def _check_a_working_lab(
    result: subprocess.CompletedProcess[str], database: Path, submitted_at_least: int = 3
) -> None:
    assert result.returncode == 0, result.stdout + result.stderr
    out = result.stdout
    assert "API      http://127.0.0.1:" in out
    assert "workloads: " in out
    found = re.search(r"stopped; (\d+) workload\(s\) submitted", out)
    assert found is not None, out
    assert int(found.group(1)) >= submitted_at_least
    with sqlite3.connect(database) as db:
        statuses = dict(db.execute("select status, count(*) from workloads group by status"))
        budgets = {row[0] for row in db.execute("select budget from budgets")}
    assert {"lab/vision", "lab/robotics", "lab/nlp"} <= budgets
    assert statuses.get("running", 0) + statuses.get("succeeded", 0) >= 1, statuses


def run_again_on_the_same_log(
    args: list[str], database: Path, env: dict[str, str] | None = None, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    """``up`` once more on the data of a run before: the embedded broker is durable, so it
    finds that run's workloads in the log (the read models rebuilt from it still hold them)
    and does not seed the lab twice. Its result, for what else a caller checks."""
    with sqlite3.connect(database) as db:
        before = {row[0] for row in db.execute("select workload_id from workloads")}
    again = _run("up", "--duration", "15", *args, timeout=timeout, env=env)
    # (its 15 s include starting the broker again: on 2 busy cores a slow start leaves room
    # for one or two submissions, which is all this run needs to show)
    _check_a_working_lab(again, database, submitted_at_least=1)
    with sqlite3.connect(database) as db:
        after = {row[0] for row in db.execute("select workload_id from workloads")}
        created = db.execute("select count(*) from budgets where budget = 'lab'").fetchone()[0]
    assert before
    assert before <= after
    assert created == 1
    return again


@pytest.mark.broker_fast
@pytest.mark.parametrize(
    ("choice", "announced"),
    [
        # the default (crash-safe and secured, run twice on the same data) is
        # tests/e2e/test_up_secured.py: one stack start less for the slow step
        # the fallback says what it is (run by .ci/run's noida step and its slow step)
        pytest.param(("--broker", "noida"), "NOT crash-safe", marks=pytest.mark.slow),
    ],
    ids=["fallback-noida"],
)
def test_up_on_embedded_defaults_runs_the_lab_and_keeps_its_log(
    tmp_path: Path, choice: tuple[str, ...], announced: str
) -> None:
    args = [
        "--data-dir", str(tmp_path), "--api-port", str(free_port()), "--submit-every", "1",
        *choice,
    ]  # fmt: skip
    first = _run("up", "--duration", "25", *args)
    _check_a_working_lab(first, tmp_path / "fairshare.db")
    assert announced in first.stdout + first.stderr
    run_again_on_the_same_log(args, tmp_path / "fairshare.db")


@pytest.mark.broker
@pytest.mark.slow  # a whole stack for 25 s: with the slow scenarios (the default run has up)
def test_up_against_an_external_kafka(broker: BrokerHandle, tmp_path: Path) -> None:
    result = _run(
        "up",
        "--duration",
        "30",
        "--kafka",
        broker.bootstrap,
        "--topic-prefix",
        f"e2e{uuid.uuid4().hex[:6]}.",
        "--data-dir",
        str(tmp_path),
        "--api-port",
        str(free_port()),
        "--submit-every",
        "1",
    )
    _check_a_working_lab(result, tmp_path / "fairshare.db")


@pytest.mark.slow  # 12-16 s: the default run stays under 10 minutes; CI runs it with -m slow
def test_up_reports_an_unreachable_kafka_clearly() -> None:
    result = _run("up", "--duration", "1", "--kafka", "127.0.0.1:1", timeout=60)
    assert result.returncode == 2
    assert "no broker" in result.stderr


def test_schema_check_command_passes_on_the_checked_in_schemas() -> None:
    result = _run("schemas", "check")
    assert result.returncode == 0, result.stderr
