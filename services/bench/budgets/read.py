"""How long ``GET /budgets``' read of the read models takes, at two history sizes.

The read (:func:`services.reports.window.window_figures`, what ``/budgets`` and the dashboard
ask) must depend on the window, not on the history before it: the bench writes the same last
week at both sizes and only more weeks of older charges, runs and demand in front of it, then
times the read and prints both figures and their ratio (about 1 when history does not count).
"""

from __future__ import annotations

import statistics
import time
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, create_engine, insert

from events.times import HOUR, WEEK
from projections.figures import Bins
from services.read_models.migrate import migrate
from services.read_models.tables import (
    budget_weights,
    budgets,
    demand_intervals,
    ledger_entries,
    node_states,
    runs,
)
from services.reports.window import window_figures

NOW = 1_800_000_000
LEAVES = ("lab/a", "lab/b", "lab/c")
POOL = "bench"


def _history(engine: Engine, weeks: int, runs_per_hour: int) -> int:
    """``weeks`` weeks of hourly runs before now (the last one is the window); returns the
    number of ledger rows."""
    rows: dict[str, list[dict[str, Any]]] = {"ledger": [], "runs": [], "demand": []}
    start = NOW - weeks * WEEK
    for hour in range(start // HOUR, NOW // HOUR):
        for i in range(runs_per_hour):
            workload = f"w-{hour}-{i}"
            budget = LEAVES[i % len(LEAVES)]
            at = hour * HOUR
            rows["ledger"].append(
                {
                    "charge_id": f"charge:{workload}:1:{at}:0",
                    "workload_id": workload,
                    "budget": budget,
                    "pool": POOL,
                    "bucket_start": at,
                    "kind": "allocated",
                    "debit_account": f"budget:{budget}",
                    "credit_account": f"capacity:{POOL}",
                    "gpu_seconds": 2 * HOUR,
                    "amount": 2 * HOUR,
                    "corrects": None,
                    "event_id": workload,
                    "event_time": at + HOUR,
                    "attempt": 1,
                }
            )
            rows["runs"].append(
                {
                    "workload_id": workload,
                    "attempt": 1,
                    "pool": POOL,
                    "budget": budget,
                    "allocated": True,
                    "gpus": 2,
                    "started_at": at,
                    "ended_at": at + HOUR,
                    "charged_until": at + HOUR,
                    "settled": True,
                }
            )
            rows["demand"].append(
                {
                    "workload_id": workload,
                    "seq": 1,
                    "pool": POOL,
                    "budget": budget,
                    "gpus": 2,
                    "start_at": at - 600,
                    "end_at": at + HOUR,
                }
            )
    with engine.begin() as connection:
        connection.execute(insert(ledger_entries), rows["ledger"])
        connection.execute(insert(runs), rows["runs"])
        connection.execute(insert(demand_intervals), rows["demand"])
    return len(rows["ledger"])


def _lab(engine: Engine, since: int) -> None:
    with engine.begin() as connection:
        for name, weight in (("lab", 1.0), *((leaf, 1.0) for leaf in LEAVES)):
            connection.execute(
                insert(budgets).values(
                    budget=name, weight=weight, pool_weights={}, created_at=since, closed_at=None
                )
            )
            connection.execute(
                insert(budget_weights).values(
                    event_id=f"w-{name}", pool="", budget=name, weight=weight, effective_at=since
                )
            )
        for n in range(16):
            connection.execute(
                insert(node_states).values(
                    event_id=f"n-{n}",
                    node=f"n{n}",
                    pool=POOL,
                    gpus=8,
                    state="up",
                    effective_at=since,
                )
            )


def _time_read(engine: Engine, repeats: int) -> list[float]:
    bins = Bins.one(float((NOW - WEEK) // HOUR * HOUR), float(NOW))
    out = []
    for _ in range(repeats):
        began = time.perf_counter()
        window_figures(engine, bins)
        out.append(time.perf_counter() - began)
    return out


def budgets_read_benchmark(
    workdir: Path, small_weeks: int = 2, large_weeks: int = 26, runs_per_hour: int = 6
) -> dict[str, object]:
    figures: dict[str, object] = {}
    for label, weeks in (("small", small_weeks), ("large", large_weeks)):
        path = workdir / f"budgets-{label}.db"
        path.unlink(missing_ok=True)
        engine = create_engine(f"sqlite:///{path}")
        migrate(engine)
        _lab(engine, NOW - weeks * WEEK - HOUR)
        rows = _history(engine, weeks, runs_per_hour)
        samples = _time_read(engine, 15)
        engine.dispose()
        figures[label] = {
            "weeks": weeks,
            "ledger_rows": rows,
            "ledger_rows_in_window": WEEK // HOUR * runs_per_hour,
            "p50_ms": round(statistics.median(samples) * 1000, 2),
            "max_ms": round(max(samples) * 1000, 2),
        }
    small, large = figures["small"], figures["large"]
    assert isinstance(small, dict)
    assert isinstance(large, dict)
    figures["ratio_large_over_small"] = round(large["p50_ms"] / small["p50_ms"], 3)
    return figures
