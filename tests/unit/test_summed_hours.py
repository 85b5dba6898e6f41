"""Whole hours read summed (what the projector keeps per leaf and hour: ``hourly_usage``,
``demand_hours``, ``demand_levels``) give the figures that reading every charge and demand
interval gives, to the rounding of a float sum (so do the hour in progress and the runs whose
charges do not reach their end yet, for a read of one bin); and the histograms the projector
kept fact by fact, late facts included, are the ones built from the intervals afterwards
(migration 0005's backfill)."""

from __future__ import annotations

import itertools
import random
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from sqlalchemy import Engine, create_engine, delete, func, select

from events.envelope import Envelope, new_event
from events.models import BudgetWeightChanged, NodeDown, NodeUp, WorkloadRequeued
from events.times import DAY, HOUR
from projections.figures import Bins, PoolFigures, pool_figures
from services.devtools.demo_data import project, simulated_lab
from services.projector.sql_projector import _insert
from services.read_models.demand_upkeep import backfill
from services.read_models.migrate import migrate
from services.read_models.tables import demand_hours, demand_intervals, demand_levels
from services.reports.history import pool_histories
from services.reports.window import read_tree
from services.simulator.trace import DEVELOPMENT_TRACES


def _log(late: bool) -> list[Envelope[Any]]:
    """150 trace jobs on 16 GPUs (pending work, preemptions, requeues), a weight change and a
    node down and up mid-hour; ``late``: some workload facts delivered after later ones."""
    log = simulated_lab(DEVELOPMENT_TRACES, jobs=150, gpus=16)
    t0 = log[0].time
    node = next(e.data.node for e in log if type(e.data).__name__ == "NodeRegistered")
    extra = [
        (BudgetWeightChanged(budget="lab/vision", weight=5.0, changed_by="admin"), 50.4),
        (NodeDown(node=node), 75.25),
        (NodeUp(node=node), 80.6),
    ]
    log += [new_event(e, source="tests", time=t0 + timedelta(hours=h)) for e, h in extra]
    log.sort(key=lambda e: e.time)
    if late:
        rng = random.Random(5)
        for i in sorted(rng.sample(range(len(log)), 60), reverse=True):
            if (
                isinstance(log[i].data, WorkloadRequeued)
                or "Workload" in type(log[i].data).__name__
            ):
                log.insert(min(len(log), i + rng.randint(5, 200)), log.pop(i))
    return log


@pytest.fixture(scope="module", params=[False, True], ids=["in-order", "late-facts"])
def engine(request: pytest.FixtureRequest, tmp_path_factory: Any) -> Iterator[Engine]:
    path = tmp_path_factory.mktemp("summed") / "rm.db"
    engine = create_engine(f"sqlite:///{path}")
    migrate(engine)
    project(engine, _log(late=request.param))
    yield engine
    engine.dispose()


def _figures(engine: Engine, bins: Bins, *, summed: bool | str) -> dict[str, PoolFigures]:
    """``summed``: False (change by change), True (hour by hour) or "bins" (over each bin)."""
    with engine.connect() as connection:
        tree = read_tree(connection)
        lo, stop = bins.bounds[0], bins.stop
        histories = pool_histories(
            connection,
            lo,
            stop,
            summed=summed is not False,
            share_changes=tree.change_times(lo, stop),
            bounds=bins.bounds if summed == "bins" else None,
        )
        if summed:
            assert any(h.settled for h in histories.values()), "whole hours came summed"
        if summed == "bins" and bins.count == 1:
            assert not any(h.open_runs for h in histories.values()), "open runs came summed"
            hour = int(stop) // HOUR * HOUR
            SUMMED_NOW.append(any(s.start == hour for h in histories.values() for s in h.settled))
    return {pool: pool_figures(h, tree, bins, tree.leaves()) for pool, h in histories.items()}


#: Per read of one bin, whether its hour in progress came summed.
SUMMED_NOW: list[bool] = []


def _same(a: float, b: float) -> bool:
    return abs(a - b) <= 1e-6 * max(1.0, abs(a), abs(b))


def _ranges(engine: Engine) -> Iterator[Bins]:
    start = int(_first(engine))
    hour = start // HOUR * HOUR + HOUR
    yield Bins.one(float(hour), float(hour + 7 * DAY + 1234))  # /budgets: a week to mid-hour
    yield Bins(tuple(float(hour + i * HOUR) for i in range(200)), float(hour + 150 * HOUR + 77))
    yield Bins(tuple(float(hour + i * 6 * HOUR) for i in range(60)), float(hour + 20 * DAY))
    with engine.connect() as connection:
        last = int(connection.execute(select(func.max(demand_levels.c.since))).scalar_one())
    now = last + 3 * HOUR + 1234  # after the latest demand change, as /budgets reads live
    week = (now - 7 * DAY) // HOUR * HOUR
    yield Bins.one(float(week), float(now))
    yield Bins(tuple(float(week + i * HOUR) for i in range(7 * 24 + 1)), float(now))
    # the hour of the latest demand change, read just after it and at its end: charges of
    # runs that ended in it, demand kept in demand_hours and the level since
    for at in (last + 0.5, last // HOUR * HOUR + HOUR - 0.25, last + 17 * 60):
        if at > last:
            yield Bins.one(float((at - 7 * DAY) // HOUR * HOUR), float(at))


def _first(engine: Engine) -> int:
    with engine.connect() as connection:
        return int(connection.execute(select(func.min(demand_intervals.c.start_at))).scalar_one())


def test_summed_hours_give_the_figures_of_every_charge_and_interval(engine: Engine) -> None:
    for bins, summed in itertools.product(_ranges(engine), (True, "bins")):
        exact, other_pools = (
            _figures(engine, bins, summed=False),
            _figures(engine, bins, summed=summed),
        )
        assert set(exact) == set(other_pools)
        for pool, figures in exact.items():
            other = other_pools[pool]
            assert set(figures.budgets) == set(other.budgets)
            for budget, series in figures.budgets.items():
                for mine, theirs in zip(
                    series.columns(), other.budgets[budget].columns(), strict=True
                ):
                    assert all(_same(a, b) for a, b in zip(mine, theirs, strict=True)), (
                        pool,
                        budget,
                    )
            assert sum(figures.total.owed) > 0, "something was owed"


def test_the_hour_in_progress_comes_summed_where_nothing_changes_in_it(engine: Engine) -> None:
    """The reads of one bin after the latest demand change (/budgets as it reads live) sum
    the hour in progress; one behind the read models (a demand change after it) cannot."""
    SUMMED_NOW.clear()
    for bins in _ranges(engine):
        if bins.count == 1:
            _figures(engine, bins, summed="bins")
    assert SUMMED_NOW[0] is False, "a week to mid-hour, long before the latest change"
    assert all(SUMMED_NOW[1:]), SUMMED_NOW


def test_histograms_kept_fact_by_fact_are_those_built_from_the_intervals(engine: Engine) -> None:
    def rows() -> tuple[list[Any], list[Any]]:
        with engine.connect() as connection:
            return (
                sorted(tuple(r) for r in connection.execute(select(demand_hours))),
                sorted(tuple(r) for r in connection.execute(select(demand_levels))),
            )

    kept = rows()
    assert kept[0], "the projector kept histograms"
    with engine.begin() as connection:
        connection.execute(delete(demand_hours))
        connection.execute(delete(demand_levels))
        backfill(connection, _insert)
    assert rows() == kept
