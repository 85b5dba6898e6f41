"""How long a run may last: the one rule every reader of a time limit uses.

A workload may declare ``time_limit_s`` (how long one run may last from its start; like Slurm's
``--time``); each pool has a default for work that declares none and a maximum (Slurm's
``DefaultTime``/``MaxTime``, Kueue's maximum execution time). The scheduler resolves a run's
limit with :func:`limit_s` when it places the run and states it on the place command; the agent
stops the run there (finished, "time limit"); the API refuses a limit a pool would not grant;
start estimates (``start_estimate.py``) and, later, backfill read when a run will be over from
:func:`expected_end`. One rule, so that all of them agree.

Pure: no clock, no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from events.types import DEFAULT_MAX_TIME_LIMIT_S, DEFAULT_TIME_LIMIT_S, TIME_LIMIT_CAP_S
from projections.cluster_types import WorkloadState


@dataclass(frozen=True, slots=True)
class TimeLimit:
    """One pool's limits: ``default_s`` for work that declares none, ``max_s`` at most."""

    default_s: int = DEFAULT_TIME_LIMIT_S
    max_s: int = DEFAULT_MAX_TIME_LIMIT_S

    def __post_init__(self) -> None:
        if not 1 <= self.default_s <= self.max_s <= TIME_LIMIT_CAP_S:
            raise ValueError(
                f"time limits: need 1 <= default ({self.default_s} s) <= max ({self.max_s} s) "
                f"<= {TIME_LIMIT_CAP_S} s"
            )


@dataclass(frozen=True, slots=True)
class TimeLimits:
    """The limits of every pool: ``default`` for a pool not named in ``pools``."""

    default: TimeLimit = field(default_factory=TimeLimit)
    pools: tuple[tuple[str, TimeLimit], ...] = ()

    def of(self, pool: str) -> TimeLimit:
        for name, limit in self.pools:
            if name == pool:
                return limit
        return self.default


def resolve(requested: int | None, min_runtime_s: int, limit: TimeLimit) -> int:
    """A run's limit in a pool: what the workload asked for (the pool's default when nothing),
    at most the pool's maximum, and never below its contract (a run protected for
    ``min_runtime_s`` is not stopped before; the API refuses to accept less)."""
    chosen = limit.default_s if requested is None else requested
    return max(min_runtime_s, min(chosen, limit.max_s))


def limit_s(workload: WorkloadState, pool: str, limits: TimeLimits) -> int:
    """How long a run of ``workload`` in ``pool`` may last, from its start."""
    return resolve(workload.time_limit_s, workload.min_runtime_s, limits.of(pool))


def expected_end(workload: WorkloadState, limits: TimeLimits, now: float) -> float | None:
    """When the current run of ``workload`` is over at the latest: its start plus its limit (a
    placed run not started yet is taken to start at ``now``); never before ``now`` (a run past
    its limit is being stopped). None for work that holds no GPUs (pending, ended)."""
    if workload.status not in ("placed", "running") or workload.pool is None:
        return None
    start = workload.started_at if workload.started_at is not None else now
    return max(now, start + limit_s(workload, workload.pool, limits))


def refusal(
    requested: int | None, min_runtime_s: int, pools: tuple[str, ...], limits: TimeLimits
) -> str | None:
    """Why a submission's ``time_limit_s`` cannot be granted in all of its ``pools`` (None when
    it can): above a pool's maximum, or below the workload's own ``min_runtime_s``."""
    if requested is None:
        return None
    if requested < min_runtime_s:
        return (
            f"time_limit_s ({requested} s) is below min_runtime_s ({min_runtime_s} s): a run is "
            "never stopped inside its contract"
        )
    for pool in pools:
        maximum = limits.of(pool).max_s
        if requested > maximum:
            return f"time_limit_s ({requested} s) is above pool {pool!r}'s maximum ({maximum} s)"
    return None
