"""Time limits for traced jobs: the trace's own where it has them, else a stated rule.

Traces record how long a job ran, rarely what its submitter asked for. A job the replay submits
needs a limit all the same (the agent stops it there; start estimates assume it), so the replay
asks for what a careful user would: the job's duration with ``headroom`` (a quarter more),
rounded up to whole ``round_s`` (quarter hours). A trace with a ``time_limit_s`` column gives
each job its own instead (``trace.py``); a job that runs past it is stopped there, as the agent
would stop it. The simulated pool's maximum is :data:`TIME_LIMIT_CAP_S`: no traced job is cut
by a maximum the trace's cluster did not have.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from events.types import DEFAULT_TIME_LIMIT_S, TIME_LIMIT_CAP_S
from scheduling.time_limits import TimeLimit, TimeLimits
from services.simulator.trace import TraceJob

#: The simulated pool's limits: the system default for work without one; any job may ask up to
#: the cap (Philly's longest job ran 54 days).
SIMULATED_LIMITS = TimeLimits(default=TimeLimit(DEFAULT_TIME_LIMIT_S, TIME_LIMIT_CAP_S))


@dataclass(frozen=True)
class TimeLimitRule:
    """The limit a traced job without one asks for: ``duration x headroom``, rounded up to a
    multiple of ``round_s``."""

    headroom: float = 1.25
    round_s: int = 15 * 60

    def __post_init__(self) -> None:
        if self.headroom < 1 or self.round_s < 1:
            raise ValueError("a time-limit rule needs headroom >= 1 and round_s >= 1")

    def limit_s(self, job: TraceJob) -> int:
        if job.time_limit_s is not None:
            return max(1, min(TIME_LIMIT_CAP_S, math.ceil(job.time_limit_s)))
        asked = math.ceil(job.duration * self.headroom / self.round_s) * self.round_s
        return max(self.round_s, min(TIME_LIMIT_CAP_S, asked))

    def describe(self) -> str:
        return (
            f"the trace's time_limit_s where given, else the duration x {self.headroom:g} "
            f"rounded up to {self.round_s / 60:g} min"
        )
