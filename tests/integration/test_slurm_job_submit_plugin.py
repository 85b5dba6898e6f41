"""Fairshare's job_submit plugin (``deploy/slurm/job_submit.lua``) in the real slurmctld of
``bash .ci/start-slurm``, with the real ``sbatch`` as a user types it: on Fairshare's partition
``gpu`` a job of a bound account asking GPUs is accepted held (``JobHeldUser``) and requeueable;
an unbound account, no account, no GPUs, more GPUs than the pool, a partition list mixing ``gpu``
with another, and a missing bindings file are refused at ``sbatch`` with the plugin's message on
the user's terminal; a job to ``plain`` passes untouched, and so does one of the agent's runs
(named ``<workload>+<attempt>+<cluster>``, by an agent uid); a user cannot release their own held
job nor move it between partitions or accounts, while root can release it.

Each test writes the bindings file it needs (the one before is put back) and cancels its jobs.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.slurm_fixtures import (
    BINDINGS_FILE,
    SlurmCluster,
    agent_bindings,
    bindings_file,
    require_slurm,
)

pytestmark = [pytest.mark.slurm]

PLUGIN = Path(__file__).resolve().parents[2] / "deploy" / "slurm" / "job_submit.lua"
INSTALLED = Path("/etc/slurm/job_submit.lua")
CLUSTER = "hpc"
POOL_GPUS = 16
BOUND = agent_bindings(
    CLUSTER, ("vision", "lab/vision"), ("robotics", "lab/robotics"), pool_gpus=POOL_GPUS
)
SCRIPT = "#!/bin/sh\nsleep 300\n"
#: A user the tests submit as; created (and removed again) when this host has none.
TEST_USER = "fairshare-plugin-test"


@pytest.fixture(scope="module")
def slurm_cluster() -> SlurmCluster:
    cluster = require_slurm()
    config = subprocess.run(
        ["scontrol", "show", "config"], capture_output=True, text=True, timeout=30
    ).stdout
    plugins = [line for line in config.splitlines() if line.startswith("JobSubmitPlugins")]
    installed = INSTALLED.read_bytes() if INSTALLED.exists() else b""
    if not plugins or "lua" not in plugins[0] or installed != PLUGIN.read_bytes():
        reason = f"{INSTALLED} is not deploy/slurm/job_submit.lua with JobSubmitPlugins=lua"
        message = f"{reason}: run `bash .ci/start-slurm`"
        if os.environ.get("FAIRSHARE_REQUIRE_SLURM") == "1":
            pytest.fail(message)
        pytest.skip(message)
    return cluster


@pytest.fixture
def jobs(slurm_cluster: SlurmCluster) -> Iterator[list[str]]:
    """The job ids a test created, cancelled when it ends."""
    created: list[str] = []
    try:
        yield created
    finally:
        for job_id in created:
            subprocess.run(["scancel", job_id], capture_output=True, timeout=30, check=False)


@pytest.fixture
def bound(jobs: list[str]) -> Iterator[list[str]]:
    """Two accounts bound to budgets on cluster hpc, a pool of 16 GPUs, the agent as root."""
    with bindings_file(BOUND):
        yield jobs


def _sbatch(
    jobs: list[str], *options: str, user: str | None = None
) -> subprocess.CompletedProcess[str]:
    """``sbatch`` as a user runs it (as ``user`` when given); an accepted job's id is noted
    in ``jobs``."""
    argv = ["sbatch", "--parsable", "--output=/dev/null", *options]
    if user is not None:
        argv = ["runuser", "-u", user, "--", *argv]
    done = subprocess.run(
        argv, input=SCRIPT, capture_output=True, text=True, timeout=30, check=False, cwd="/tmp"
    )
    if done.returncode == 0:
        jobs.append(done.stdout.strip().split(";")[0])
    return done


def _accepted(jobs: list[str], *options: str, user: str | None = None) -> str:
    done = _sbatch(jobs, *options, user=user)
    assert done.returncode == 0, done.stderr
    return jobs[-1]


def _refused(jobs: list[str], *options: str) -> str:
    """sbatch's standard error, after checking that it refused the job."""
    done = _sbatch(jobs, *options)
    assert done.returncode == 1, (done.stdout, done.stderr)
    assert "Batch job submission failed" in done.stderr
    return done.stderr


def _reason(job_id: str) -> str:
    return subprocess.run(
        ["squeue", "-h", "-j", job_id, "-o", "%r"], capture_output=True, text=True, timeout=30
    ).stdout.strip()


def _show(job_id: str) -> str:
    return subprocess.run(
        ["scontrol", "show", "job", job_id], capture_output=True, text=True, timeout=30
    ).stdout


def test_a_job_of_a_bound_account_asking_gpus_is_accepted_held_and_requeueable(
    bound: list[str],
) -> None:
    done = _sbatch(bound, "--account=vision", "--gres=gpu:2", "-p", "gpu")
    assert done.returncode == 0, done.stderr
    assert "held for Fairshare, charged to budget lab/vision" in done.stderr
    job_id = bound[-1]
    assert _reason(job_id) == "JobHeldUser"
    shown = _show(job_id)
    assert "Requeue=1" in shown
    assert " Priority=0 " in shown
    # the default partition is Fairshare's too; --gpus asks per job; accounts in any case
    job_id = _accepted(bound, "--account=Robotics", "--gpus=3")
    assert _reason(job_id) == "JobHeldUser"
    assert "Partition=gpu" in _show(job_id)


def test_an_account_bound_to_no_budget_is_refused_with_how_to_bind_it(bound: list[str]) -> None:
    error = _refused(bound, "--account=nobody", "--gres=gpu:2", "-p", "gpu")
    assert (
        "fairshare: account 'nobody' is bound to no budget on cluster hpc; a budget's manager "
        "binds it: fairshare budgets bind-account <budget> --cluster hpc --account nobody"
    ) in error
    assert "Invalid account" in error  # ESLURM_INVALID_ACCOUNT


