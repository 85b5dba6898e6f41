"""``fairshare bench audit-decisions``: the decision audit against the simulation whose log it
audits, in one run.

A slice of a trace is simulated with the fair-share core and a recorder that keeps the run's
event log in memory (the envelopes ``fairshare simulate --events-out`` writes, undecoded);
then :func:`services.audit.decisions.audit_decisions` re-derives every pass of that log. Both
are timed (wall and process CPU): the target is an audit that takes at most twice the
simulation, since it runs every pass again on state it folds from the log.

``--offset`` skips the first jobs of the trace, so slices the project did not tune on can be
audited too.
"""

from __future__ import annotations

import gc
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

from events.envelope import Envelope, derived_event_id, new_event
from events.models import EventData
from scheduling.scheduling_pass import run_pass
from services.audit.decisions import DecisionAudit, audit_decisions
from services.simulator.engine import Simulation, SimulationConfig
from services.simulator.trace import DEVELOPMENT_TRACES, load_budgets, load_trace

T = TypeVar("T")

#: The source of the fair-share run's events, as ``services.simulator.runner`` names it.
SOURCE = "fairshare/simulator/fairshare"
#: The audit may take at most this many times the simulation it audits.
TARGET_RATIO = 2.0
#: Violations quoted in the figures (all of them are counted).
QUOTED_PROBLEMS = 10


@dataclass(frozen=True)
class AuditDecisionsConfig:
    trace: Path = DEVELOPMENT_TRACES / "philly-2017-09.csv"
    budgets: Path = DEVELOPMENT_TRACES / "philly-budgets.csv"
    jobs: int = 1000
    offset: int = 0
    gpus: int = 64
    gpus_per_node: int = 8


@dataclass(frozen=True)
class _Timed:
    wall_s: float
    cpu_s: float


def memory_recorder(log: list[Envelope[Any]]) -> Callable[[EventData, float], None]:
    """A simulation recorder that appends to ``log`` the envelopes the simulator's runner
    (``services.simulator.runner._recorder``) writes to a file: same source, same times, same
    derived ids (numbered from 1)."""

    def record(data: EventData, at: float) -> None:
        log.append(
            new_event(
                data,
                source=SOURCE,
                time=datetime.fromtimestamp(at, UTC),
                event_id=derived_event_id(SOURCE, str(len(log) + 1)),
            )
        )

    return record


def _timed(work: Callable[[], T]) -> tuple[T, _Timed]:
    wall, cpu = time.perf_counter(), time.process_time()
    result = work()
    return result, _Timed(time.perf_counter() - wall, time.process_time() - cpu)


def audit_decisions_benchmark(config: AuditDecisionsConfig) -> dict[str, Any]:
    """Simulate ``config``'s slice, audit its log; the figures as one JSON-ready dict (``ok``
    false when the audit found a violation or a bad line)."""
    if config.jobs < 1 or config.offset < 0:
        raise ValueError("--jobs must be at least 1 and --offset at least 0")
    jobs = load_trace(config.trace)[config.offset : config.offset + config.jobs]
    if not jobs:
        raise ValueError(f"--offset {config.offset}: the trace has no job past it")
    weights = load_budgets(config.budgets)
    sim_config = SimulationConfig(gpus=config.gpus, gpus_per_node=config.gpus_per_node)
    log: list[Envelope[Any]] = []
    gc.collect()
    # Building the simulation records the budgets and the nodes: timed with the run.
    outcome, simulated = _timed(
        lambda: Simulation(jobs, weights, sim_config, run_pass, recorder=memory_recorder(log)).run()
    )
    gc.collect()
    audit, audited = _timed(lambda: audit_decisions(log))
    return {
        "trace": config.trace.name,
        "offset": config.offset,
        "jobs": len(jobs),
        "gpus": config.gpus,
        "gpus_per_node": config.gpus_per_node,
        **_figures(audit, outcome.passes, simulated, audited),
    }


def _figures(
    audit: DecisionAudit, simulation_passes: int, sim: _Timed, aud: _Timed
) -> dict[str, Any]:
    """The audit's counts and both timings."""
    per_s = audit.events / aud.wall_s if aud.wall_s > 0 else 0.0
    ratio = aud.wall_s / sim.wall_s if sim.wall_s > 0 else 0.0
    return {
        "events": audit.events,
        "simulation_passes": simulation_passes,
        "passes": audit.passes,
        "commands": audit.commands,
        "preemptions": audit.preemptions,
        "violations": len(audit.problems),
        "bad_lines": len(audit.bad_lines),
        "standings_differ": audit.standings_differ,
        "ok": audit.ok,
        "problems": [str(p) for p in audit.problems[:QUOTED_PROBLEMS]],
        "simulation_wall_s": round(sim.wall_s, 4),
        "simulation_cpu_s": round(sim.cpu_s, 4),
        "audit_wall_s": round(aud.wall_s, 4),
        "audit_cpu_s": round(aud.cpu_s, 4),
        "audit_over_simulation": round(ratio, 3),
        "audit_over_simulation_cpu": round(aud.cpu_s / sim.cpu_s if sim.cpu_s > 0 else 0.0, 3),
        "target_ratio": TARGET_RATIO,
        "within_target": ratio <= TARGET_RATIO,
        "audit_events_per_s": round(per_s),
        "audit_s_per_million_events": round(1e6 / per_s, 2) if per_s else None,
    }
