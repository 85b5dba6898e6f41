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
not the first. The rule itself is the core's
(:func:`scheduling.work_at_risk.stop_loss`), so the policy that weighs victims by
the work a preemption would throw away computes the very figure the simulator charges;
:func:`at_risk` only adds the free model of earlier runs.
"""

from __future__ import annotations

from dataclasses import dataclass

from scheduling.work_at_risk import (
    CHECKPOINT_EVERY_KEY,
    RESTART_OVERHEAD_KEY,
    StopLoss,
    stop_loss,
)

__all__ = [
    "CHECKPOINT_EVERY_KEY",
    "RESTART_OVERHEAD_KEY",
    "Interruption",
    "PreemptionCost",
    "StopLoss",
    "at_risk",
    "last_checkpoint_at",
]


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


def at_risk(
    cost: PreemptionCost, ran_s: float, overhead_s: float, resumable: bool = True
) -> StopLoss:
    """What stopping a run that has run ``ran_s`` seconds (of which the first ``overhead_s`` are
    its restart) would keep and waste. Progress is kept up to its last whole checkpoint."""
    if not cost.enabled:
        progress = max(0.0, ran_s) - min(max(0.0, ran_s), overhead_s)
        return StopLoss(kept_s=progress, discarded_s=0.0, restart_s=0.0)
    return stop_loss(ran_s, overhead_s, cost.checkpoint_every_s, resumable)


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
