"""Native Slurm work over the real Slurm of ``bash .ci/start-slurm`` (slurmctld and slurmd from
Debian, with Fairshare's job_submit plugin, ``deploy/slurm/job_submit.lua``): unchanged scripts
sent with the real ``sbatch`` to Fairshare's partition are held by the plugin, taken by the
agent as workloads charged to their account's budget, pinned and released, preempted by
requeueing and holding them (same job id), released again and finished; ``squeue`` shows
Fairshare's reason on a held job; ``scancel`` of a held job cancels its workload; an agent
killed between pin and release releases nothing twice. Scheduler, agent and API run over the
session's Kafka."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from events.models import GroupBound, MembershipGranted
from events.models.budgets import SLURM_ACCOUNT
from services.agents.slurm.adapter import NativeOptions
from services.agents.slurm.native_runs import NativeRuns
from tests.integration.kafka_bus import KafkaBus
from tests.integration.slurm_fixtures import (
    ADMIN,
    BO,
    SlurmCluster,
    Stack,
    require_slurm,
    running_stack,
    wait_until,
)

pytestmark = [pytest.mark.broker, pytest.mark.slurm]

BINDINGS = Path("/etc/slurm/fairshare-bindings")
ACCOUNT = "vision"


@pytest.fixture(scope="session")
def slurm_cluster() -> SlurmCluster:
    return require_slurm()


@pytest.fixture
def bindings_file() -> Iterator[Path]:
    """The plugin's file, as the test cluster had it before (the test's agent rewrites it)."""
    before = BINDINGS.read_bytes() if BINDINGS.exists() else None
    try:
        yield BINDINGS
    finally:
        if before is not None:
            BINDINGS.write_bytes(before)


@pytest.fixture
def stack(
    slurm_cluster: SlurmCluster, bus: KafkaBus, tmp_path: Path, bindings_file: Path
) -> Iterator[Stack]:
    native = NativeOptions(partitions=("gpu",), bindings_file=bindings_file, agent_uids=(0,))
    with running_stack(bus, tmp_path / "runs", native=native) as running:
        running.seed_lab()
        running.seed(
            # sbatch runs as root here: root is a member of lab/a, as a user of it would be
            MembershipGranted(budget="lab/a", user="root", role="member", granted_by="admin"),
            GroupBound(
                budget="lab/a",
                cluster=running.cluster,
                kind=SLURM_ACCOUNT,
                group=ACCOUNT,
                default=True,
                bound_by="admin",
            ),
        )
        yield running


def _sbatch(stack: Stack, *options: str, script: str) -> str:
    """``sbatch`` as a user runs it: the script's #SBATCH lines unchanged but for the
    partition, account and GPUs."""
    done = subprocess.run(
        ["sbatch", "--parsable", "--partition=gpu", f"--output={stack.out}/native-%j.out",
         *options],
        input=script, capture_output=True, text=True, timeout=30, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    job_id = done.stdout.strip().split(";")[0]
    stack.native_jobs.append(job_id)
    return job_id


def _squeue(job_id: str, fields: str) -> str:
    done = subprocess.run(
        ["squeue", "--noheader", "--states=all", "-j", job_id, "-O", fields],
        capture_output=True, text=True, timeout=30, check=False,
    )  # fmt: skip
    return done.stdout.strip()


def _workload_of(stack: Stack, job_id: str) -> dict[str, Any] | None:
    items = stack.api().get("/workloads", headers=ADMIN).json()["workloads"]
    found = [w for w in items if w.get("name") == f"slurm job {job_id}"]
    return stack.workload(found[0]["workload_id"]) if found else None


def _status(stack: Stack, job_id: str) -> str | None:
    found = _workload_of(stack, job_id)
    return None if found is None else found["status"]


def _start(stack: Stack) -> None:
    stack.start_agent()
    stack.start_scheduler()
    stack.start_api()
    wait_until(lambda: stack.api().get("/nodes", headers=ADMIN).json()["nodes"], "nodes")
    wait_until(lambda: f"account={ACCOUNT}" in BINDINGS.read_text(), "the bindings file", 30)


#: Long the first time, short once Slurm requeued it (SLURM_RESTART_COUNT counts requeues).
RESTARTABLE = """#!/bin/sh
#SBATCH --job-name=train
if [ "${SLURM_RESTART_COUNT:-0}" -eq 0 ]; then sleep 600; else sleep 3; fi
"""


@pytest.mark.timeout(600)
def test_an_sbatch_job_is_held_placed_preempted_requeued_with_its_id_and_finishes(
    stack: Stack,
) -> None:
    _start(stack)
    # lab/a also holds the other node, inside a long contract: the sbatch job is the one
    # preemptible run of the budget over its share
    response = stack.api().post(
        "/workloads",
        json={"workload_id": "wa", "budget": "lab/a", "gpus": 8, "min_runtime_s": 3600,
              "pools": [stack.pool], "spec": {"command": "sleep 900"}},
        headers={"Authorization": "Bearer ana-token"},
    )  # fmt: skip
    assert response.status_code in (200, 201, 202), response.text
    wait_until(lambda: stack.workload("wa").get("status") == "running", "wa runs", 60)
    job_id = _sbatch(
        stack, f"--account={ACCOUNT}", "--gres=gpu:8", "--time=10", "--time-min=1",
        script=RESTARTABLE,
    )  # fmt: skip
    wait_until(lambda: _status(stack, job_id) == "running", "the sbatch job placed", 60)
    first = _workload_of(stack, job_id)
    assert first is not None
    assert first["budget"] == "lab/a"
    assert first["gpus"] == 8
    assert first["submitter"] == "root"
    assert first["min_runtime_s"] == 60, "--time-min, the contract"
    wait_until(lambda: _squeue(job_id, "State").startswith("RUNNING"), "running in Slurm", 30)
    (node,) = [n["node"] for n in first["placement"]]
    assert _squeue(job_id, "NodeList").strip() == node, "pinned to its placement"

    # lab/b, through `fairshare submit`, preempts it once its contract is over
    response = stack.api().post(
        "/workloads",
        json={"workload_id": "wb", "budget": "lab/b", "gpus": 8, "min_runtime_s": 1,
              "pools": [stack.pool], "spec": {"command": "sleep 2"}},
        headers=BO,
    )  # fmt: skip
    assert response.status_code in (200, 201, 202), response.text
    wait_until(lambda: stack.workload("wb").get("status") == "succeeded", "wb ran", 180)
    wait_until(lambda: _status(stack, job_id) == "succeeded", "the job finishes", 180)
    done = _workload_of(stack, job_id)
    assert done is not None
    assert done["attempt"] == 2, "preempted once, placed again"
    assert done["exit_code"] == 0
    assert (
        "Restarts=1"
        in subprocess.run(
            ["scontrol", "show", "job", job_id], capture_output=True, text=True, check=False
        ).stdout
    ), "requeued by Slurm under the same job id"


@pytest.mark.timeout(300)
def test_squeue_shows_why_a_held_job_waits_and_scancel_cancels_it(stack: Stack) -> None:
    _start(stack)
    # every GPU taken by lab/a's long contract: the sbatch job waits
    for workload_id in ("w1", "w2"):
        stack.api().post(
            "/workloads",
            json={"workload_id": workload_id, "budget": "lab/a", "gpus": 8,
                  "min_runtime_s": 3600, "pools": [stack.pool],
                  "spec": {"command": "sleep 900"}},
            headers={"Authorization": "Bearer ana-token"},
        )  # fmt: skip
    wait_until(
        lambda: all(stack.workload(w).get("status") == "running" for w in ("w1", "w2")),
        "lab/a holds every GPU",
        60,
    )
    job_id = _sbatch(stack, f"--account={ACCOUNT}", "--gres=gpu:2", script=RESTARTABLE)
    wait_until(lambda: _status(stack, job_id) == "pending", "queued", 60)
    wait_until(lambda: "fairshare:" in _squeue(job_id, "admin_comment:300"), "the reason shown", 30)
    shown = _squeue(job_id, "State:10,Reason:15,admin_comment:300")
    assert shown.startswith("PENDING"), shown
    assert "JobHeld" in shown, shown
    found = _workload_of(stack, job_id)
    assert found is not None
    why = stack.api().get(f"/workloads/{found['workload_id']}/why", headers=ADMIN).json()
    assert why["pending"][0]["summary"].split(":")[0] in shown, (why, shown)

    subprocess.run(["scancel", job_id], check=True, timeout=30)
    wait_until(lambda: _status(stack, job_id) == "cancelled", "cancelled in Fairshare", 60)


class _Killed(BaseException):
    """Stands for kill -9: nothing after it runs."""


@pytest.mark.timeout(300)
def test_an_agent_killed_between_pin_and_release_releases_once(
    stack: Stack, monkeypatch: pytest.MonkeyPatch
) -> None:
    original = NativeRuns.release

    def die(self: NativeRuns, run: Any, origin: Any) -> None:
        raise _Killed

    monkeypatch.setattr(NativeRuns, "release", die)
    _start(stack)
    job_id = _sbatch(stack, f"--account={ACCOUNT}", "--gres=gpu:2", script=RESTARTABLE)
    assert stack.agent is not None
    thread = stack._agent_thread
    assert thread is not None
    wait_until(lambda: not thread.alive, "the agent killed between pin and release", 60)
    assert "JobHeld" in _squeue(job_id, "Reason"), "pinned, never released"
    stack._agent_thread = None
    monkeypatch.setattr(NativeRuns, "release", original)
    agent = stack.start_agent()
    wait_until(lambda: _squeue(job_id, "State").startswith("RUNNING"), "released", 60)
    time.sleep(2)
    assert agent.adapter.native.released == 1, "released once"
    found = _workload_of(stack, job_id)
    assert found is not None
    assert found["attempt"] == 1
