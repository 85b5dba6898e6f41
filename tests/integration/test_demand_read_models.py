"""Demand in the SQL read models keeps out work no pool could ever hold, on SQLite and on
PostgreSQL: a 100,000-GPU gang already in the log (foreign work, an older release) wants
nothing in a 16-GPU pool; a gang the pool grows to hold wants its GPUs from then; and the log
read in another order (submissions before the nodes) leaves the same demand."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine, select

from events import new_event
from events.models import EventData, NodeRegistered
from events.positions import Delivery, Position
from services.projector.sql_projector import SqlProjector
from services.read_models.tables import demand_hours, demand_intervals
from tests.databases import fresh_database
from tests.factories import submitted

pytestmark = [pytest.mark.database]

T0 = 1_790_000_000


@pytest.fixture
def engine(database_url: str) -> Iterator[Engine]:
    with fresh_database(database_url) as engine:
        yield engine


def _node(name: str) -> NodeRegistered:
    return NodeRegistered(node=name, cluster="c", pool="p", gpus=8, gpu_type="H100")


NODES: list[tuple[EventData, int, str]] = [(_node("n1"), T0, "cluster")]
WORK: list[tuple[EventData, int, str]] = [
    (submitted("huge", budget="lab/a", pools=("p",), gpus=100_000), T0 + 10, "workloads"),
    (submitted("j16", budget="lab/a", pools=("p",), gpus=16), T0 + 20, "workloads"),
    (submitted("small", budget="lab/b", pools=("p",), gpus=4), T0 + 30, "workloads"),
]
GROWN: list[tuple[EventData, int, str]] = [(_node("n2"), T0 + 100, "cluster")]


def _deliveries(facts: list[tuple[EventData, int, str]]) -> list[Delivery]:
    offsets: dict[str, int] = {}
    found = []
    for data, at, topic in facts:
        offset = offsets.get(topic, 0)
        offsets[topic] = offset + 1
        envelope = new_event(data, source="tests", time=datetime.fromtimestamp(at, UTC))
        found.append(Delivery(envelope, Position(topic, 0, offset)))
    return found


def _demand(engine: Engine) -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]]]:
    """Every demand interval that lasts (a zero-length one wanted nothing), and the hours."""
    with engine.connect() as connection:
        intervals = sorted(
            (r.workload_id, r.pool, r.gpus, r.start_at, r.end_at)
            for r in connection.execute(select(demand_intervals))
            if r.end_at is None or r.end_at > r.start_at
        )
        hours = sorted(tuple(r) for r in connection.execute(select(demand_hours)))
    return intervals, hours


def test_work_no_pool_could_hold_wants_nothing_until_the_pool_could(
    engine: Engine, database_url: str, tmp_path: Path
) -> None:
    projector = SqlProjector(engine)
    projector.apply(_deliveries(NODES + WORK))
    intervals, _ = _demand(engine)
    assert intervals == [("small", "p", 4, T0 + 30, None)]
    projector.apply(_deliveries(NODES + WORK + GROWN)[-1:])
    intervals, _ = _demand(engine)
    assert intervals == [("j16", "p", 16, T0 + 100, None), ("small", "p", 4, T0 + 30, None)]
    # the same log read with every submission before any node: the same demand
    other_url = f"sqlite:///{tmp_path / 'other.db'}" if "sqlite" in database_url else database_url
    with fresh_database(other_url) as other:
        SqlProjector(other).apply(_deliveries(WORK + NODES + GROWN))
        assert _demand(other) == _demand(engine)
