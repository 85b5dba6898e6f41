"""A synthetic big-gang scenario: many small tenants whose work is all gangs, beside a stream of
small jobs, at a stated demand over capacity.

The project's own trace (Philly, 2017) is mostly 1- to 8-GPU work; a large GPU datacenter's
is not: most of its GPU-hours are gangs of 16 to 160 GPUs, and many of its tenants are owed
less than one run of their smallest gang in a week. Fair share is lumpy there, and a rule
tuned on small work can break on it. This generator puts that regime into the project's own
tests and into ``fairshare simulate --synthetic``, so it cannot regress unseen.

What it draws (all from ``seed``; the same parameters give the same jobs):

* ``gang_tenants`` tenants whose jobs are all gangs: each has one gang size, drawn from
  ``GANG_SIZES`` (small gangs for most tenants, a few with gangs of up to 160 GPUs), runs of
  one to twelve hours (log-uniform), and a share of the scenario's demand drawn log-uniform
  over two orders of magnitude: many tenants are owed less in a week than one of their runs
  costs;
* ``small_tenants`` tenants with a stream of small jobs: debug jobs of 1 GPU and a few minutes
  (a quarter), and runs of 1 to 8 GPUs for 30 minutes to 8 hours;
* arrivals: a Poisson process per tenant over ``days``, so that all demand together is
  ``demand`` times the capacity (``gpus`` GPUs for ``days`` days); gangs are about
  ``gang_fraction`` of the GPU-hours;
* weights: each tenant's share of the demand (as the datacenter's tenants were weighted),
  rounded to whole numbers (at least 1).
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from datetime import UTC, datetime

from events.times import DAY, HOUR
from services.simulator.trace import TraceJob

#: Gang sizes of the gang tenants, and how likely each is (most tenants run small gangs).
GANG_SIZES: tuple[tuple[int, float], ...] = (
    (8, 0.30),
    (16, 0.25),
    (32, 0.2),
    (64, 0.13),
    (128, 0.08),
    (160, 0.04),
)
#: GPUs of a small tenant's jobs (not debug), equally likely; the part of its jobs that are
#: debug jobs (1 GPU, 1 to 15 minutes).
_SMALL_GPUS = (1, 2, 4, 8)
_DEBUG_PART = 0.25
#: Where a scenario starts (a Monday, 00:00 UTC): weeks of the metrics then start on hours.
START = datetime(2026, 3, 2, tzinfo=UTC).timestamp()


@dataclass(frozen=True)
class SyntheticScenario:
    gpus: int = 296
    gpus_per_node: int = 8
    days: float = 14.0
    #: Total demand over capacity, GPU-hours asked for / GPU-hours the cluster has.
    demand: float = 2.5
    gang_tenants: int = 60
    small_tenants: int = 20
    #: Part of all demanded GPU-hours that is gangs.
    gang_fraction: float = 0.6
    seed: int = 0

    def __post_init__(self) -> None:
        if self.gpus < self.gpus_per_node or self.gpus % self.gpus_per_node:
            raise ValueError("gpus must be a positive multiple of gpus_per_node")
        if not (self.days > 0 and self.demand > 0 and 0 <= self.gang_fraction <= 1):
            raise ValueError("days and demand must be positive, gang_fraction in [0, 1]")
        if self.gang_tenants < 0 or self.small_tenants < 0:
            raise ValueError("tenant counts must not be negative")
        if self.gang_tenants + self.small_tenants == 0:
            raise ValueError("a scenario needs at least one tenant")

    def describe(self) -> str:
        return (
            f"synthetic (seed {self.seed}): {self.gang_tenants} tenants of gangs of "
            f"{min(s for s, _ in GANG_SIZES)}-{max(s for s, _ in GANG_SIZES)} GPUs and "
            f"{self.small_tenants} of 1-8 GPU jobs over {self.days:g} days, demand "
            f"{self.demand:g}x capacity, {self.gang_fraction:.0%} of it gangs"
        )


@dataclass(frozen=True)
class _Tenant:
    name: str
    #: GPU-hours this tenant asks for over the scenario.
    demand_gpu_h: float
    gang: int  # 0: a small-jobs tenant


def generate(scenario: SyntheticScenario) -> tuple[list[TraceJob], dict[str, float]]:
    """The scenario's jobs (sorted by arrival) and its budget weights."""
    rng = random.Random(scenario.seed)
    capacity_gpu_h = scenario.gpus * scenario.days * DAY / HOUR
    total = capacity_gpu_h * scenario.demand
    fraction = scenario.gang_fraction if scenario.small_tenants else 1.0
    fraction = fraction if scenario.gang_tenants else 0.0
    biggest = scenario.gpus  # a gang never asks for more than the whole cluster
    sizes = [s for s, _ in GANG_SIZES if s <= biggest] or [scenario.gpus_per_node]
    weights = [w for s, w in GANG_SIZES if s <= biggest] or [1.0]
    tenants = _tenants(rng, "g", scenario.gang_tenants, total * fraction, sizes, weights)
    tenants += _tenants(rng, "s", scenario.small_tenants, total * (1 - fraction), [0], [1.0])
    jobs: list[TraceJob] = []
    period_s = scenario.days * DAY
    for tenant in tenants:
        jobs += _jobs_of(rng, tenant, period_s)
    jobs.sort(key=lambda j: (j.arrival, j.job_id))
    jobs = [
        TraceJob(f"job-{i + 1:06d}", j.arrival, j.duration, j.gpus, j.budget)
        for i, j in enumerate(jobs)
    ]
    asked: dict[str, float] = {}
    for job in jobs:
        asked[job.budget] = asked.get(job.budget, 0.0) + job.gpus * job.duration
    whole = sum(asked.values()) or 1.0
    budget_weights = {
        budget: float(max(1, round(1000 * gpu_s / whole)))
        for budget, gpu_s in sorted(asked.items())
    }
    return jobs, budget_weights


