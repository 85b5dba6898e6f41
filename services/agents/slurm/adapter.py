"""A Slurm cluster behind the adapter interface: Fairshare decides, Slurm executes.

Each run is one batch job pinned to the nodes and GPU count of its placement
(:mod:`services.agents.slurm.submit`), named ``<workload>+<attempt>+<cluster>`` so that a
restarted agent finds the jobs it submitted (:meth:`SlurmAdapter.adopt`) and never submits one
twice (:meth:`SlurmAdapter.start` looks for the name first). What happens to a job is read from
Slurm itself: one ``sinfo`` and one ``squeue --states=all`` per round, at most every
``refresh_s`` (:mod:`services.agents.slurm.parse`); a job that has already left slurmctld's
memory is looked up in the job-completion log, when there is one.

A stop is ``scancel --signal=TERM --full`` (every process of the job), then, once the grace
period is over, ``scancel --signal=KILL --full`` and ``scancel``. A job Slurm keeps pending
longer than ``pending_timeout_s`` (the placement cannot run there: a reservation, a partition
limit, GPUs taken by a job submitted around Fairshare in the meantime) is cancelled and its run
reported failed with Slurm's reason, rather than charged as running while it is not.

A node Slurm marks down or not responding is unreachable: no heartbeats (the scheduler then
declares it down), nothing started or stopped there. Drains, and the GPUs held by jobs Fairshare
did not submit, are the business of :class:`~services.agents.slurm.agent.SlurmAgent`, which
reads them from this adapter.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import cast

from events.models.cluster import MAX_FOREIGN_HOLDERS, ForeignHolder
from events.types import ID_PATTERN
from services.agents.adapter import GpuSample, NodeSpec, RunEnded, RunRequest
from services.agents.run_as import RunAs, submitter_of
from services.agents.slurm.commands import NativeControl, SlurmControl, SlurmError
from services.agents.slurm.native import NativeJob, SlurmOrigin, is_native, parse_native_squeue
from services.agents.slurm.native_runs import NativeRuns
from services.agents.slurm.parse import (
    JobEnd,
    RunTag,
    SlurmJob,
    SlurmNode,
    SlurmParseError,
    foreign_gpus,
    job_name,
    parse_jobcomp,
    parse_scontrol_topology,
    parse_sinfo,
    parse_squeue,
)
from services.agents.slurm.submit import SpecError, SubmitOptions, submission

log = logging.getLogger(__name__)

#: A job submitted this recently may be missing from a listing taken just before: not "gone".
_LISTING_LAG_S = 5.0


@dataclass(frozen=True)
class Snapshot:
    """Slurm at one instant: its nodes and its jobs (finished ones included)."""

    nodes: Mapping[str, SlurmNode]
    jobs: Sequence[SlurmJob]
    #: The agent's clock (monotonic) when it was read.
    taken_at: float
    #: The jobs on Fairshare's partitions that it did not submit (native work), by id.
    native: Mapping[str, NativeJob] = field(default_factory=dict)

    @cached_property
    def by_id(self) -> dict[str, SlurmJob]:
        return {job.job_id: job for job in self.jobs}

    @cached_property
    def by_name(self) -> dict[str, SlurmJob]:
        """The job of each name: the live one if any, else the latest (a name is one run)."""
        found: dict[str, SlurmJob] = {}
        for job in sorted(self.jobs, key=lambda j: _job_number(j.job_id)):
            current = found.get(job.name)
            if current is None or current.ended or not job.ended:
                found[job.name] = job
        return found


def _job_number(job_id: str) -> tuple[int, str]:
    digits = job_id.split("_")[0].split("+")[0]
    return (int(digits) if digits.isdigit() else -1, job_id)


@dataclass(frozen=True)
class NativeOptions:
    """What the operator decides for native work (``fairshare agent slurm``'s options)."""

    #: Fairshare's partitions: their jobs that the agent did not submit are native work.
    partitions: tuple[str, ...]
    #: The file the job_submit plugin reads (None: not written; the plugin then refuses).
    bindings_file: Path | None = None
    #: The uids whose jobs named as the agent's runs pass the plugin unheld (the agent's own).
    agent_uids: tuple[int, ...] = (0,)
    #: Check the submitting user against the budget's members (without Slurm's association
    #: checks, ``AccountingStorageEnforce=associations``, any user may name any account).
    check_members: bool = True


@dataclass
class _Job:
    """A run this agent incarnation submitted or adopted, and what it asked of it."""

    request: RunRequest
    job_id: str
    submitted_at: float
    #: When SIGTERM went out, and when the grace is over.
    kill_at: float | None = None
    killed: bool = False
    cancelled: bool = False
    #: Why the agent itself cancelled it (pending too long), added to the end's message.
    note: str = ""
    warned_pending: bool = False


@dataclass(frozen=True)
class _Outage:
    """Slurm not answering: since when, the last try, and how many tries failed."""

    since: float
    last: float
    failures: int


class SlurmAdapter:
    """A :class:`~services.agents.adapter.ClusterAdapter` over one Slurm cluster.

    ``cluster`` is the Fairshare cluster's name (it is in every job name: several Fairshare
    clusters may share one Slurm without taking each other's jobs). Raises :class:`SlurmError`
    when Slurm does not answer, or has no node with GPUs, at construction.
    """

    def __init__(
        self,
        slurm: SlurmControl,
        *,
        cluster: str,
        partition: str | None = None,
        gpu_type: str | None = None,
        submit_options: SubmitOptions | None = None,
        run_as: RunAs | None = None,
        refresh_s: float = 1.0,
        pending_timeout_s: float = 600.0,
        drain_in_slurm: bool = False,
        native: NativeOptions | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.slurm = slurm
        #: Native work: unchanged sbatch jobs on Fairshare's partitions (None: the agent takes
        #: none, and needs no job_submit plugin).
        self.native_options = native
        self.native_partitions = native.partitions if native is not None else ()
        self.cluster = cluster
        self.partition = partition
        self.options = submit_options or SubmitOptions(partition=partition)
        self.run_as = run_as
        self.refresh_s = refresh_s
        self.pending_timeout_s = pending_timeout_s
        #: Drain in Slurm the nodes cordoned in Fairshare (the Slurm agent does it).
        self.drain_in_slurm = drain_in_slurm
        self.clock = clock
        self._snapshot: Snapshot | None = None
        self._outage: _Outage | None = None
        self._jobs: dict[str, _Job] = {}
        self._ended: list[RunEnded] = []
        self.native = NativeRuns(cast("NativeControl", slurm), self._native_jobs, clock)
        self._snapshot = self._read()
        # Each node's block from Slurm's topology plugin (none without one: placement then
        # knows no blocks, as before).
        topology = parse_scontrol_topology(slurm.show_topology())
        specs = []
        for node in sorted(self._snapshot.nodes.values(), key=lambda n: n.name):
            if node.gpus < 1:
                continue
            if re.match(ID_PATTERN, node.name) is None:
                log.warning(
                    "Slurm node name is not a Fairshare id; skipped", extra={"node": node.name}
                )
                continue
            block, rack = topology.get(node.name, ("", ""))
            specs.append(
                NodeSpec(
                    node.name,
                    node.gpus,
                    gpu_type or node.gpu_type or "gpu",
                    executor="slurm",
                    block=block,
                    rack=rack,
                )
            )
        if not specs:
            where = f"partition {partition}" if partition else "Slurm"
            raise SlurmError(f"no node with GPUs (GRES gpu) in {where}")
        self._specs = specs
        self._gpus = {spec.name: spec.gpus for spec in specs}

    # -- reading Slurm ---------------------------------------------------------------------
    def _read(self) -> Snapshot:
        nodes = parse_sinfo(self.slurm.list_nodes(self.partition))
        jobs = parse_squeue(self.slurm.list_jobs())
        native: dict[str, NativeJob] = {}
        if self.native_partitions:
            control = cast("NativeControl", self.slurm)
            listed = parse_native_squeue(control.list_native_jobs(self.native_partitions))
            native = {
                job.job_id: job
                for job in listed
                if is_native(job, self.cluster, self.native_partitions)
            }
        return Snapshot(nodes, jobs, self.clock(), native)

    def _native_jobs(self) -> dict[str, NativeJob] | None:
        snapshot = self.refresh()
        return None if snapshot is None else dict(snapshot.native)

    def refresh(self) -> Snapshot | None:
        """The listing, read again when older than ``refresh_s``; None while Slurm does not
        answer (every node is then unreachable, and no end is reported). Tries back off to
        ten times ``refresh_s`` while it does not answer."""
        now = self.clock()
        current, outage = self._snapshot, self._outage
        if current is not None and now - current.taken_at < self.refresh_s:
            return current
        if outage is not None and now - outage.last < self.refresh_s * min(10, outage.failures):
            return None
        try:
            self._snapshot = self._read()
        except (SlurmError, SlurmParseError) as error:
            if outage is None:
                log.error(
                    "cannot read Slurm; its nodes count as unreachable",
                    extra={"reason": str(error)},
                )
                outage = _Outage(now, now, 0)
            self._outage = _Outage(outage.since, now, outage.failures + 1)
            self._snapshot = None
            return None
        if outage is not None:
            log.info("Slurm answers again", extra={"after_s": round(now - outage.since, 1)})
            self._outage = None
        return self._snapshot

    @property
    def snapshot(self) -> Snapshot | None:
        return self._snapshot

    def _tag(self, run: RunRequest) -> RunTag:
        return RunTag(run.workload_id, run.attempt, self.cluster)

    # -- the adapter -----------------------------------------------------------------------
    def nodes(self) -> Sequence[NodeSpec]:
        return list(self._specs)

    def start(self, run: RunRequest) -> None:
        origin = SlurmOrigin.of(run.spec)
        if origin is not None:
            self.native.start(run, origin)
            return
        name = job_name(self._tag(run))
        snapshot = self.refresh()
        existing = None if snapshot is None else snapshot.by_name.get(name)
        if existing is not None:
            # Submitted by a previous incarnation that died before its start reached the log.
            log.info(
                "job already in Slurm; not submitted again",
                extra={
                    "workload_id": run.workload_id,
                    "attempt": run.attempt,
                    "job": existing.job_id,
                },
            )
            self._jobs[run.workload_id] = _Job(run, existing.job_id, self.clock())
            return
        identity = None
        if self.run_as is not None:
            submitter = submitter_of(run)
            identity = self.run_as.identity_for(submitter)
            if identity is None:
                self._fail(run, f"refused: submitter {submitter!r} has no unix user in --run-as")
                return
        try:
            call = submission(run, self.cluster, self.options, identity)
        except SpecError as error:
            self._fail(run, str(error))
            return
        try:
            job_id = self.slurm.submit(call.argv, call.script)
        except SlurmError as error:
            self._fail(run, f"sbatch refused the job: {error}")
            return
        self._jobs[run.workload_id] = _Job(run, job_id, self.clock())
        log.info(
            "job submitted",
            extra={"workload_id": run.workload_id, "attempt": run.attempt, "job": job_id},
        )

    def _fail(self, run: RunRequest, message: str) -> None:
        """The run ends at once, never having run (reported by the next ``poll_ended``)."""
        log.warning("run not submitted", extra={"workload_id": run.workload_id, "reason": message})
        self._ended.append(RunEnded(run.workload_id, run.attempt, None, message))

    def adopt(self, run: RunRequest) -> bool:
        origin = SlurmOrigin.of(run.spec)
        if origin is not None:
            return self.native.adopt(run, origin)
        name = job_name(self._tag(run))
        snapshot = self.refresh()
        job = None if snapshot is None else snapshot.by_name.get(name)
        if job is not None:
            self._jobs[run.workload_id] = _Job(run, job.job_id, self.clock())
            log.info(
                "adopted a Slurm job", extra={"workload_id": run.workload_id, "job": job.job_id}
            )
            return True
        end = self._completion(name)
        if end is not None:
            self._ended.append(_run_ended(run, end))
            return True
        return False

    def stop(self, workload_id: str, attempt: int, grace_period_s: float) -> None:
        if workload_id in self.native.runs:
            self.native.stop(workload_id, attempt)  # Slurm's KillWait is the grace
            return
        job = self._jobs.get(workload_id)
        if job is None or job.request.attempt != attempt or job.kill_at is not None:
            return
        job.kill_at = self.clock() + max(0.0, grace_period_s)
        listed = None if self._snapshot is None else self._snapshot.by_id.get(job.job_id)
        try:
            if listed is not None and listed.waiting:
                self.slurm.cancel(job.job_id)  # nothing runs yet: nothing to signal
                job.killed = job.cancelled = True
            else:
                self.slurm.signal(job.job_id, "TERM")
        except SlurmError as error:
            log.warning("could not signal the job", extra={"job": job.job_id, "reason": str(error)})
        log.info(
            "SIGTERM sent through Slurm",
            extra={"workload_id": workload_id, "job": job.job_id, "grace_s": grace_period_s},
        )

    def poll_ended(self) -> list[RunEnded]:
        ended, self._ended = self._ended, []
        snapshot = self.refresh()
        if snapshot is None:
            return ended
        ended += self.native.poll_ended()
        now = self.clock()
        listed = snapshot.by_id
        for workload_id, job in sorted(self._jobs.items()):
            found = listed.get(job.job_id)
            if found is None:
                if snapshot.taken_at < job.submitted_at + _LISTING_LAG_S:
                    continue
                end = self._completion(job_name(self._tag(job.request)))
                message = f"Slurm job {job.job_id} is no longer listed and its end is unknown"
                result = (
                    _run_ended(job.request, end, job.note)
                    if end is not None
                    else RunEnded(workload_id, job.request.attempt, None, message)
                )
            elif found.ended:
                result = _run_ended(job.request, found.end(), job.note)
            else:
                self._chase(job, found, now)
                continue
            del self._jobs[workload_id]
            ended.append(result)
        return ended

    def _chase(self, job: _Job, found: SlurmJob, now: float) -> None:
        """A live job: kill it once its grace is over; give up on one pending too long."""
        if job.kill_at is not None and now >= job.kill_at and not job.killed:
            job.killed = True
            try:
                self.slurm.signal(job.job_id, "KILL")
            except SlurmError as error:
                log.warning(
                    "could not kill the job", extra={"job": job.job_id, "reason": str(error)}
                )
            self.cancel_job(job.job_id)  # and make sure Slurm ends it (the batch script too)
            log.info("grace over: job killed through Slurm", extra={"job": job.job_id})
            return
        if not found.waiting or job.cancelled:
            return
        waited = now - job.submitted_at
        if self.pending_timeout_s > 0 and waited >= self.pending_timeout_s:
            job.cancelled = job.killed = True
            job.note = (
                f"Slurm kept it pending for {int(waited)} s ({found.reason}); "
                "the agent cancelled it"
            )
            try:
                self.slurm.cancel(job.job_id)
            except SlurmError as error:
                log.warning(
                    "could not cancel the job", extra={"job": job.job_id, "reason": str(error)}
                )
            log.warning(job.note, extra={"workload_id": job.request.workload_id, "job": job.job_id})
        elif waited >= 30 and not job.warned_pending:
            job.warned_pending = True
            log.warning(
                "job still pending in Slurm",
                extra={
                    "workload_id": job.request.workload_id,
                    "job": job.job_id,
                    "reason": found.reason,
                },
            )

    def _completion(self, name: str) -> JobEnd | None:
        text = self.slurm.read_completions()
        return None if text is None else parse_jobcomp(text).get(name)

    def reachable(self, node: str) -> bool:
        found = None if self._snapshot is None else self._snapshot.nodes.get(node)
        return found is not None and node in self._gpus and not found.unreachable

    def readings(self, node: str) -> Sequence[GpuSample]:
        """Idle samples: Slurm allocates GPUs but does not measure them (the occupants come
        from the agent, and from :meth:`foreign_gpus` for jobs submitted around Fairshare)."""
        return [GpuSample(index=i) for i in range(self._gpus.get(node, 0))]

    def close(self) -> None:
        """Leave the jobs running: they are Slurm's now, and the next incarnation adopts them."""
        if self._jobs:
            log.info(
                "leaving jobs to Slurm",
                extra={"jobs": ",".join(j.job_id for j in self._jobs.values())},
            )
        self._jobs.clear()
        self.native.runs.clear()

    # -- for the Slurm agent ---------------------------------------------------------------
    def tracked(self, workload_id: str, attempt: int) -> bool:
        if self.native.tracked(workload_id, attempt):
            return True
        job = self._jobs.get(workload_id)
        return job is not None and job.request.attempt == attempt

    def tracked_job_ids(self) -> set[str]:
        return {job.job_id for job in self._jobs.values()}

    def our_jobs(self) -> list[tuple[RunTag, SlurmJob]]:
        """Jobs of this Fairshare cluster in the latest listing, by their name."""
        if self._snapshot is None:
            return []
        found = []
        for job in self._snapshot.jobs:
            tag = job.tag
            if tag is not None and tag.cluster == self.cluster:
                found.append((tag, job))
        return found

    def foreign_gpus(self, node: str) -> int:
        """GPUs of ``node`` that Slurm has given to jobs this agent did not submit."""
        if self._snapshot is None or node not in self._snapshot.nodes:
            return 0
        ours = {job.job_id: len(job.request.gpus_on(node)) for job in self._jobs.values()}
        return foreign_gpus(
            self._snapshot.nodes[node], self._snapshot.jobs, self.cluster, ours,
            native=self._snapshot.native,
        )  # fmt: skip

    def foreign_holders(self, node: str) -> tuple[ForeignHolder, ...]:
        """The jobs this agent did not submit holding GPUs on ``node``, by job id (their
        partition and user are not read yet: ``squeue``'s format would need them)."""
        if self._snapshot is None:
            return ()
        found = []
        for job in self._snapshot.jobs:
            if job.submitted_by(self.cluster) or job.job_id in self._snapshot.native:
                continue
            if not job.holds_nodes:
                continue
            gpus = job.gpus_on(node)
            if gpus > 0:
                found.append(ForeignHolder(name=job.job_id, gpus=gpus))
        found.sort(key=lambda h: (len(h.name), h.name))
        return tuple(found[:MAX_FOREIGN_HOLDERS])

    def cancel_job(self, job_id: str) -> bool:
        try:
            self.slurm.cancel(job_id)
        except SlurmError as error:
            log.warning("could not cancel the job", extra={"job": job_id, "reason": str(error)})
            return False
        return True

    def drain(self, node: str, reason: str) -> bool:
        """Hand a node to Slurm's maintenance: no new job there (running ones go on)."""
        return self._set_state(node, "DRAIN", reason)

    def resume(self, node: str) -> bool:
        return self._set_state(node, "RESUME", None)

    def _set_state(self, node: str, state: str, reason: str | None) -> bool:
        try:
            self.slurm.set_node_state(node, state, reason)
        except SlurmError as error:
            log.warning("scontrol update failed", extra={"node": node, "reason": str(error)})
            return False
        log.info("node state set in Slurm", extra={"node": node, "state": state})
        return True


def _run_ended(run: RunRequest, end: JobEnd, note: str = "") -> RunEnded:
    message = f"{end.message} (job {end.job_id})" + (f"; {note}" if note else "")
    return RunEnded(run.workload_id, run.attempt, end.exit_code, message)
