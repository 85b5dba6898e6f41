"""The read models' side of :mod:`projections.figures`: one pool's history over a range, read
by the range alone.

Every surface that shows delivered and owed from the read models (the API's ``/budgets``, so
``fairshare share`` and the dashboard's table; the dashboard's timeline; the charges report)
gathers its :class:`~projections.figures.PoolHistory` here and asks
:func:`projections.figures.pool_figures`. Each query reads what overlaps the range (charges of
its hours, demand intervals and node states that overlap it, the runs whose charges do not
reach their end yet), so a read does not grow with the history before the range; and when
the bins are cut on hours, whole hours come summed as the projector keeps them
(:mod:`services.reports.summed_hours`), so it does not grow with what ran in the range either.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from sqlalchemy import Connection, Engine

from events.times import HOUR
from projections.budget_tree import BudgetTree
from projections.figures import Bins, PoolFigures, PoolHistory, pool_figures
from services.reports.history import pool_histories
from services.reports.source import (
    Budget,
    WeightChange,
    horizon,
    positions,
    read_budgets,
    read_weights,
)
from services.reports.tree import build_tree, open_during


@dataclass(frozen=True)
class WindowFigures:
    """Every pool's figures over ``bins``, read at one log position."""

    bins: Bins
    #: The latest event time the read models hold (None: nothing yet).
    horizon: int | None
    log_position: str
    tree: BudgetTree
    pools: dict[str, PoolFigures]


def window_figures(
    engine: Engine,
    bins: Bins,
    *,
    pools: Iterable[str] | None = None,
    projector: str | None = None,
) -> WindowFigures:
    """Read the pools' histories over ``bins`` in one transaction and compute their figures."""
    with engine.connect() as connection:
        if connection.dialect.name == "postgresql":
            connection = connection.execution_options(isolation_level="REPEATABLE READ")
        with connection.begin():
            return figures_in(connection, bins, pools=pools, projector=projector)


def figures_in(
    connection: Connection,
    bins: Bins,
    *,
    pools: Iterable[str] | None = None,
    projector: str | None = None,
) -> WindowFigures:
    tree = read_tree(connection)
    lo, stop = bins.bounds[0], bins.stop
    histories = pool_histories(
        connection,
        lo,
        stop,
        summed=all(b % HOUR == 0 for b in bins.bounds if b < stop),
        share_changes=tree.change_times(lo, stop),
        bounds=bins.bounds,
    )
    wanted = sorted(histories) if pools is None else sorted(pools)
    leaves = [leaf for leaf in tree.leaves() if open_during(tree, leaf, bins.bounds[0], bins.stop)]
    figures = {
        pool: pool_figures(histories.get(pool, PoolHistory(pool)), tree, bins, leaves)
        for pool in wanted
    }
    where = positions(connection) if projector is None else positions(connection, projector)
    return WindowFigures(
        bins,
        horizon(connection),
        ";".join(f"{t}/{p}@{o}" for t, p, o in where),
        tree,
        figures,
    )


def read_tree(connection: Connection) -> BudgetTree:
    found: list[Budget] = read_budgets(connection)
    history: list[WeightChange] = read_weights(connection)
    return build_tree(found, history)
