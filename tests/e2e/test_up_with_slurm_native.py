"""Native Slurm work end to end, as Slurm users meet it: ``fairshare up --slurm-cluster hpc
--slurm-partition gpu`` runs every service as its own process over Apache Kafka beside the real
Slurm of ``.ci/start-slurm`` with Fairshare's job_submit plugin. A budget's manager binds a
Slurm account with ``fairshare budgets bind-account``; a user sends an unchanged script with
the real ``sbatch --account=vision --gres=gpu:2 --time-min=...``: the plugin holds it, the agent
takes it as a workload of the account's budget, queued with the work ``fairshare submit``
sends, pins it to its placement and releases it; it runs and finishes under its own job id and
is charged to lab/vision. An sbatch naming an account bound to no budget is refused at submit
with the plugin's message. Then both audits of the whole run are clean."""

from __future__ import annotations

import os
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from services.brokers import BrokerHandle
from tests.integration.slurm_fixtures import require_slurm
from tests.processes import (
    FAIRSHARE,
    audit_once_charging_caught_up,
    free_port,
    run_fairshare,
    stop,
    wait_while_up,
)

pytestmark = [pytest.mark.slurm, pytest.mark.broker]

ADMIN = {"Authorization": "Bearer admin-token"}
JOBCOMP = Path("/var/log/fairshare-slurm/jobcomp.log")
BINDINGS = Path("/etc/slurm/fairshare-bindings")
#: The demo's member of lab/vision, who sends the job.
USER = "ana"

SCRIPT = """#!/bin/sh
#SBATCH --job-name=train
sleep 15
"""


def _sbatch(*options: str) -> subprocess.CompletedProcess[str]:
    """``sbatch`` as the demo's user ana (a member of lab/vision) runs it on this host."""
    return subprocess.run(
        ["runuser", "-u", USER, "--", "sbatch", "--parsable", "--partition=gpu",
         "--output=/dev/null", *options],
        input=SCRIPT, capture_output=True, text=True, timeout=30, check=False, cwd="/tmp",
    )  # fmt: skip


@pytest.fixture
def unix_user() -> Iterator[str]:
    """The demo's ana as a unix user of this host (made for the test when missing)."""
    made = subprocess.run(["id", USER], capture_output=True, check=False).returncode != 0
    if made:
        done = subprocess.run(["useradd", "-M", USER], capture_output=True, text=True, check=False)
        if done.returncode != 0:
            pytest.skip(f"cannot make the unix user {USER}: {done.stderr.strip()}")
    try:
        yield USER
    finally:
        if made:
            subprocess.run(["userdel", USER], capture_output=True, check=False)


def _native(port: int, job_id: str) -> dict[str, Any] | None:
    items = httpx.get(f"http://127.0.0.1:{port}/workloads", headers=ADMIN, timeout=5).json()
    found = [w for w in items["workloads"] if w.get("name") == f"slurm job {job_id}"]
    return found[0] if found else None


@pytest.mark.timeout(900)
def test_an_unchanged_sbatch_is_held_placed_charged_and_audited_clean(
    tmp_path: Path, broker: BrokerHandle, unix_user: str
) -> None:
    require_slurm()
    before = BINDINGS.read_bytes() if BINDINGS.exists() else None
    port = free_port()
    api = f"http://127.0.0.1:{port}"
    prefix = f"t{uuid.uuid4().hex[:8]}."
    env = {**os.environ, "COLUMNS": "400"}
    env.pop("FAIRSHARE_KAFKA_BOOTSTRAP", None)
    out = tmp_path / "up.out"
    jobs: list[str] = []
    args = ["up", "--kafka", broker.bootstrap, "--topic-prefix", prefix]
    args += ["--data-dir", str(tmp_path / "data"), "--api-port", str(port)]
    args += ["--nodes", "1", "--gpus-per-node", "1", "--submit-every", "2", "--schedulers", "1"]
    args += ["--slurm-cluster", "hpc", "--slurm-partition", "gpu"]
    args += ["--slurm-jobcomp-log", str(JOBCOMP)]
    with out.open("wb") as handle:
        up = subprocess.Popen([*FAIRSHARE, *args], stdout=handle, stderr=subprocess.STDOUT, env=env)
    try:
        wait_while_up(
            lambda: httpx.get(f"{api}/nodes", headers=ADMIN, timeout=5).json()["nodes"],
            "the API and the nodes", 180, up, out,
        )  # fmt: skip
        bound = run_fairshare(
            "budgets", "bind-account", "lab/vision", "--cluster", "hpc", "--account", "vision",
            "--api", api, "--token", "admin-token", timeout=60,
        )  # fmt: skip
        assert bound.returncode == 0, bound.stdout + bound.stderr
        wait_while_up(
            lambda: "account=vision" in BINDINGS.read_text(), "the bindings file", 60, up, out
        )

        # an account bound to no budget: refused at submit, on the user's terminal
        refused = _sbatch("--account=nobody", "--gres=gpu:1")
        assert refused.returncode != 0
        assert "bind-account" in refused.stderr, refused.stderr

        submitted = _sbatch("--account=vision", "--gres=gpu:2", "--time=10", "--time-min=1")
        assert submitted.returncode == 0, submitted.stdout + submitted.stderr
        job_id = submitted.stdout.strip().split(";")[0]
        jobs.append(job_id)
        running = wait_while_up(
            lambda: (w := _native(port, job_id)) and w["status"] in ("running", "succeeded")
            and w,
            "the job placed", 180, up, out,
        )  # fmt: skip
        assert running["budget"] == "lab/vision"
        assert running["submitter"] == USER
        assert running["gpus"] == 2
        done = wait_while_up(
            lambda: (w := _native(port, job_id)) and w["status"] == "succeeded" and w,
            "the job finished", 180, up, out,
        )  # fmt: skip
        workload_id = done["workload_id"]
        charged = wait_while_up(
            lambda: httpx.get(f"{api}/workloads/{workload_id}", headers=ADMIN, timeout=5)
            .json()["charged_gpu_s"],
            "the job charged", 120, up, out,
        )  # fmt: skip
        assert charged >= 2 * 10, "2 GPUs for about 15 s, to lab/vision"
    finally:
        stop(up, 60)
        for job_id in jobs:
            subprocess.run(["scancel", job_id], capture_output=True, check=False)
        if before is not None:
            BINDINGS.write_bytes(before)
    decisions = run_fairshare(
        "audit", "decisions", "--kafka", broker.bootstrap, "--topic-prefix", prefix, timeout=300
    )
    assert decisions.returncode == 0, decisions.stdout[-3000:] + decisions.stderr[-3000:]
    charges = audit_once_charging_caught_up(broker.bootstrap, prefix, tmp_path)
    assert charges.returncode == 0, charges.stdout[-3000:] + charges.stderr[-3000:]
    assert "identical" in charges.stdout.lower(), charges.stdout[-3000:]
