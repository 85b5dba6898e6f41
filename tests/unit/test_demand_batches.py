"""Demand histograms folded a transaction at a time (``demand_upkeep.batched``) are those the
intervals give (migration 0005's backfill), whatever order the changes come in and however
they are split into transactions: a projector catching up reads partitions out of time order,
and folding each transaction's changes at its end (one rebuild per leaf, not one per change)
must not change a figure. SQLite in memory: the rule is the same SQL on every backend."""

from __future__ import annotations

import random
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from sqlalchemy import Connection, create_engine, select, update
from sqlalchemy.dialects.sqlite import insert as sqlite_insert

from services.read_models.demand_upkeep import apply_changes, backfill, batched
from services.read_models.migrate import migrate
from services.read_models.tables import demand_hours, demand_intervals, demand_levels

T0 = 1_790_000_000 - 1_790_000_000 % 3600


def _insert(_connection: Connection, table: Any) -> Any:
    return sqlite_insert(table)


intervals = st.lists(
    st.tuples(
        st.sampled_from(["a", "b"]),  # leaf
        st.integers(1, 8),  # GPUs
        st.integers(0, 20 * 3600),  # start, from T0
        st.integers(1, 6 * 3600),  # length
    ),
    min_size=1,
    max_size=25,
)


def _histograms(connection: Connection) -> tuple[list[Any], list[Any]]:
    hours = sorted(tuple(r) for r in connection.execute(select(demand_hours)))
    levels = sorted(tuple(r) for r in connection.execute(select(demand_levels)))
    return hours, levels


@settings(max_examples=60, deadline=None)
@given(intervals=intervals, seed=st.integers(0, 2**16), batches=st.integers(1, 6))
def test_batched_changes_give_the_histograms_of_the_intervals(
    intervals: list[tuple[str, int, int, int]], seed: int, batches: int
) -> None:
    engine = create_engine("sqlite://")
    migrate(engine)
    events: list[tuple[int, str, int, int, int]] = []  # (at, leaf, gpus, sign, index)
    for i, (leaf, gpus, start, length) in enumerate(intervals):
        events.append((T0 + start, leaf, gpus, +1, i))
        events.append((T0 + start + length, leaf, gpus, -1, i))
    rng = random.Random(seed)
    rng.shuffle(events)
    # each interval opens before it closes, as a workload's own facts come in its order
    ordered: list[tuple[int, str, int, int, int]] = []
    waiting: list[tuple[int, str, int, int, int]] = []
    for event in events:
        (ordered if event[3] > 0 else waiting).append(event)
    ordered += waiting
    cuts = sorted(rng.sample(range(1, len(ordered)), min(batches - 1, len(ordered) - 1)))
    for lo, hi in zip([0, *cuts], [*cuts, len(ordered)], strict=True):
        with engine.begin() as connection, batched(connection, _insert):
            for at, leaf, gpus, sign, index in ordered[lo:hi]:
                if sign > 0:
                    connection.execute(
                        sqlite_insert(demand_intervals).values(
                            workload_id=f"w{index}",
                            seq=1,
                            pool="p",
                            budget=leaf,
                            gpus=gpus,
                            start_at=at,
                            end_at=None,
                        )
                    )
                else:
                    connection.execute(
                        update(demand_intervals)
                        .where(demand_intervals.c.workload_id == f"w{index}")
                        .values(end_at=at)
                    )
                apply_changes(connection, [("p", leaf, sign * gpus, at)], _insert)
    with engine.begin() as connection:
        kept = _histograms(connection)
        connection.execute(demand_hours.delete())
        connection.execute(demand_levels.delete())
        backfill(connection, _insert)
        assert _histograms(connection)[0] == kept[0]
        # the level now is what every interval leaves: zero, all closed
        assert all(level == 0 for _pool, _budget, level, _since in kept[1])
