"""Native work on Slurm: unchanged ``sbatch`` jobs sent to Fairshare's partition, read as
workloads. Pure: squeue's lines in, native work and pin plans out.

**What is Fairshare's.** A job on one of Fairshare's partitions that the agent did not submit
itself (its name is not ``<workload>+<attempt>+<cluster>``). The job_submit plugin
(``deploy/slurm/job_submit.lua``) holds each such job as it is submitted and makes it
requeueable; the agent takes the held job as a workload and carries out Fairshare's decisions
with Slurm's own verbs (``native_runs.py``).

**What the job asks, read as a workload** (the script's lines that matter):

* ``--account=vision``: the budget, through the account's binding (``fairshare budgets
  bind-account lab/vision --cluster hpc --account vision``); Slurm lower-cases accounts;
* ``--gres=gpu:N`` (or ``--gpus-per-node=N``) on ``--nodes=K``, or ``--gpus=N``: the GPUs. One
  node (K <= 1) is a single-node gang of N; several nodes must be whole nodes (N = the nodes'
  GPU count: Fairshare places a multi-node gang on whole nodes), as must ``--gpus`` larger
  than the largest node (a multiple of the node size);
* ``--time-min``: the contract (absent or 0: burst work, free and preemptible at any time): a
  job that asks to run at least this long is promised that much before fair share may preempt
  it; ``--time``: its time limit (Slurm keeps it: TIMEOUT ends the run);
* the submitting Slurm user: the workload's submitter.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from events.models.budgets import SLURM_ACCOUNT
from events.native_work import native_origin
from services.agents.native_door import NativeWork
from services.agents.slurm.parse import (
    NATIVE_SQUEUE_FORMAT,
    TERMINAL_STATES,
    WAITING_STATES,
    SlurmParseError,
    expand_hostlist,
    parse_gpu_gres,
    parse_job_name,
)

_FIELDS = NATIVE_SQUEUE_FORMAT.count(",") + 1
#: The reasons of a job held (by the job_submit plugin: the user's hold; by the agent after a
#: preemption: the admin's).
HELD_REASONS = frozenset({"JobHeldUser", "JobHeldAdmin"})
_DURATION = re.compile(r"^(?:(?P<days>[0-9]+)-)?(?P<rest>[0-9:]+)$")


@dataclass(frozen=True)
class NativeJob:
    """A job on Fairshare's partitions, as ``squeue`` lists it."""

    job_id: str
    state: str
    reason: str
    account: str
    user: str
    partition: str
    #: Seconds; None: unlimited (or not set).
    time_limit_s: int | None
    time_min_s: int
    num_nodes: int
    gpus_per_node: int
    gpus_per_job: int
    nodes: tuple[str, ...]
    wait_status: int | None
    name: str

    @property
    def held(self) -> bool:
        return self.state in WAITING_STATES and self.reason in HELD_REASONS

    @property
    def ended(self) -> bool:
        return self.state in TERMINAL_STATES

    @property
    def waiting(self) -> bool:
        return self.state in WAITING_STATES

    @property
    def gpus(self) -> int:
        if self.gpus_per_node:
            return self.gpus_per_node * max(1, self.num_nodes)
        return self.gpus_per_job


def parse_duration(text: str) -> int | None:
    """Seconds of Slurm's ``[days-]hours:minutes:seconds`` (or ``minutes:seconds``, or
    ``minutes``); None for ``UNLIMITED``, ``N/A``, ``INVALID`` and anything else."""
    text = text.strip()
    match = _DURATION.match(text)
    if match is None:
        return None
    parts = [int(p) for p in match["rest"].split(":") if p.isdigit()]
    if not parts or len(parts) > 3:
        return None
    if len(parts) == 1:
        seconds = parts[0] * 60  # a bare number is minutes, as sbatch's --time
    elif len(parts) == 2:
        seconds = parts[0] * 60 + parts[1]
    else:
        seconds = parts[0] * 3600 + parts[1] * 60 + parts[2]
    return int(match["days"] or 0) * 86400 + seconds


def parse_native_squeue(text: str) -> list[NativeJob]:
    """The jobs of ``squeue --noheader --states=all --partition=... --Format=<NATIVE_SQUEUE_
    FORMAT>``."""
    jobs = []
    for line in text.splitlines():
        if not line.strip():
            continue
        fields = line.split("|", _FIELDS - 1)
        if len(fields) != _FIELDS:
            raise SlurmParseError(f"squeue: expected {_FIELDS} fields, got {len(fields)}")
        (job_id, state, reason, account, user, partition, limit, minimum, count, per_node,
         per_job, nodelist, status, name) = fields  # fmt: skip
        job_id, status = job_id.strip(), status.strip()
        if not re.fullmatch(r"[0-9]+", job_id):
            continue  # an array's pending elements (123_[1-9]): not native work's shape
        nodes = nodelist.strip()
        jobs.append(
            NativeJob(
                job_id=job_id,
                state=state.strip().split("+")[0].upper(),
                reason=reason.strip(),
                account=account.strip().lower(),
                user=user.strip(),
                partition=partition.strip(),
                time_limit_s=parse_duration(limit),
                time_min_s=parse_duration(minimum) or 0,
                num_nodes=int(count) if count.strip().isdigit() else 0,
                gpus_per_node=parse_gpu_gres(per_node).count,
                gpus_per_job=parse_gpu_gres(per_job).count,
                nodes=tuple(expand_hostlist(nodes)) if nodes and nodes != "(null)" else (),
                wait_status=int(status) if status.lstrip("-").isdigit() else None,
                name=name,
            )
        )
    return jobs


