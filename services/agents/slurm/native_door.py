"""Native work on Slurm, for the door (``services.agents.native_door``): held jobs on
Fairshare's partitions read as :class:`~services.agents.native_door.NativeWork` (rules of
``native.py``), Fairshare's decisions told where Slurm users look, and the bindings file the
job_submit plugin reads.

* **Told**: the job's ``AdminComment`` (only an admin may write it, every user may read it:
  ``squeue -O JobID,State,Reason,admin_comment:100``, ``scontrol show job``), prefixed
  ``fairshare:``: the last decision with its reason, or, while the job waits, the one-sentence
  why-pending with its queue position and start estimate. A refusal is written there too (the
  job stays held: its user scancels it, or its account is bound and it is taken).
* **Gone**: a job its user cancelled (``scancel``), or one Slurm no longer lists while it waits.
* **The bindings file** (``--bindings-file``): what ``deploy/slurm/job_submit.lua`` reads on
  every submission to refuse at once what Fairshare would refuse (an account bound to no budget,
  more GPUs than the pool has): this cluster's name and partitions, the pool's largest node and
  GPUs, the uids that submit the agent's own runs, and each bound account with its budget.
  Written when it changes, whole (a temporary file renamed over it), readable by all.
"""

from __future__ import annotations

import logging
import os
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from events.models.budgets import SLURM_ACCOUNT
from projections.bindings import GroupBindings, counts
from projections.budget_tree import BudgetTree
from projections.cluster_types import WorkloadState
from services.agents.native_door import NativeWork, Notice, Waiting
from services.agents.slurm.adapter import SlurmAdapter
from services.agents.slurm.commands import NativeControl, SlurmError
from services.agents.slurm.native import SlurmOrigin, native_work

log = logging.getLogger(__name__)

#: Slurm keeps a comment of at most this many characters; more is cut with an ellipsis.
_COMMENT_MAX = 1000
#: Seconds between two rewrites of a waiting job's why-pending whose deciding reason holds.
WAITING_COMMENT_S = 60.0


