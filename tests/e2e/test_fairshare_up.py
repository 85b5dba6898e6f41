"""The README's main job, run as a user would: the ``fairshare`` command in a subprocess."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from services.brokers import BrokerHandle

FAIRSHARE = [sys.executable, "-m", "services.cli"]


def _run(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "COLUMNS": "200"}
    env.pop("FAIRSHARE_KAFKA_BOOTSTRAP", None)
    return subprocess.run(
        [*FAIRSHARE, *args], capture_output=True, text=True, timeout=timeout, env=env, check=False
    )


@pytest.mark.broker_fast
def test_up_on_embedded_defaults_round_trips_events_and_keeps_them(tmp_path: Path) -> None:
    first = _run("up", "--duration", "2", "--data-dir", str(tmp_path))
    assert first.returncode == 0, first.stdout + first.stderr
    assert "read back intact" in first.stdout
    assert "noida-db" in first.stdout
    # The embedded broker is durable: a second run on the same data dir finds the first run's
    # events still in the log (their offsets come first) and still reads its own back intact.
    second = _run("up", "--duration", "1", "--data-dir", str(tmp_path))
    assert second.returncode == 0, second.stdout + second.stderr
    assert "read back intact" in second.stdout
    assert "fairshare.budgets/" in second.stdout
    assert "@0)" not in second.stdout, "offsets restart at 0 only if the log was lost"


@pytest.mark.broker
def test_up_against_an_external_kafka(broker: BrokerHandle) -> None:
    result = _run("up", "--duration", "2", "--kafka", broker.bootstrap, "--topic-prefix", "e2e.")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "read back intact" in result.stdout


def test_up_reports_an_unreachable_kafka_clearly() -> None:
    result = _run("up", "--duration", "1", "--kafka", "127.0.0.1:1", timeout=60)
    assert result.returncode == 2
    assert "no broker" in result.stderr


def test_schema_check_command_passes_on_the_checked_in_schemas() -> None:
    result = _run("schemas", "check")
    assert result.returncode == 0, result.stderr
