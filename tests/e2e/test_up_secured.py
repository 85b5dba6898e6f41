"""``fairshare up`` as a user runs it, secured (issue 28; the default since): its Apache Kafka
speaks only TLS with SCRAM-SHA-512, every service runs as its own principal under the ACLs of
its role, and the lab still places, runs, charges and projects work. An auditor reads the log
with the audit principal, and nobody reads it without one."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import stat
import subprocess
import time
from pathlib import Path

import pytest

from tests.e2e.test_fairshare_up import run_again_on_the_same_log
from tests.processes import FAIRSHARE, free_port, run_fairshare

pytestmark = [pytest.mark.broker, pytest.mark.slow, pytest.mark.timeout(420)]


def _finished_and_charged(database: Path) -> tuple[int, int]:
    if not database.exists():
        return 0, 0
    with sqlite3.connect(database) as db:
        try:
            done = db.execute("select count(*) from workloads where status = 'succeeded'")
            charges = db.execute("select count(*) from ledger_entries")
            return int(done.fetchone()[0]), int(charges.fetchone()[0])
        except sqlite3.OperationalError:  # not migrated yet
            return 0, 0


def test_up_on_a_secured_kafka_runs_every_service_as_its_own_principal(tmp_path: Path) -> None:
    env = {**os.environ, "COLUMNS": "200"}
    for name in ("FAIRSHARE_KAFKA_BOOTSTRAP", "FAIRSHARE_KAFKA_CONFIG"):
        env.pop(name, None)
    args = ["--data-dir", str(tmp_path), "--api-port", str(free_port()), "--submit-every", "1"]
    up = subprocess.Popen(
        [*FAIRSHARE, "up", "--kafka-security", "sasl_ssl", *args],
        stdout=(tmp_path / "up.out").open("w"),
        stderr=subprocess.STDOUT,
        env=env,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 240
        while _finished_and_charged(tmp_path / "fairshare.db") < (1, 1):
            assert up.poll() is None, (tmp_path / "up.out").read_text()
            assert time.monotonic() < deadline, (tmp_path / "up.out").read_text()
            time.sleep(2)
        out = (tmp_path / "up.out").read_text()
        assert "SASL_SSL with SCRAM-SHA-512 and ACLs" in out
        security = tmp_path / "broker" / "security"
        clients = security / "clients"
        assert {p.stem for p in clients.glob("*.properties")} == {
            "admin",
            "api",
            "scheduler",
            "agent-demo",
            "charging",
            "projector",
            "audit",
        }
        for path in [*security.iterdir(), *clients.iterdir()]:
            mode = stat.S_IMODE(path.stat().st_mode)
            assert mode == (0o700 if path.is_dir() else 0o600), path
        for service in ("api", "scheduler", "agent", "charging", "projector"):
            log = (tmp_path / "logs" / f"{service}.log").read_text()
            assert "AUTHORIZATION_FAILED" not in log, f"{service}: {log[-2000:]}"
        bootstrap = (
            f"127.0.0.1:{json.loads((tmp_path / 'broker' / 'ports.json').read_text())['port']}"
        )

        audit = run_fairshare(
            "audit", "verify", "--kafka", bootstrap,
            "--kafka-config", str(clients / "audit.properties"),
            env=env, timeout=120,
        )  # fmt: skip
        assert audit.returncode == 0, audit.stdout + audit.stderr
        assert "0 violation(s)" in audit.stdout
        exported = tmp_path / "events.ndjson"
        export = run_fairshare(
            "events", "export", "--out", str(exported), "--kafka", bootstrap,
            "--kafka-config", str(clients / "audit.properties"),
            env=env, timeout=120,
        )  # fmt: skip
        assert export.returncode == 0, export.stdout + export.stderr
        assert len(exported.read_text().splitlines()) > 10

        # Beside a local `fairshare up`, neither the port nor the audit principal need saying.
        local = run_fairshare("audit", "verify", "--data-dir", str(tmp_path), env=env, timeout=120)
        assert local.returncode == 0, local.stdout + local.stderr
        assert "as its audit principal" in local.stderr
        local_export = tmp_path / "local.ndjson"
        exported_here = run_fairshare(
            "events", "export", "--out", str(local_export), "--data-dir", str(tmp_path),
            env=env, timeout=120,
        )  # fmt: skip
        assert exported_here.returncode == 0, exported_here.stdout + exported_here.stderr
        assert len(local_export.read_text().splitlines()) > 10

        anonymous = run_fairshare("events", "export", "--out", "-", "--kafka", bootstrap, env=env)
        assert anonymous.returncode == 2, "no one reads the log without a principal"
    finally:
        os.killpg(up.pid, signal.SIGTERM)
        up.wait(timeout=60)
    assert up.returncode == 0, (tmp_path / "up.out").read_text()

    # Secured is the default: a second run with no security option on the same data keeps
    # its log and stays secured. (This was the default ``up`` test's second half; one stack
    # start less for the slow step.)
    again = run_again_on_the_same_log(args, tmp_path / "fairshare.db", env=env, timeout=180)
    assert "SASL_SSL with SCRAM-SHA-512 and ACLs" in again.stdout + again.stderr
