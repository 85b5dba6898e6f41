"""The simulator's metrics say what the read models say of the log it writes: the same
delivered and owed per budget, from the one computation (:mod:`projections.figures`)."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from sqlalchemy import create_engine

from events.envelope import Envelope, derived_event_id, new_event
from events.models import EventData
from events.times import HOUR
from projections.figures import Bins
from scheduling.scheduling_pass import run_pass
from services.devtools.demo_data import project
from services.read_models.migrate import migrate
from services.reports.window import window_figures
from services.simulator.engine import POOL, Simulation, SimulationConfig
from services.simulator.metrics import compute_metrics
from services.simulator.trace import TraceJob

T0 = 1_505_000_000.0
WEIGHTS = {"a": 1.0, "b": 1.0, "c": 2.0}


def _jobs() -> list[TraceJob]:
    jobs = []
    for i in range(36):
        budget = "abc"[i % 3]
        gpus = (1, 2, 4, 8)[i % 4]
        jobs.append(TraceJob(f"j{i:03d}", T0 + 600 * i, 1800 + 900 * (i % 7), gpus, budget))
    return sorted(jobs, key=lambda j: (j.arrival, j.job_id))


def test_the_simulators_delivered_and_owed_are_the_read_models(tmp_path: Path) -> None:
    log: list[Envelope[Any]] = []

    def record(data: EventData, at: float) -> None:
        source = "fairshare/simulator/test"
        time = datetime.fromtimestamp(at, UTC)
        event_id = derived_event_id(source, str(len(log)))
        log.append(new_event(data, source=source, time=time, event_id=event_id))

    simulation = Simulation(_jobs(), WEIGHTS, SimulationConfig(gpus=16), run_pass, recorder=record)
    outcome = simulation.run()
    metrics = compute_metrics(outcome)
    engine = create_engine(f"sqlite:///{tmp_path / 'rm.db'}")
    migrate(engine)
    project(engine, log)
    first = int(outcome.start) // HOUR * HOUR
    read = window_figures(engine, Bins((float(first), outcome.end), outcome.end))
    figures = read.pools[POOL]
    checked = 0
    for budget, row in metrics["budgets"].items():
        series = figures.budgets[budget]
        owed, delivered = row["owed_gpu_hours"] * HOUR, row["delivered_gpu_hours"] * HOUR
        assert abs(series.owed_total - owed) <= 0.005 * max(owed, 1.0), budget
        assert abs(series.delivered_total - delivered) <= 0.005 * max(delivered, 1.0), budget
        checked += owed > 0
    assert checked == 3, "every budget was owed something"
    engine.dispose()