def is_native(job: NativeJob, cluster: str, partitions: Sequence[str]) -> bool:
    """On one of Fairshare's partitions (a job sent to several lists them all while it waits)
    and not one of this agent's own runs."""
    tag = parse_job_name(job.name)
    mine = tag is not None and tag.cluster == cluster
    return not mine and any(part in partitions for part in job.partition.split(","))


def native_workload_id(cluster: str, job_id: str) -> str:
    """``slurm.<job id>-<hash of the cluster>``: the job id users know, unique per cluster."""
    return f"slurm.{job_id}-{hashlib.sha256(cluster.encode()).hexdigest()[:8]}"


@dataclass(frozen=True)
class Shape:
    """How Fairshare places the job, and how Slurm is told: per node GPUs on ``nodes``."""

    gpus: int
    gang: str
    nodes: int
    gpus_per_node: int


def shape_of(job: NativeJob, node_sizes: Sequence[int]) -> Shape | str:
    """The job's shape, or why Fairshare cannot place it as it asks: on one node when it asks
    one (or none) and fits the largest; else on whole nodes, as many as it asks (or as its
    ``--gpus`` fills), all of one size."""
    if job.gpus < 1:
        return "it asks for no GPUs (--gres=gpu:N or --gpus=N): Fairshare's partition runs GPU work"
    if not node_sizes:
        return "no node of the pool is known yet"
    largest = max(node_sizes)
    if job.num_nodes <= 1 and job.gpus <= largest:
        return Shape(job.gpus, "single-node", 1, job.gpus)
    if job.num_nodes <= 1 and job.gpus_per_node:
        return f"it asks {job.gpus} GPUs on one node; the largest node has {largest}"
    count = job.num_nodes if job.num_nodes > 1 else -(-job.gpus // largest)
    per_node = job.gpus // count if job.gpus % count == 0 else 0
    others = sorted({size for size in node_sizes if size != largest})
    if per_node != largest or others:
        return (
            f"a job spanning nodes must ask whole nodes of {largest} GPUs "
            f"(--nodes=K --gres=gpu:{largest}, or --gpus a multiple of {largest})"
            + (f"; the pool also has nodes of {', '.join(map(str, others))}" if others else "")
        )
    return Shape(job.gpus, "whole-nodes", count, per_node)


def native_work(
    job: NativeJob, cluster: str, node_sizes: Sequence[int], *, check_members: bool
) -> NativeWork:
    """The work the door submits for a held native job. ``check_members``: without Slurm's
    association checks (``AccountingStorageEnforce=associations``), Fairshare checks the user
    against the budget's members."""
    shape = shape_of(job, node_sizes)
    problems = []
    if isinstance(shape, str):
        problems.append(shape)
        shape = Shape(max(1, job.gpus), "single-node", 1, max(1, job.gpus))
    if not job.account:
        problems.append("it names no account (--account): the account names its budget")
    origin: dict[str, Any] = {
        "cluster": cluster,
        "kind": "SlurmJob",
        "job_id": job.job_id,
        "user": job.user,
        "account": job.account,
        "nodes": shape.nodes,
        "gpus_per_node": shape.gpus_per_node,
    }
    return NativeWork(
        workload_id=native_workload_id(cluster, job.job_id),
        group_kind=SLURM_ACCOUNT,
        group=job.account or "-",
        budget_label=None,
        gpus=shape.gpus,
        gang=shape.gang,
        min_runtime_s=job.time_min_s,
        time_limit_s=job.time_limit_s,
        resumable=True,
        submitter=job.user or "unknown",
        name=f"slurm job {job.job_id}",
        origin=origin,
        problems=tuple(problems),
        member=job.user if check_members else None,
    )


@dataclass(frozen=True)
class SlurmOrigin:
    """A native workload's origin as its submission states it."""

    job_id: str
    nodes: int
    gpus_per_node: int

    @classmethod
    def of(cls, spec: Mapping[str, Any]) -> SlurmOrigin | None:
        origin = native_origin(spec)
        if origin is None or origin.get("kind") != "SlurmJob":
            return None
        try:
            found = cls(
                job_id=str(origin["job_id"]),
                nodes=int(origin["nodes"]),
                gpus_per_node=int(origin["gpus_per_node"]),
            )
        except (KeyError, TypeError, ValueError):
            return None
        valid = found.job_id.isdigit() and found.nodes >= 1 and found.gpus_per_node >= 1
        return found if valid else None


def pin_fields(origin: SlurmOrigin, placement: Sequence[tuple[str, tuple[int, ...]]]) -> list[str]:
    """``scontrol update JobId=...`` fields that pin the job to its placement: exactly these
    nodes (``NumNodes=n-n``: ``NodeList`` alone means "these among others"), and the GPUs per
    node the workload was placed with."""
    nodes = [node for node, _gpus in placement]
    per_node = max((len(gpus) for _node, gpus in placement), default=origin.gpus_per_node)
    return [
        f"NumNodes={len(nodes)}-{len(nodes)}",
        f"NodeList={','.join(nodes)}",
        f"Gres=gpu:{per_node}",
    ]
