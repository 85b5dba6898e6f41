"""The baseline of ``fairshare bench throughput``: the same trivial 1-GPU jobs submitted to a
real Slurm with ``sbatch``, as its users do, measured the same way as Fairshare's API.

One ``sbatch`` process per job from several client threads (what a script looping over
``sbatch`` in parallel does), and one ``sbatch --array``, to partition :data:`PARTITION`, which
Fairshare's job_submit plugin leaves alone. Placement and start are read back from ``squeue``
(``%V`` submit time, ``%S`` start time, ``%T`` state): Slurm keeps whole seconds, so its
percentiles have a resolution of 1 s; the benchmark's own clock gives when each ``sbatch`` was
called and answered. Jobs leave ``squeue`` only ``MinJobAge`` after they end
(an hour on ``.ci/start-slurm``'s cluster), so every job of a run is still there to be read.
"""

from __future__ import annotations

import shutil
import subprocess
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

Report = Callable[[str], None]

#: Slurm's states of a job that has not been given resources yet.
_WAITING = frozenset({"PENDING", "CONFIGURING", "REQUEUED"})


def slurm_missing() -> str | None:
    """Why Slurm cannot be measured here, or None when ``sbatch`` and a controller answer."""
    for tool in ("sbatch", "squeue", "sinfo"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed (bash .ci/start-slurm installs and starts Slurm)"
    answer = subprocess.run(["sinfo", "-h"], capture_output=True, text=True, timeout=30)
    if answer.returncode != 0:
        return f"Slurm does not answer: {answer.stderr.strip()[:200]}"
    return None


@dataclass
class SlurmRun:
    """One phase's submissions: job ids with the wall-clock times of their ``sbatch``."""

    name: str
    #: job id -> epoch seconds just before its sbatch was called
    sent: dict[str, float] = field(default_factory=dict)
    #: job id -> epoch seconds its sbatch returned (kept by :func:`sbatch_one`)
    returned: dict[str, float] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)
    started_at: float = 0.0
    ended_at: float = 0.0

    @property
    def accepted(self) -> int:
        return len(self.sent)


def _sbatch(args: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["sbatch", "--parsable", *args], capture_output=True, text=True,
                          timeout=120)  # fmt: skip


#: Where the baseline's jobs go: plain Slurm, not a partition Fairshare's job_submit plugin holds
#: for Fairshare (``.ci/start-slurm``'s cluster has "plain" on the same nodes as "gpu").
PARTITION = "plain"


def job_args(
    name: str, job_s: float, partition: str = PARTITION, more: Sequence[str] = ()
) -> list[str]:
    """The benchmark's trivial 1-GPU job (``sleep job_s``) on ``partition``, with ``more``
    options (an account, ``--hold``)."""
    return ["--job-name", name, f"--partition={partition}", "--gres=gpu:1", "-n1", "-o",
            "/dev/null", *more, "--wrap", f"sleep {job_s:g}"]  # fmt: skip


def sbatch_one(run: SlurmRun, args: list[str]) -> float:
    """One ``sbatch`` of ``run``: its job id with the times it was called and returned, or its
    error; the seconds it took."""
    sent = time.time()
    try:
        answer = _sbatch(args)
    except subprocess.TimeoutExpired:
        # sbatch retries a controller that is busy or full (MaxJobCount) by itself
        run.errors.append("sbatch: no answer within 120 s")
        return time.time() - sent
    returned = time.time()
    if answer.returncode == 0:
        job_id = answer.stdout.strip().split(";")[0]
        run.sent[job_id] = sent
        run.returned[job_id] = returned
    else:
        run.errors.append(answer.stderr.strip()[:200])
    return returned - sent


def submit_singles(count: int, clients: int, job_s: float) -> SlurmRun:
    """``count`` jobs, one ``sbatch`` each, from ``clients`` threads as fast as they answer."""
    run = SlurmRun(f"fsbench-{uuid.uuid4().hex[:8]}")
    lock = threading.Lock()
    todo = iter(range(count))

    def work() -> None:
        while True:
            with lock:
                if next(todo, None) is None:
                    return
            sent = time.time()
            answer = _sbatch(job_args(run.name, job_s))
            with lock:
                if answer.returncode == 0:
                    run.sent[answer.stdout.strip().split(";")[0]] = sent
                else:
                    run.errors.append(answer.stderr.strip()[:200])

    threads = [threading.Thread(target=work, daemon=True) for _ in range(clients)]
    run.started_at = time.time()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    run.ended_at = time.time()
    return run


def submit_array(count: int, job_s: float) -> SlurmRun:
    """One ``sbatch --array=0-<count-1>``; its elements are ``<id>_<index>`` in squeue."""
    run = SlurmRun(f"fsbench-{uuid.uuid4().hex[:8]}")
    run.started_at = time.time()
    answer = _sbatch([f"--array=0-{count - 1}", *job_args(run.name, job_s)])
    run.ended_at = time.time()
    if answer.returncode != 0:
        run.errors.append(answer.stderr.strip()[:300])
        return run
    array_id = answer.stdout.strip().split(";")[0]
    run.sent = {f"{array_id}_{index}": run.started_at for index in range(count)}
    return run


def _epoch(text: str) -> float | None:
    if not text or text in ("N/A", "Unknown", "None"):
        return None
    return datetime.fromisoformat(text).timestamp()  # squeue prints the local time


def jobs_of(name: str) -> dict[str, tuple[str, float | None, float | None]]:
    """Job (or array element) id -> (state, submit time, start time), by job name; an array
    still pending as one record is expanded by squeue's ``-r``."""
    answer = subprocess.run(
        ["squeue", "-h", "-r", "-t", "all", "--name", name, "-o", "%i|%T|%V|%S"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    jobs: dict[str, tuple[str, float | None, float | None]] = {}
    for line in answer.stdout.splitlines():
        job_id, state, submitted, started = [*line.split("|"), "", "", ""][:4]
        begun = _epoch(started) if state not in _WAITING else None
        jobs[job_id.strip()] = (state, _epoch(submitted), begun)
    return jobs


def wait_started(run: SlurmRun, timeout_s: float, report: Report) -> dict[str, float]:
    """Until every accepted job has left PENDING (or ``timeout_s``): job id -> start time."""
    deadline = time.monotonic() + timeout_s
    while True:
        jobs = jobs_of(run.name)
        started = {j: s[2] for j, s in jobs.items() if j in run.sent and s[2] is not None}
        if len(started) >= run.accepted or time.monotonic() > deadline:
            return started
        report(f"slurm {run.name}: {len(started)} of {run.accepted} started")
        time.sleep(2)


def cancel(run: SlurmRun) -> None:
    cancel_name(run.name)


def cancel_name(name: str) -> None:
    """Every job of that name, held ones included (a held job would otherwise wait for ever)."""
    subprocess.run(["scancel", "--name", name], capture_output=True, timeout=60)


def slurm_figures(run: SlurmRun, started: dict[str, float]) -> dict[str, Any]:
    from services.bench.throughput.figures import submit_phase_figures

    return submit_phase_figures(
        sent=run.sent,
        accepted=run.accepted,
        errors=run.errors,
        submitting_s=run.ended_at - run.started_at,
        placed=started,  # Slurm places and starts in one step
        started=started,
        resolution_s=1.0,
    )