class SlurmNative:
    """The Slurm family of native work (a :class:`~services.agents.native_door.
    NativeCluster`)."""

    def __init__(
        self,
        adapter: SlurmAdapter,
        control: NativeControl,
        cluster: str,
        *,
        check_members: bool,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.adapter = adapter
        self.control = control
        self.cluster = cluster
        self.check_members = check_members
        #: The last comment written per job id (a comment is written when it changes), and
        #: the reason and time of the last why-pending written.
        self._comments: dict[str, str] = {}
        self._waiting_said: dict[str, tuple[str | None, float]] = {}
        self.clock = clock

    def native_work(self, node_sizes: Sequence[int]) -> list[NativeWork]:
        snapshot = self.adapter.snapshot
        if snapshot is None:
            return []
        return [
            native_work(job, self.cluster, node_sizes, check_members=self.check_members)
            for job in sorted(snapshot.native.values(), key=lambda j: int(j.job_id))
            if job.held
        ]

    def gone(self, workload: WorkloadState) -> str | None:
        origin = SlurmOrigin.of(workload.spec)
        snapshot = self.adapter.snapshot
        if origin is None or snapshot is None:
            return None
        job = snapshot.native.get(origin.job_id)
        if job is not None and job.state == "CANCELLED":
            return f"slurm job {origin.job_id} was cancelled in Slurm (scancel)"
        if job is None and workload.status == "pending":
            return f"slurm job {origin.job_id} is no longer in Slurm"
        return None

    def settle(self, workload: WorkloadState) -> bool:
        """Cancelled in Fairshare (``fairshare cancel``): the job is cancelled in Slurm too."""
        origin = SlurmOrigin.of(workload.spec)
        snapshot = self.adapter.snapshot
        if origin is None or snapshot is None:
            return origin is None
        job = snapshot.native.get(origin.job_id)
        if job is None or job.ended:
            return True
        try:
            self.control.cancel(origin.job_id)
        except SlurmError as error:
            log.warning(
                "could not cancel the job", extra={"job": origin.job_id, "reason": str(error)}
            )
            return False
        log.info("native job cancelled in Slurm, as in Fairshare", extra={"job": origin.job_id})
        return True

    def queued_again(self, workload: WorkloadState) -> None:
        """Nothing: a preempted job was requeued held, and waits held for its next placement."""

    def refuse(self, work: NativeWork, reason: str) -> None:
        self._comment(str(work.origin["job_id"]), f"refused: {reason}")

    def tell(self, workload: WorkloadState, notice: Notice) -> bool | None:
        origin = SlurmOrigin.of(workload.spec)
        if origin is None:
            return None
        if notice.reason == "Pending":
            return True  # the why-pending is the waiting job's comment already
        if notice.reason in ("Finished", "Cancelled"):
            return True  # the job is over: Slurm says how (squeue, sacct); a call saved each
        return self._comment(origin.job_id, notice.message)

    def show_waiting(self, workload: WorkloadState, waiting: Waiting | None) -> bool:
        """The why-pending, rewritten when the reason that decides changes, else at most every
        :data:`WAITING_COMMENT_S` (its position and estimate move every refresh: one
        ``scontrol`` call per waiting job each time would slow the agent's every round)."""
        origin = SlurmOrigin.of(workload.spec)
        if origin is None or waiting is None:
            return True
        now = self.clock()
        last = self._waiting_said.get(origin.job_id)
        if last is not None and last[0] == waiting.code and now - last[1] < WAITING_COMMENT_S:
            return True
        where = f"position {waiting.position}; " if waiting.position else ""
        done = self._comment(
            origin.job_id, f"{waiting.summary} ({where}start estimate {waiting.estimate})"
        )
        if done:
            self._waiting_said[origin.job_id] = (waiting.code, now)
        return done

    def _comment(self, job_id: str, text: str) -> bool:
        snapshot = self.adapter.snapshot
        job = None if snapshot is None else snapshot.native.get(job_id)
        if job is None or job.ended:
            return True  # Slurm keeps no comment of a job that is over: nothing to retry
        comment = f"fairshare: {text}".replace("\n", " ")
        if len(comment) > _COMMENT_MAX:
            comment = comment[: _COMMENT_MAX - 1] + "…"
        if self._comments.get(job_id) == comment:
            return True
        try:
            self.control.update_job(job_id, [f"AdminComment={comment}"])
        except SlurmError as error:
            log.warning("could not comment the job", extra={"job": job_id, "reason": str(error)})
            return False
        self._comments[job_id] = comment
        return True


def bindings_text(
    *,
    cluster: str,
    partitions: Sequence[str],
    node_sizes: Sequence[int],
    agent_uids: Sequence[int],
    bindings: GroupBindings,
    tree: BudgetTree,
) -> str:
    """What ``deploy/slurm/job_submit.lua`` reads (see the module's docstring)."""
    lines = [
        f"# Written by the Fairshare Slurm agent of cluster {cluster}: do not edit (it is",
        "# rewritten whole when a binding changes). Read by job_submit.lua on every sbatch.",
        f"cluster={cluster}",
        *(f"partition={partition}" for partition in partitions),
        f"largest_node_gpus={max(node_sizes, default=0)}",
        f"pool_gpus={sum(node_sizes)}",
        *(f"agent_uid={uid}" for uid in agent_uids),
    ]
    for binding in bindings.all(cluster=cluster, kind=SLURM_ACCOUNT):
        if binding.default and counts(tree, binding.budget):
            lines.append(f"account={binding.group} budget={binding.budget}")
    return "\n".join(lines) + "\n"


def write_bindings(path: Path, text: str) -> bool:
    """Replace ``path`` with ``text`` whole (never half written: the plugin reads it on every
    submission); whether it was written."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(
            "w", dir=path.parent, prefix=f".{path.name}.", delete=False, encoding="utf-8"
        ) as file:
            file.write(text)
            temporary = Path(file.name)
        temporary.chmod(0o644)
        os.replace(temporary, path)
    except OSError as error:
        log.error(
            "cannot write the bindings file the job_submit plugin reads",
            extra={"path": str(path), "reason": str(error)},
        )
        return False
    return True
