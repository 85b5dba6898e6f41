"""What stopping a run now would throw away: the one rule the policy weighs and the simulator
charges.

A job declares in its spec how it checkpoints (:data:`CHECKPOINT_EVERY_KEY`, ``C`` seconds of
progress between checkpoints) and what a resumed run pays before it progresses again
(:data:`RESTART_OVERHEAD_KEY`, ``R`` seconds). A stop keeps progress up to the last whole
checkpoint and wastes the rest, plus the restart the run already paid; a job that cannot resume
keeps nothing. The rule lives in the core, not in the simulator, so that the preemption policy
(which may not import the simulator) and the simulator's cost model compute the same figure.

A job that declares no checkpoint interval is taken to save its state on SIGTERM within the
grace period (the reason the grace period exists): only the restart it declares is at risk.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from projections.cluster_types import WorkloadState

#: Spec keys a job sets to declare how it checkpoints (the simulator sets both).
CHECKPOINT_EVERY_KEY = "checkpoint_every_s"
RESTART_OVERHEAD_KEY = "restart_overhead_s"


@dataclass(frozen=True, slots=True)
class StopLoss:
    """How one stopped run's time splits: progress kept for the next run, progress discarded,
    and restart overhead paid (all in seconds of the run, per GPU)."""

    kept_s: float
    discarded_s: float
    restart_s: float

    @property
    def wasted_s(self) -> float:
        return self.discarded_s + self.restart_s


def stop_loss(
    ran_s: float, overhead_s: float, checkpoint_every_s: float | None, resumable: bool = True
) -> StopLoss:
    """What stopping a run that has run ``ran_s`` seconds (of which the first ``overhead_s`` are
    its restart) keeps and wastes. Progress is kept up to its last whole checkpoint;
    ``checkpoint_every_s`` 0 never checkpoints, None checkpoints on the stop itself."""
    ran_s = max(0.0, ran_s)
    restart = min(ran_s, overhead_s)
    progress = ran_s - restart
    if not resumable:
        kept = 0.0
    elif checkpoint_every_s is None:
        kept = progress
    elif checkpoint_every_s > 0:
        kept = checkpoint_every_s * math.floor(progress / checkpoint_every_s)
    else:
        kept = 0.0
    return StopLoss(kept_s=kept, discarded_s=progress - kept, restart_s=restart)


def _declared(workload: WorkloadState, key: str) -> float | None:
    value = workload.spec.get(key)
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return max(0.0, float(value)) if math.isfinite(value) else None


def restart_overhead_s(workload: WorkloadState) -> float:
    """The restart a run of this workload pays before progressing: every attempt after the
    first resumes and pays what the job declares (nothing if it declares nothing)."""
    if workload.attempt <= 1:
        return 0.0
    return _declared(workload, RESTART_OVERHEAD_KEY) or 0.0


def wasted_if_stopped(workload: WorkloadState, now: float) -> float:
    """GPU-seconds a stop at ``now`` would cost beyond letting the run go on: the progress since
    its last checkpoint, and the restart its next run will pay if the job resumes. (A restart
    this run already paid is spent whether it is stopped or not.)"""
    if workload.started_at is None:
        return 0.0
    loss = stop_loss(
        workload.ran_s(now),
        restart_overhead_s(workload),
        _declared(workload, CHECKPOINT_EVERY_KEY),
        workload.resumable,
    )
    again = (_declared(workload, RESTART_OVERHEAD_KEY) or 0.0) if workload.resumable else 0.0
    return workload.gpus * (loss.discarded_s + again)
