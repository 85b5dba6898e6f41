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
from projections.demand_hours import Histogram, add_level, histogram
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
    for change in changes:
        if change[2]:
            _fold(connection, insert, [change])


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


#: (pool, leaf budget)
Leaf = tuple[str, str]


def _fold(connection: Connection, insert: Any, pending: list[Change]) -> None:
    """Each leaf's changes in time order: counted forward from its latest change when none
    comes before it; else its histograms rebuilt once, from the earliest. Every leaf's level
    read in one query, its hours counted and its level written with one statement each for
    all leaves: a transaction of a rebuild changes most leaves, and a statement per leaf and
    change (each read, counted and written in turn) cost more than the counting."""
    by_leaf: dict[Leaf, list[tuple[int, int]]] = {}
    for pool, budget, delta, at in pending:
        by_leaf.setdefault((pool, budget), []).append((at, delta))
    if not by_leaf:
        return
    named = {
        "pools": sorted({pool for pool, _ in by_leaf}),
        "budgets": sorted({budget for _, budget in by_leaf}),
    }
    stored = {
        (str(pool), str(budget)): (int(level), int(since))
        for pool, budget, level, since in connection.execute(_LEVELS, named)
        if (pool, budget) in by_leaf
    }
    counted: dict[Leaf, Histogram] = {}
    levels: dict[Leaf, tuple[int, int]] = {}
    spans: dict[Leaf, tuple[int, int]] = {}
    for leaf, moves in sorted(by_leaf.items()):
        moves.sort(key=lambda move: move[0])  # stable: equal instants keep their order
        level, since = stored.get(leaf, (0, moves[0][0]))
        if leaf not in stored or moves[0][0] >= since:
            histogram = counted.setdefault(leaf, {})
            for at, delta in moves:
                add_level(histogram, level, since, at)
                level, since = level + delta, at
        else:
            level += sum(delta for _, delta in moves)
            since = max(since, moves[-1][0])
            spans[leaf] = (moves[0][0] // HOUR * HOUR, since)
        levels[leaf] = (level, since)
    _add_hours(connection, insert, counted)
    _write_levels(connection, insert, levels, stored)
    _rebuild(connection, insert, spans)


_LEVELS = select(
    demand_levels.c.pool, demand_levels.c.budget, demand_levels.c.level, demand_levels.c.since
).where(
    demand_levels.c.pool.in_(bindparam("pools", expanding=True)),
    demand_levels.c.budget.in_(bindparam("budgets", expanding=True)),
)
_SET_LEVEL = (
    update(demand_levels)
    .where(
        demand_levels.c.pool == bindparam("key_pool"),
        demand_levels.c.budget == bindparam("key_budget"),
    )
    .values(level=bindparam("level"), since=bindparam("since"))
)
_FORGET_HOURS = delete(demand_hours).where(
    demand_hours.c.pool == bindparam("key_pool"),
    demand_hours.c.budget == bindparam("key_budget"),
    demand_hours.c.hour >= bindparam("lo"),
    demand_hours.c.hour < bindparam("hi"),
)


def _add_hours(connection: Connection, insert: Any, counted: dict[Leaf, Histogram]) -> None:
    rows = _hour_rows(counted)
    if not rows:
        return
    statement = insert(connection, demand_hours)
    statement = statement.on_conflict_do_update(
        index_elements=["pool", "budget", "hour", "level"],
        set_={"seconds": demand_hours.c.seconds + statement.excluded.seconds},
    )
    connection.execute(statement, rows)


def _write_levels(
    connection: Connection,
    insert: Any,
    levels: dict[Leaf, tuple[int, int]],
    stored: dict[Leaf, tuple[int, int]],
) -> None:
    new = [
        {"pool": pool, "budget": budget, "level": level, "since": since}
        for (pool, budget), (level, since) in levels.items()
        if (pool, budget) not in stored
    ]
    if new:
        connection.execute(insert(connection, demand_levels), new)
    changed = [
        {"key_pool": pool, "key_budget": budget, "level": level, "since": since}
        for (pool, budget), (level, since) in levels.items()
        if (pool, budget) in stored and stored[(pool, budget)] != (level, since)
    ]
    if changed:
        connection.execute(_SET_LEVEL, changed)


def _hour_rows(histograms: dict[Leaf, Histogram]) -> list[dict[str, Any]]:
    return [
        {"pool": pool, "budget": budget, "hour": hour, "level": level, "seconds": seconds}
        for (pool, budget), found in sorted(histograms.items())
        for hour, levels in sorted(found.items())
        for level, seconds in sorted(levels.items())
    ]


def rebuild(connection: Connection, insert: Any, pool: str, budget: str, lo: int, hi: int) -> None:
    """The histograms of ``[lo, hi)`` (``lo`` on an hour) again, from the intervals."""
    _rebuild(connection, insert, {(pool, budget): (lo, hi)})


def _rebuild(connection: Connection, insert: Any, spans: dict[Leaf, tuple[int, int]]) -> None:
    """Each leaf's histograms of its ``[lo, hi)`` again, from the intervals (read once for
    every leaf)."""
    if not spans:
        return
    connection.execute(
        _FORGET_HOURS,
        [
            {"key_pool": pool, "key_budget": budget, "lo": lo, "hi": hi}
            for (pool, budget), (lo, hi) in sorted(spans.items())
        ],
    )
    steps = _steps(connection, {leaf: lo for leaf, (lo, _hi) in spans.items()})
    rows = _hour_rows({leaf: histogram(steps[leaf], lo, hi) for leaf, (lo, hi) in spans.items()})
    if rows:
        connection.execute(insert(connection, demand_hours), rows)


def level_steps(connection: Connection, pool: str, budget: str, lo: int) -> Steps:
    """The leaf's demand in ``pool`` from ``lo`` on, from the intervals that reach past it
    (the rule of :func:`services.reports.history.pool_histories`)."""
    return _steps(connection, {(pool, budget): lo})[(pool, budget)]


def _steps(connection: Connection, since: dict[Leaf, int]) -> dict[Leaf, Steps]:
    """Each leaf's demand from its ``since`` on. Two queries for all the leaves, each on an
    index (an OR with IS NULL would read every interval ever; a query per leaf reads, by the
    index on ``end_at``, the intervals of every leaf)."""
    columns = (
        demand_intervals.c.pool,
        demand_intervals.c.budget,
        demand_intervals.c.gpus,
        demand_intervals.c.start_at,
        demand_intervals.c.end_at,
    )
    pools = sorted({pool for pool, _ in since})
    budgets = sorted({budget for _, budget in since})
    mine = (demand_intervals.c.pool.in_(pools), demand_intervals.c.budget.in_(budgets))
    still = select(*columns).where(*mine, demand_intervals.c.end_at.is_(None))
    ended = select(*columns).where(*mine, demand_intervals.c.end_at >= min(since.values()))
    changes: dict[Leaf, list[tuple[float, float]]] = {leaf: [] for leaf in since}
    for pool, budget, gpus, start, end in [*connection.execute(still), *connection.execute(ended)]:
        lo = since.get((pool, budget))
        if lo is None or (end is not None and end < lo):
            continue
        changes[(pool, budget)].append((float(max(int(start), lo)), float(gpus)))
        if end is not None:
            changes[(pool, budget)].append((float(end), -float(gpus)))
    return {leaf: Steps.of_changes(found) for leaf, found in changes.items()}


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
