"""Reading job traces and budget weights, and assigning contracts to traced jobs.

Traces (``timestamp,duration,num_gpus,gpu_time,cluster``, one row per job, sorted by arrival;
optionally ``time_limit_s``, the limit the job's submitter asked for) carry no contract; the
:class:`ContractRule` states how a replay assigns one, so that anyone rerunning the simulator on
another trace knows what was assumed.
"""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

DEVELOPMENT_TRACES = Path(__file__).resolve().parents[2] / "data" / "traces"
"""The Philly trace and its budgets as kept in the repository (``data/traces``), for the tests,
the benchmarks and the README's examples. Present in a source checkout, not in a wheel."""
PHILLY_TRACE = DEVELOPMENT_TRACES / "philly-2017-09.csv"
PHILLY_BUDGETS = DEVELOPMENT_TRACES / "philly-budgets.csv"


class TraceError(ValueError):
    pass


@dataclass(frozen=True, slots=True)
class TraceJob:
    job_id: str
    arrival: float  # epoch seconds, UTC
    duration: float  # seconds of run time it needs
    gpus: int
    budget: str
    #: Traces say nothing of it; every traced job is taken to resume from its checkpoints.
    resumable: bool = True
    #: The limit its submitter asked for, where the trace says (a ``time_limit_s`` column);
    #: else ``limits.TimeLimitRule`` gives one.
    time_limit_s: float | None = None


@dataclass(frozen=True)
class ContractRule:
    """Debug jobs (<= ``debug_max_gpus`` GPUs, <= ``debug_max_s`` long) get a contract equal to
    their duration (so 0-15 min) and ``debug_priority`` within their budget (a lab's debug
    queue: priority orders work within one budget only); other jobs get ``min(duration, cap_s)``
    and priority 0."""

    debug_max_gpus: int = 1
    debug_max_s: float = 15 * 60
    cap_s: float = 3600
    debug_priority: int = 1

    def priority(self, job: TraceJob) -> int:
        return self.debug_priority if self.is_debug(job) else 0

    def is_debug(self, job: TraceJob) -> bool:
        return job.gpus <= self.debug_max_gpus and job.duration <= self.debug_max_s

    def min_runtime_s(self, job: TraceJob) -> int:
        if self.is_debug(job):
            return max(1, math.ceil(job.duration))
        return max(1, math.ceil(min(job.duration, self.cap_s)))

    def describe(self) -> str:
        return (
            f"jobs of <= {self.debug_max_gpus} GPU and <= {self.debug_max_s / 60:g} min are debug "
            f"jobs with a contract of their duration and priority {self.debug_priority} within "
            f"their budget; others get min(duration, {self.cap_s / 3600:g} h) and priority 0"
        )


def _parse_time(text: str, where: str) -> float:
    try:
        return datetime.fromisoformat(text).replace(tzinfo=UTC).timestamp()
    except ValueError:
        raise TraceError(f"{where}: timestamp {text!r} is not 'YYYY-MM-DD HH:MM:SS'") from None


def _time_limit(row: dict[str, str], where: str) -> float | None:
    """The optional ``time_limit_s`` column: seconds, or empty where the job stated none."""
    text = (row.get("time_limit_s") or "").strip()
    if not text:
        return None
    try:
        value = float(text)
    except ValueError:
        raise TraceError(f"{where}: time_limit_s must be a number of seconds") from None
    if not value > 0 or not math.isfinite(value):
        raise TraceError(f"{where}: time_limit_s must be > 0")
    return value


def load_trace(path: Path, limit: int | None = None) -> list[TraceJob]:
    required = {"timestamp", "duration", "num_gpus", "cluster"}
    jobs: list[TraceJob] = []
    with path.open(newline="") as handle:
        reader = csv.DictReader(handle)
        missing = required - set(reader.fieldnames or ())
        if missing:
            raise TraceError(f"{path}: missing column(s) {', '.join(sorted(missing))}")
        for line, row in enumerate(reader, start=2):
            where = f"{path}:{line}"
            try:
                duration = float(row["duration"])
                gpus = int(float(row["num_gpus"]))
            except ValueError:
                raise TraceError(f"{where}: duration and num_gpus must be numbers") from None
            if duration <= 0 or gpus < 1:
                raise TraceError(f"{where}: duration must be > 0 and num_gpus >= 1")
            budget = row["cluster"].strip()
            if not budget:
                raise TraceError(f"{where}: empty cluster (budget)")
            jobs.append(
                TraceJob(
                    f"job-{line - 1:06d}",
                    _parse_time(row["timestamp"], where),
                    duration,
                    gpus,
                    budget,
                    time_limit_s=_time_limit(row, where),
                )
            )
            if limit is not None and len(jobs) >= limit:
                break
    jobs.sort(key=lambda j: (j.arrival, j.job_id))
    return jobs


def load_budgets(path: Path) -> dict[str, float]:
    weights: dict[str, float] = {}
    with path.open(newline="") as handle:
        reader = csv.DictReader(handle)
        if not {"budget", "weight"} <= set(reader.fieldnames or ()):
            raise TraceError(f"{path}: needs columns budget,weight")
        for line, row in enumerate(reader, start=2):
            try:
                weight = float(row["weight"])
            except ValueError:
                raise TraceError(f"{path}:{line}: weight must be a number") from None
            if not weight > 0:
                raise TraceError(f"{path}:{line}: weight must be positive")
            weights[row["budget"].strip()] = weight
    if not weights:
        raise TraceError(f"{path}: no budgets")
    return weights
