"""Runs of native Slurm work (``native.py``), carried out with Slurm's own verbs on the user's
own job, which keeps its job id throughout.

* **Place** = pin the held job to the placement (``scontrol update JobId=... NumNodes=n-n
  NodeList=... Gres=gpu:g``), let it start now (``StartTime=now``: a requeued job is otherwise
  made to wait two minutes), and release it. Pinning again is harmless and a release of a job
  that is not held is refused by Slurm, so an agent killed between the two and restarted pins
  again and releases once: nothing is released twice. A pin Slurm refuses (a node gone) ends
  the run as lost: the scheduler requeues it, the job stays held.
* **Preempt** = requeue the job and hold it (``scontrol requeue``, ``scontrol hold``: the
  admin's hold, which its user cannot release). Slurm signals the batch script (SIGTERM, then
  SIGKILL after ``KillWait``, slurm.conf's grace, not the command's) and puts the job back to
  pending under the same id; the run is over when the job waits again.
* **Over**: the job's own end (COMPLETED: 0; FAILED, TIMEOUT at its ``--time``, OUT_OF_MEMORY
  ...: its exit status). A job its user cancelled (``scancel``) is a cancel, which the agent
  states; the run then ends as the job did.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from services.agents.adapter import RunEnded, RunRequest
from services.agents.slurm.commands import NativeControl, SlurmError
from services.agents.slurm.native import NativeJob, SlurmOrigin, pin_fields
from services.agents.slurm.parse import exit_of

log = logging.getLogger(__name__)

#: Seconds a run whose job its user cancelled waits for the cancel the agent states before it
#: is reported over on its own.
CANCEL_WAIT_S = 60.0


@dataclass
class NativeRun:
    request: RunRequest
    origin: SlurmOrigin
    started_at: float
    stopping: bool = False
    cancelled_since: float | None = None


class NativeRuns:
    """The native runs of one Slurm adapter; ``jobs`` reads its latest listing (None: Slurm
    does not answer)."""

    def __init__(
        self,
        slurm: NativeControl,
        jobs: Callable[[], dict[str, NativeJob] | None],
        clock: Callable[[], float],
    ) -> None:
        self.slurm = slurm
        self._jobs = jobs
        self.clock = clock
        self.runs: dict[str, NativeRun] = {}
        self._ended: list[RunEnded] = []
        #: Releases done by this incarnation.
        self.released = 0

    def start(self, run: RunRequest, origin: SlurmOrigin) -> None:
        self.runs[run.workload_id] = NativeRun(run, origin, self.clock())
        job = (self._jobs() or {}).get(origin.job_id)
        if job is not None and not job.waiting:
            log.info("native job already released", extra={"job": origin.job_id})
            return
        try:
            self.slurm.update_job(origin.job_id, pin_fields(origin, run.placement))
            self.slurm.update_job(origin.job_id, ["StartTime=now"])
        except SlurmError as error:
            self._lost(run, f"Slurm refused to pin job {origin.job_id}: {error}")
            return
        self.release(run, origin)

    def release(self, run: RunRequest, origin: SlurmOrigin) -> None:
        """Let the pinned job start (a job already released is not released again)."""
        try:
            self.slurm.release(origin.job_id)
        except SlurmError as error:
            log.warning(
                "could not release the job", extra={"job": origin.job_id, "reason": str(error)}
            )
            return
        self.released += 1
        log.info(
            "native job pinned and released",
            extra={"workload_id": run.workload_id, "job": origin.job_id},
        )

    def _lost(self, run: RunRequest, message: str) -> None:
        log.warning(message, extra={"workload_id": run.workload_id})
        del self.runs[run.workload_id]
        self._ended.append(RunEnded(run.workload_id, run.attempt, None, message[:500], lost=True))

    def adopt(self, run: RunRequest, origin: SlurmOrigin) -> bool:
        """A run of a previous incarnation: adopted while its job is there."""
        jobs = self._jobs()
        job = None if jobs is None else jobs.get(origin.job_id)
        if job is None:
            return False
        self.runs[run.workload_id] = NativeRun(run, origin, self.clock())
        return True

    def stop(self, workload_id: str, attempt: int) -> None:
        run = self.runs.get(workload_id)
        if run is None or run.request.attempt != attempt or run.stopping:
            return
        run.stopping = True
        job = (self._jobs() or {}).get(run.origin.job_id)
        if job is not None and (job.ended or job.waiting):
            return  # nothing runs: its end (or its wait) is the stop
        try:
            self.slurm.requeue_held(run.origin.job_id)
        except SlurmError as error:
            log.warning(
                "could not requeue the job", extra={"job": run.origin.job_id, "reason": str(error)}
            )
        log.info("native job requeued and held", extra={"job": run.origin.job_id})

    def tracked(self, workload_id: str, attempt: int) -> bool:
        run = self.runs.get(workload_id)
        return run is not None and run.request.attempt == attempt

    def tracked_job_ids(self) -> set[str]:
        return {run.origin.job_id for run in self.runs.values()}

    def poll_ended(self) -> list[RunEnded]:
        ended, self._ended = self._ended, []
        jobs = self._jobs()
        if jobs is None:
            return ended
        now = self.clock()
        for workload_id, run in sorted(self.runs.items()):
            over = self._over(run, jobs.get(run.origin.job_id), now)
            if over is not None:
                del self.runs[workload_id]
                ended.append(over)
        return ended

    def _over(self, run: NativeRun, job: NativeJob | None, now: float) -> RunEnded | None:
        request = run.request
        if job is None:
            if now - run.started_at < 5.0:
                return None  # released a moment ago: the listing has not caught up
            message = f"Slurm job {run.origin.job_id} is no longer listed"
            return RunEnded(request.workload_id, request.attempt, None, message)
        if run.stopping and (job.waiting or job.ended):
            message = f"Slurm job {job.job_id} requeued and held"
            return RunEnded(request.workload_id, request.attempt, None, message)
        if not job.ended:
            if job.waiting and not job.held and now - run.started_at > 5.0:
                # released but not started: the release went out; chase nothing (Slurm starts
                # it on its nodes); a job held again by someone else is released once more
                return None
            if job.held and now - run.started_at > 5.0 and not run.stopping:
                self.release(request, run.origin)
            return None
        if job.state == "CANCELLED" and not run.stopping:
            if run.cancelled_since is None:
                run.cancelled_since = now
            if now - run.cancelled_since < CANCEL_WAIT_S:
                return None  # the agent states the cancel; the stop that follows ends it
        code, message = exit_of(job.state, job.wait_status)
        return RunEnded(request.workload_id, request.attempt, code, f"{message} (job {job.job_id})")


def by_id(jobs: Sequence[NativeJob]) -> dict[str, NativeJob]:
    return {job.job_id: job for job in jobs}
