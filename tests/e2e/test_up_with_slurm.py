"""Two clusters under one budget tree: ``fairshare up --slurm-cluster hpc`` runs the simulated
cluster and the real Slurm of ``.ci/start-slurm`` side by side, as two pools. The demo stream's
workloads accept either pool: with a simulated cluster of one GPU, most must land in Slurm, and
both pools show in the budgets' shares.

With a price for each pool and a price change while it runs, the month's FOCUS export passes the
FinOps Foundation's validator, reconciles with the ledger to the cent, and is byte-identical
when regenerated (issue 26).
"""

from __future__ import annotations

import csv
import io
import os
import signal
import sqlite3
import subprocess
import time
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from fractions import Fraction
from pathlib import Path

import httpx
import pytest

from tests.focus_validator import validate
from tests.integration.slurm_fixtures import require_slurm
from tests.processes import FAIRSHARE, free_port, run_fairshare

pytestmark = [pytest.mark.slurm, pytest.mark.broker]

ADMIN = {"Authorization": "Bearer admin-token"}
JOBCOMP = Path("/var/log/fairshare-slurm/jobcomp.log")


def _hours() -> tuple[datetime, datetime]:
    """(when the first prices take effect, when the change does): the hour before this one
    (never before this month: a closed month is not repriced) and this hour."""
    now = datetime.now(UTC).replace(minute=0, second=0, microsecond=0)
    month = now.replace(day=1, hour=0)
    return max(month, now - timedelta(hours=1)), now


def _iso(at: datetime) -> str:
    return at.strftime("%Y-%m-%dT%H:%M:%SZ")


def _pools_charged(database: Path) -> set[str]:
    try:
        with sqlite3.connect(database) as db:
            return {row[0] for row in db.execute("select distinct pool from ledger_entries")}
    except sqlite3.Error:
        return set()


@pytest.mark.timeout(1200)
def test_up_runs_a_simulated_and_a_slurm_cluster_as_two_pools(tmp_path: Path) -> None:
    require_slurm()
    first, change = _hours()
    port = free_port()
    env = {**os.environ, "COLUMNS": "400"}
    env.pop("FAIRSHARE_KAFKA_BOOTSTRAP", None)
    out = tmp_path / "up.out"
    args = ["up", "--data-dir", str(tmp_path / "data"), "--api-port", str(port)]
    args += ["--nodes", "1", "--gpus-per-node", "1", "--submit-every", "0.5", "--schedulers", "1"]
    args += ["--slurm-cluster", "hpc", "--slurm-jobcomp-log", str(JOBCOMP)]
    args += ["--price", f"demo=2.35@{_iso(first)}", "--price", f"hpc=4.10@{_iso(first)}"]
    database = tmp_path / "data" / "fairshare.db"
    with out.open("wb") as handle:
        up = subprocess.Popen([*FAIRSHARE, *args], stdout=handle, stderr=subprocess.STDOUT, env=env)
    try:
        pools: dict[str, int] = {}
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline and up.poll() is None:
            time.sleep(2)
            try:
                items = httpx.get(
                    f"http://127.0.0.1:{port}/workloads", headers=ADMIN, timeout=5
                ).json()["workloads"]
            except (httpx.HTTPError, ValueError, KeyError):
                continue
            pools = {}
            for item in items:
                if item["pool"] is not None:
                    pools[item["pool"]] = pools.get(item["pool"], 0) + 1
            if pools.get("hpc", 0) >= 2 and pools.get("demo", 0) >= 1:
                break
        text = out.read_text(errors="replace")
        assert up.poll() is None, text
        assert pools.get("hpc", 0) >= 2, (pools, text[-3000:])
        assert pools.get("demo", 0) >= 1, (pools, text[-3000:])
        budgets = httpx.get(f"http://127.0.0.1:{port}/budgets", headers=ADMIN, timeout=5).json()
        shown = {pool for budget in budgets["budgets"] for pool in budget["pools"]}
        assert {"demo", "hpc"} <= shown, shown
        if change > first:  # a price change while it runs (not in a month's first hour)
            changed = run_fairshare(
                "prices", "set", "demo", "2.80", "--currency", "EUR",
                "--effective-at", _iso(change), "--api", f"http://127.0.0.1:{port}",
                "--token", "admin-token", "--reason", "the e2e's change", timeout=60,
            )  # fmt: skip
            assert changed.returncode == 0, changed.stdout + changed.stderr
        # both pools charged (a run is charged when it ends or its hour closes: 30-300 s)
        wait = time.monotonic() + 360
        while time.monotonic() < wait and not {"demo", "hpc"} <= _pools_charged(database):
            time.sleep(3)
        assert {"demo", "hpc"} <= _pools_charged(database), out.read_text()[-3000:]
    finally:
        if up.poll() is None:
            up.send_signal(signal.SIGTERM)
            try:
                up.wait(timeout=30)
            except subprocess.TimeoutExpired:
                up.kill()
                up.wait()

    _the_focus_export_of_the_run(database, tmp_path, first)


def _the_focus_export_of_the_run(database: Path, tmp_path: Path, first: datetime) -> None:
    month = first.strftime("%Y-%m")
    focus = ["report", "focus", "--month", month, "--data-dir", str(database.parent)]
    exports = []
    for name in ("focus.csv", "again.csv"):
        done = run_fairshare(*focus, "--out", str(tmp_path / name), timeout=120)
        assert done.returncode == 0, done.stdout + done.stderr
        exports.append((tmp_path / name).read_bytes())
    assert exports[0] == exports[1], "regenerated, the export is byte-identical"
    passed, output = validate(tmp_path / "focus.csv")
    assert passed, output[-3000:]
    rows = list(csv.DictReader(io.StringIO(exports[0].decode())))
    with sqlite3.connect(database) as db:
        prices = db.execute(
            "select pool, budget, effective_at, per_gpu_hour from prices"
        ).fetchall()
        entries = db.execute(
            "select pool, bucket_start, kind, gpu_seconds, debit_account from ledger_entries"
        ).fetchall()
    assert {(p, b) for p, b, _, _ in prices} == {("demo", ""), ("hpc", "")}

    def price(pool: str, hour: int) -> Fraction:
        found = [(at, amount) for p, _, at, amount in prices if p == pool and at <= hour]
        return Fraction(Decimal(max(found)[1]))

    funded = Fraction(0)
    for pool, hour, kind, seconds, debit in entries:
        if kind == "allocated":
            signed = -seconds if debit.startswith("capacity:") else seconds
            funded += Fraction(signed) * price(pool, hour) / 3600
    billed = sum(Decimal(r["BilledCost"]) for r in rows if r["x_CostKind"] != "idle")
    assert abs(Fraction(billed) - funded) < Fraction(1, 200), (billed, float(funded))
    assert {r["x_Pool"] for r in rows} >= {"demo", "hpc"}
    assert {r["RegionId"] for r in rows if r["x_Pool"] == "hpc"} == {"hpc"}