def _tenants(
    rng: random.Random,
    prefix: str,
    count: int,
    demand_gpu_h: float,
    sizes: list[int],
    size_weights: list[float],
) -> list[_Tenant]:
    if count == 0:
        return []
    # Shares log-uniform over two orders of magnitude: a few big tenants, many small ones.
    raw = [math.exp(rng.uniform(0.0, math.log(100.0))) for _ in range(count)]
    whole = sum(raw)
    return [
        _Tenant(
            f"{prefix}{i:03d}",
            demand_gpu_h * r / whole,
            rng.choices(sizes, size_weights)[0] if sizes != [0] else 0,
        )
        for i, r in enumerate(raw)
    ]


def _jobs_of(rng: random.Random, tenant: _Tenant, period_s: float) -> list[TraceJob]:
    """Poisson arrivals whose expected GPU-hours over the period are the tenant's demand."""
    jobs: list[TraceJob] = []
    mean_gpu_h = _mean_job_gpu_h(tenant.gang)
    rate = tenant.demand_gpu_h / mean_gpu_h / period_s  # jobs per second
    at = rng.expovariate(rate)
    while at < period_s:
        gpus, duration = _job_shape(rng, tenant.gang)
        jobs.append(TraceJob(f"{tenant.name}-{len(jobs)}", START + at, duration, gpus, tenant.name))
        at += rng.expovariate(rate)
    return jobs


def _job_shape(rng: random.Random, gang: int) -> tuple[int, float]:
    if gang:
        return gang, _log_uniform(rng, HOUR, 12 * HOUR)
    if rng.random() < _DEBUG_PART:
        return 1, rng.uniform(60.0, 15 * 60.0)  # a debug job
    return rng.choice(_SMALL_GPUS), _log_uniform(rng, 30 * 60.0, 8 * HOUR)


def _mean_job_gpu_h(gang: int) -> float:
    """Expected GPU-hours of one job of the tenant (for its arrival rate)."""
    if gang:
        return gang * _log_uniform_mean(HOUR, 12 * HOUR) / HOUR
    mean_gpus = sum(_SMALL_GPUS) / len(_SMALL_GPUS)
    long = mean_gpus * _log_uniform_mean(30 * 60.0, 8 * HOUR) / HOUR
    debug = 1 * (60.0 + 15 * 60.0) / 2 / HOUR
    return (1 - _DEBUG_PART) * long + _DEBUG_PART * debug


def _log_uniform(rng: random.Random, low: float, high: float) -> float:
    return math.exp(rng.uniform(math.log(low), math.log(high)))


def _log_uniform_mean(low: float, high: float) -> float:
    return (high - low) / math.log(high / low)