def test_a_job_without_an_account_is_refused(bound: list[str]) -> None:
    error = _refused(bound, "--gres=gpu:2", "-p", "gpu")
    assert "submit with --account=<account>" in error


def test_more_gpus_than_the_pool_has_are_refused_naming_both(bound: list[str]) -> None:
    error = _refused(bound, "--account=vision", "--gpus=20")
    assert f"asks 20 GPUs, more than the {POOL_GPUS} GPUs of Fairshare's pool" in error
    error = _refused(bound, "--account=vision", "--nodes=3", "--gres=gpu:8")
    assert f"asks 24 GPUs, more than the {POOL_GPUS} GPUs" in error


def test_a_job_asking_no_gpus_is_refused(bound: list[str]) -> None:
    error = _refused(bound, "--account=vision", "-p", "gpu")
    assert "ask --gres=gpu:N or --gpus=N" in error


def test_a_partition_list_mixing_fairshares_with_another_is_refused(bound: list[str]) -> None:
    error = _refused(bound, "--account=vision", "--gres=gpu:1", "-p", "gpu,plain")
    assert "submit to it alone" in error


def test_a_job_to_another_partition_passes_untouched(bound: list[str]) -> None:
    job_id = _accepted(bound, "-p", "plain", "--gres=gpu:1")  # no account, nothing checked
    assert _reason(job_id) != "JobHeldUser"
    assert "Requeue=0" in _show(job_id), "JobRequeue=0 left as it is"


def test_the_agents_runs_pass_unheld_and_only_theirs(bound: list[str]) -> None:
    job_id = _accepted(bound, "--job-name=w1+1+hpc", "--gres=gpu:1", "-p", "gpu")
    assert _reason(job_id) != "JobHeldUser"
    assert "Requeue=0" in _show(job_id), "passed unchanged"
    # another Fairshare cluster's name is not this agent's: checked like any job
    error = _refused(bound, "--job-name=w1+1+other", "--gres=gpu:1", "-p", "gpu")
    assert "submit with --account=<account>" in error


def test_a_missing_bindings_file_refuses(jobs: list[str]) -> None:
    with bindings_file(None):
        error = _refused(jobs, "--account=vision", "--gres=gpu:1", "-p", "gpu")
    assert f"cannot read {BINDINGS_FILE}, which the Fairshare Slurm agent keeps" in error


@pytest.fixture
def user() -> Iterator[str]:
    """A user who is not root (the agent's uid), created for the test if this host has none."""
    if os.geteuid() != 0:
        pytest.skip("creating a user to submit as needs root")
    try:
        pwd.getpwnam(TEST_USER)
        created = False
    except KeyError:
        made = subprocess.run(
            ["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin",
             TEST_USER],
            capture_output=True, text=True, timeout=30, check=False,
        )  # fmt: skip
        if made.returncode != 0:
            pytest.skip(f"cannot create a user to submit as: {made.stderr.strip()}")
        created = True
    try:
        yield TEST_USER
    finally:
        # its jobs are cancelled by then (this fixture comes first): userdel refuses a user
        # with processes left, so it is tried until the last one is gone
        for _ in range(40) if created else ():
            with contextlib.suppress(OSError, subprocess.SubprocessError):
                gone = subprocess.run(["userdel", TEST_USER], capture_output=True, timeout=30)
                if gone.returncode == 0:
                    break
            time.sleep(0.5)


def _as(user: str, *argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["runuser", "-u", user, "--", *argv], capture_output=True, text=True, timeout=30,
        check=False, cwd="/tmp",
    )  # fmt: skip


def test_a_user_cannot_release_or_move_their_held_job_and_root_can_release_it(
    user: str, bound: list[str]
) -> None:
    job_id = _accepted(bound, "--account=vision", "--gres=gpu:1", "-p", "gpu", user=user)
    assert _reason(job_id) == "JobHeldUser"
    assert f"UserId={user}(" in _show(job_id)
    for change in (
        ["scontrol", "release", job_id],
        ["scontrol", "update", f"JobId={job_id}", "Priority=100"],
        ["scontrol", "update", f"JobId={job_id}", "Requeue=0"],
        ["scontrol", "update", f"JobId={job_id}", "Partition=plain"],
        ["scontrol", "update", f"JobId={job_id}", "Account=robotics"],
    ):
        done = _as(user, *change)
        assert done.returncode != 0, (change, done.stdout)
        assert "denied" in done.stderr.lower(), (change, done.stderr)
        assert _reason(job_id) == "JobHeldUser", change
    # what the guard leaves alone: other fields of the user's own job
    assert _as(user, "scontrol", "update", f"JobId={job_id}", "Comment=mine").returncode == 0

    # nor can a job be moved into Fairshare's partition past the checks at submission
    plain = _accepted(bound, "-p", "plain", "--gres=gpu:1", "--hold", user=user)
    done = _as(user, "scontrol", "update", f"JobId={plain}", "Partition=gpu")
    assert done.returncode != 0, done.stdout
    assert "Partition=plain" in _show(plain)
    # nor may a user name a job as the agent's runs
    done = _sbatch(bound, "--job-name=w1+1+hpc", "--account=vision", "--gres=gpu:1", user=user)
    assert done.returncode == 1
    assert "are those of Fairshare's agent" in done.stderr

    # root (here the agent's uid) releases it
    released = subprocess.run(
        ["scontrol", "release", job_id], capture_output=True, text=True, timeout=30
    )
    assert released.returncode == 0, released.stderr
    assert _reason(job_id) != "JobHeldUser"
