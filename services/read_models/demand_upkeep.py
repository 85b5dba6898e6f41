"""The projector's upkeep of ``demand_hours`` and ``demand_levels``: each leaf's demand as
seconds per level per hour (:mod:`projections.demand_hours`), kept in the transaction that
opens and closes its ``demand_intervals``.

A change at or after the leaf's latest one (the usual case: facts come in time order) closes
the stretch since then at the old level, hour by hour, and starts the new level. A change
before it (a late fact) shifts every level from then on, so the hours from its hour to the
latest change are rebuilt from the intervals, the very rows every reader reads. Either way the
histograms are a function of ``demand_intervals``: a redelivered batch repeats nothing (the
projector skips what it stored; a fact read twice changes no interval), a crash rolls both
back together, and the migration that introduced them builds them the same way from the log's
intervals.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

from sqlalchemy import Connection, bindparam, delete, func, select, update

from events.times import HOUR
from projections.demand_hours import by_hour, histogram
from projections.steps import Steps
from services.read_models.tables import demand_hours, demand_intervals, demand_levels, nodes

#: (pool, leaf budget, GPUs added or removed, at)
Change = tuple[str, str, int, int]


#: The demand changes of the transaction in progress, when it folds them at its end
#: (:func:`batched`); None: each is folded as it comes.
_PENDING: ContextVar[list[Change] | None] = ContextVar("demand_changes", default=None)


def apply_changes(connection: Connection, changes: Iterable[Change], insert: Any) -> None:
    """Fold demand changes into the histograms (at the end of the transaction, inside
    :func:`batched`); ``insert`` makes the dialect's INSERT (with ON CONFLICT) for a table."""
    pending = _PENDING.get()
    if pending is not None:
        pending.extend(change for change in changes if change[2])
        return
    for pool, budget, delta, at in changes:
        if delta:
            _change(connection, insert, pool, budget, delta, at)


@contextmanager
def batched(connection: Connection, insert: Any) -> Iterator[None]:
    """The demand changes made inside, folded once at the end, per leaf in time order: a
    leaf whose changes all come at or after its last is counted forward as before; one with a
    change before its last has its histograms rebuilt once, from the earliest. A projector
    catching up on a log reads each partition's facts in turn, out of time order across them,
    and rebuilt a leaf's histograms from every such change: its first start took longer the
    longer the history (the issue measured 740 facts/s on 217,000)."""
    pending: list[Change] = []
    token, registered = _PENDING.set(pending), _REGISTERED.set({})
    try:
        yield
        _fold(connection, insert, pending)
    finally:
        _PENDING.reset(token)
        _REGISTERED.reset(registered)


