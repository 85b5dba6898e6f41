"""A log longer than the live fold remembers re-derives pass for pass.

``LiveState`` (the fold of the live scheduler and of ``fairshare audit decisions``) forgets
ended work a window and a day after it ended, once a day of event time; the simulator's fold
never forgets. The debug lane's index, one of the memos kept from pass to pass, found the
workloads submitted since its last pass by counting them (the last ``len - seen`` of the
state's workloads), which a forget breaks: after the first forget it missed the next lane jobs,
so the warm audit (and the live scheduler) held no lane reserve for them and placed other work
on it, where the simulator, and any pass given fresh memos, did not. On the Helios Earth month
this was 68 violations in 22 passes, all after day 9; shorter logs (every other audit test) never
reach a forget. The scenario below is shaped like that trace: arrivals at whole minutes with
many jobs at one instant, a tenant sending floods of one-GPU jobs of one or two minutes (debug
lane work), gangs of whole nodes, nodes sent for repair, for eleven days on a small cluster."""

from __future__ import annotations

import random
from datetime import UTC, datetime
from typing import Any

from events.envelope import Envelope, derived_event_id, new_event
from events.models import EventData, PlaceCommand
from events.times import DAY, HOUR
from projections.live_state import FORGET_AFTER_S, LiveState
from scheduling.scheduling_pass import run_pass
from services.audit.decisions import audit_decisions
from services.simulator.engine import Simulation, SimulationConfig
from services.simulator.maintenance import MaintenanceConfig
from services.simulator.trace import TraceJob

T0 = 1_588_291_200  # 2020-05-01T00:00:00Z, a whole day
DAYS = 11
WEIGHTS = {"debug": 1.0, "gangs": 2.0, "small": 1.0}

Log = list[Envelope[Any]]


def earth_like_jobs(seed: int = 1) -> list[TraceJob]:
    """About 35 jobs a day at whole minutes: floods of 1-2 minute one-GPU jobs at one
    instant, gangs of 8-16 GPUs for hours, single-node work of an hour or two."""
    rng = random.Random(seed)
    jobs: list[TraceJob] = []

    def job(at: float, duration: float, gpus: int, budget: str) -> None:
        jobs.append(TraceJob(f"job-{len(jobs):05d}", at, duration, gpus, budget))

    for day in range(DAYS):
        for _ in range(8):
            at = T0 + day * DAY + 60 * rng.randrange(24 * 60)
            for _ in range(rng.randint(2, 5)):  # a flood, all at one instant
                job(at, 60.0 * rng.randint(1, 2), 1, "debug")
        for _ in range(3):
            at = T0 + day * DAY + 60 * rng.randrange(24 * 60)
            job(at, rng.choice([2, 4, 8]) * HOUR, 8 * rng.randint(1, 2), "gangs")
        for _ in range(4):
            at = T0 + day * DAY + 60 * rng.randrange(24 * 60)
            job(at, rng.choice([1, 2]) * HOUR, rng.choice([1, 2, 4]), "small")
    jobs.sort(key=lambda j: (j.arrival, j.job_id))
    return jobs


def simulated(jobs: list[TraceJob]) -> Log:
    log: Log = []

    def record(data: EventData, at: float) -> None:
        log.append(
            new_event(
                data,
                source="sim",
                time=datetime.fromtimestamp(at, UTC),
                event_id=derived_event_id("sim", str(len(log))),
            )
        )

    config = SimulationConfig(
        gpus=24, maintenance=MaintenanceConfig(rate=0.1, seed=1, repair_s=2 * 3600)
    )
    Simulation(jobs, WEIGHTS, config, run_pass, recorder=record).run()
    return log


def test_a_log_past_the_folds_memory_re_derives_pass_for_pass() -> None:
    log = simulated(earth_like_jobs())
    span = log[-1].epoch_seconds - log[0].epoch_seconds
    assert span > FORGET_AFTER_S + DAY, "the audit's fold must forget along the log"
    fold = LiveState()
    for envelope in log:
        fold.apply(envelope)
    assert fold.forgotten > 0
    audit = audit_decisions(log)
    assert audit.passes > 100
    assert sum(isinstance(e.data, PlaceCommand) for e in log) > 300
    assert audit.problems == []
    assert audit.ok
