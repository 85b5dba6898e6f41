"""Two clusters under one budget tree: ``fairshare up --slurm-cluster hpc`` runs the simulated
cluster and the real Slurm of ``.ci/start-slurm`` side by side, as two pools. The demo stream's
workloads accept either pool: with a simulated cluster of one GPU, most must land in Slurm, and
both pools show in the budgets' shares.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import httpx
import pytest

from tests.integration.slurm_fixtures import require_slurm
from tests.processes import FAIRSHARE, free_port

pytestmark = [pytest.mark.slurm, pytest.mark.broker]

ADMIN = {"Authorization": "Bearer admin-token"}
JOBCOMP = Path("/var/log/fairshare-slurm/jobcomp.log")


def test_up_runs_a_simulated_and_a_slurm_cluster_as_two_pools(tmp_path: Path) -> None:
    require_slurm()
    port = free_port()
    env = {**os.environ, "COLUMNS": "400"}
    env.pop("FAIRSHARE_KAFKA_BOOTSTRAP", None)
    out = tmp_path / "up.out"
    args = ["up", "--data-dir", str(tmp_path / "data"), "--api-port", str(port)]
    args += ["--nodes", "1", "--gpus-per-node", "1", "--submit-every", "0.5", "--schedulers", "1"]
    args += ["--slurm-cluster", "hpc", "--slurm-jobcomp-log", str(JOBCOMP)]
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
    finally:
        if up.poll() is None:
            up.send_signal(signal.SIGTERM)
            try:
                up.wait(timeout=30)
            except subprocess.TimeoutExpired:
                up.kill()
                up.wait()