def _fold(connection: Connection, insert: Any, pending: list[Change]) -> None:
    by_leaf: dict[tuple[str, str], list[tuple[int, int]]] = {}
    for pool, budget, delta, at in pending:
        by_leaf.setdefault((pool, budget), []).append((at, delta))
    for (pool, budget), moves in sorted(by_leaf.items()):
        moves.sort(key=lambda move: move[0])  # stable: equal instants keep their order
        key = (demand_levels.c.pool == pool, demand_levels.c.budget == budget)
        row = connection.execute(
            select(demand_levels.c.level, demand_levels.c.since).where(*key)
        ).first()
        if row is None or moves[0][0] >= int(row.since):
            for at, delta in moves:
                _change(connection, insert, pool, budget, delta, at)
            continue
        since = max(int(row.since), moves[-1][0])
        level = int(row.level) + sum(delta for _, delta in moves)
        connection.execute(update(demand_levels).where(*key).values(level=level, since=since))
        rebuild(connection, insert, pool, budget, moves[0][0] // HOUR * HOUR, since)


def _change(
    connection: Connection, insert: Any, pool: str, budget: str, delta: int, at: int
) -> None:
    key = (demand_levels.c.pool == pool, demand_levels.c.budget == budget)
    row = connection.execute(
        select(demand_levels.c.level, demand_levels.c.since).where(*key)
    ).first()
    if row is None:
        statement = insert(connection, demand_levels).values(
            pool=pool, budget=budget, level=delta, since=at
        )
        connection.execute(statement)
        return
    level, since = int(row.level), int(row.since)
    if at >= since:
        _count(connection, insert, pool, budget, level, since, at)
        connection.execute(update(demand_levels).where(*key).values(level=level + delta, since=at))
        return
    connection.execute(update(demand_levels).where(*key).values(level=level + delta))
    rebuild(connection, insert, pool, budget, at // HOUR * HOUR, since)


def _count(
    connection: Connection, insert: Any, pool: str, budget: str, level: int, lo: int, hi: int
) -> None:
    if not level or hi <= lo:
        return
    rows = [
        {"pool": pool, "budget": budget, "hour": hour, "level": level, "seconds": seconds}
        for hour, seconds in by_hour(lo, hi)
    ]
    statement = insert(connection, demand_hours)
    statement = statement.on_conflict_do_update(
        index_elements=["pool", "budget", "hour", "level"],
        set_={"seconds": demand_hours.c.seconds + statement.excluded.seconds},
    )
    connection.execute(statement, rows)


def rebuild(connection: Connection, insert: Any, pool: str, budget: str, lo: int, hi: int) -> None:
    """The histograms of ``[lo, hi)`` (``lo`` on an hour) again, from the intervals."""
    connection.execute(
        delete(demand_hours).where(
            demand_hours.c.pool == pool,
            demand_hours.c.budget == budget,
            demand_hours.c.hour >= lo,
            demand_hours.c.hour < hi,
        )
    )
    found = histogram(level_steps(connection, pool, budget, lo), lo, hi)
    rows = [
        {"pool": pool, "budget": budget, "hour": hour, "level": level, "seconds": seconds}
        for hour, levels in sorted(found.items())
        for level, seconds in sorted(levels.items())
    ]
    if rows:
        connection.execute(insert(connection, demand_hours), rows)


def level_steps(connection: Connection, pool: str, budget: str, lo: int) -> Steps:
    """The leaf's demand in ``pool`` from ``lo`` on, from the intervals that reach past it
    (the rule of :func:`services.reports.history.pool_histories`)."""
    columns = (demand_intervals.c.gpus, demand_intervals.c.start_at, demand_intervals.c.end_at)
    mine = (demand_intervals.c.pool == pool, demand_intervals.c.budget == budget)
    # Two queries, each on an index: an OR with IS NULL would read every interval ever.
    still = select(*columns).where(*mine, demand_intervals.c.end_at.is_(None))
    ended = select(*columns).where(*mine, demand_intervals.c.end_at >= lo)
    changes: list[tuple[float, float]] = []
    for gpus, start, end in [*connection.execute(still), *connection.execute(ended)]:
        changes.append((float(max(int(start), lo)), float(gpus)))
        if end is not None:
            changes.append((float(end), -float(gpus)))
    return Steps.of_changes(changes)


def backfill(connection: Connection, insert: Any) -> int:
    """Build every leaf's histograms and current level from ``demand_intervals`` (migration
    0005, on read models projected before the histograms existed); how many leaves."""
    keys = connection.execute(
        select(demand_intervals.c.pool, demand_intervals.c.budget).distinct()
    ).all()
    for pool, budget in keys:
        steps = level_steps(connection, str(pool), str(budget), 0)
        if not steps.points:
            continue
        first, since = int(steps.points[0][0]), int(steps.points[-1][0])
        rebuild(connection, insert, str(pool), str(budget), first // HOUR * HOUR, since)
        level = int(steps.at(since))
        statement = insert(connection, demand_levels)
        connection.execute(statement.values(pool=pool, budget=budget, level=level, since=since))
    return len(keys)


#: Each pool's registered GPUs as read in the transaction in progress (:func:`batched`): every
#: waiting workload's fact asks, and nodes register rarely (:func:`forget_registered`).
_REGISTERED: ContextVar[dict[str, int] | None] = ContextVar("registered", default=None)
_REGISTERED_IN_POOL = select(func.sum(nodes.c.gpus)).where(nodes.c.pool == bindparam("pool"))


def registered_gpus(connection: Connection, pool: str) -> int:
    """GPUs of every node ever registered in ``pool`` (a node keeps its pool and GPUs): the
    bound the demand rule keeps work that could never start under
    (:func:`projections.figures.wanted_gpus`)."""
    known = _REGISTERED.get()
    if known is not None and pool in known:
        return known[pool]
    total = int(connection.execute(_REGISTERED_IN_POOL, {"pool": pool}).scalar() or 0)
    if known is not None:
        known[pool] = total
    return total


def forget_registered(pool: str) -> None:
    """A node registered in ``pool``: its total is read again."""
    known = _REGISTERED.get()
    if known is not None:
        known.pop(pool, None)
