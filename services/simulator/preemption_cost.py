"""What a preemption costs the job that suffers it: part of the simulated world, not a policy.

Real training keeps only what it has checkpointed. A job here checkpoints every ``C`` seconds
of progress within a run; a run that resumes after a preemption (or a node loss) first spends
``R`` seconds restarting (rescheduling, loading the image and the checkpoint) before it makes
progress again. A stop therefore discards the progress since the run's last checkpoint and the
restart it already paid; a job that cannot resume loses everything it did. ``C = 0`` is a job
that never checkpoints: every stop sends it back to the beginning.

The scheduling pass can see every term of this from the workload itself: ``C`` and ``R`` travel
in the workload's spec (:data:`CHECKPOINT_EVERY_KEY`, :data:`RESTART_OVERHEAD_KEY`), the run's
start is ``WorkloadState.started_at`` and a run pays the restart exactly when its attempt is
not the first. :func:`at_risk` is the whole rule, so a policy that weighs victims by the work a
preemption would throw away computes the same figure the simulator charges.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

#: Spec keys the simulator sets on every submitted workload while the cost model is on.
CHECKPOINT_EVERY_KEY = "checkpoint_every_s"
RESTART_OVERHEAD_KEY = "restart_overhead_s"


@dataclass(frozen=True)
class PreemptionCost:
    """``enabled=False`` is the free model of earlier versions: every second of progress is kept
    and a resumed run starts making progress at once."""

    checkpoint_every_s: int = 30 * 60
    restart_overhead_s: int = 180
    enabled: bool = True

    def __post_init__(self) -> None:
        if self.checkpoint_every_s < 0 or self.restart_overhead_s < 0:
            raise ValueError("--checkpoint-every and --restart-overhead must not be negative")

    def overhead(self, attempt: int) -> float:
        """Restart seconds a run of ``attempt`` pays before progressing: every attempt after
        the first resumes from a checkpoint (or from scratch) and pays it."""
        return float(self.restart_overhead_s) if self.enabled and attempt > 1 else 0.0

    def describe(self) -> str:
        if not self.enabled:
            return "free preemption: every second of progress is kept, no restart overhead"
        every = (
            "never checkpoint (a stop loses all progress)"
            if self.checkpoint_every_s == 0
            else f"checkpoint every {self.checkpoint_every_s / 60:g} min"
        )
        return f"jobs {every}; a resumed run pays {self.restart_overhead_s} s of restart"


@dataclass(frozen=True)
class StopLoss:
    """How one stopped run's time splits: progress kept for the next run, progress discarded,
    and restart overhead paid (all in seconds of the run, per GPU)."""

    kept_s: float
    discarded_s: float
    restart_s: float

    @property
    def wasted_s(self) -> float:
        return self.discarded_s + self.restart_s


def at_risk(
    cost: PreemptionCost, ran_s: float, overhead_s: float, resumable: bool = True
) -> StopLoss:
    """What stopping a run that has run ``ran_s`` seconds (of which the first ``overhead_s`` are
    its restart) would keep and waste. Progress is kept up to its last whole checkpoint."""
    ran_s = max(0.0, ran_s)
    restart = min(ran_s, overhead_s)
    progress = ran_s - restart
    if not cost.enabled:
        return StopLoss(kept_s=progress, discarded_s=0.0, restart_s=0.0)
    every = cost.checkpoint_every_s
    kept = every * math.floor(progress / every) if resumable and every > 0 else 0.0
    return StopLoss(kept_s=kept, discarded_s=progress - kept, restart_s=restart)


def last_checkpoint_at(
    cost: PreemptionCost, started_at: float, now: float, overhead_s: float
) -> float:
    """The instant of the run's last checkpoint by ``now``; the run's start stands for it until
    the first one (what is restored then is the previous run's checkpoint)."""
    loss = at_risk(cost, now - started_at, overhead_s)
    if loss.kept_s <= 0:
        return started_at
    return started_at + overhead_s + loss.kept_s


@dataclass(frozen=True)
class Interruption:
    """One run ended by a preemption or a node loss, and what it cost."""

    time: float
    workload_id: str
    budget: str
    gpus: int
    cause: str  # "preempted" or "lost"
    ran_s: float
    loss: StopLoss
