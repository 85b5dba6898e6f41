"""A job array in the SQL read models, on SQLite and on PostgreSQL: its one fact projects as
the submissions of its elements would (rows, demand, histograms), an element's facts read
before its array wait for it instead of being lost, and a redelivery changes nothing."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import Engine, select

from events import new_event
from events.models import (
    EventData,
    NodeGpus,
    NodeRegistered,
    Placement,
    WorkloadArraySubmitted,
    WorkloadCancelled,
    WorkloadFinished,
    WorkloadPlaced,
    WorkloadStarted,
)
from events.models.arrays import elements
from events.positions import Delivery, Position
from services.api import create_app, default_tokens
from services.api.past_work import past_history
from services.api.view import LiveView
from services.bus.memory import InMemoryBroker, InMemoryPublisher
from services.projector.sql_projector import SqlProjector
from services.read_models.tables import (
    demand_hours,
    demand_intervals,
    demand_levels,
    early_facts,
    job_arrays,
    runs,
    workloads,
)
from tests.databases import fresh_database

pytestmark = [pytest.mark.database]

T0 = 1_790_000_000
ARRAY = WorkloadArraySubmitted(
    array_id="sweep",
    indices="0-49",
    max_running=5,
    budget="lab/a",
    pools=("p", "q"),
    gpus=2,
    min_runtime_s=600,
    submitter="ana",
    spec={"checkpoint_every_s": 900},
)
ON_N0 = Placement(nodes=(NodeGpus(node="n0", gpus=(0, 1)),))
ANA = {"Authorization": "Bearer ana-token"}


@pytest.fixture
def engine(database_url: str) -> Iterator[Engine]:
    with fresh_database(database_url) as engine:
        yield engine


def deliveries(*facts: tuple[EventData, int, str, int]) -> list[Delivery]:
    """(fact, time, topic, partition) in the order a projector reads them, at offsets 0.."""
    offsets: dict[tuple[str, int], int] = {}
    found = []
    for data, at, topic, partition in facts:
        offset = offsets.get((topic, partition), 0)
        offsets[(topic, partition)] = offset + 1
        envelope = new_event(data, source="tests", time=datetime.fromtimestamp(at, UTC))
        found.append(Delivery(envelope, Position(topic, partition, offset)))
    return found


def _tables(engine: Engine) -> dict[str, list[tuple[Any, ...]]]:
    with engine.connect() as connection:
        return {
            table.name: sorted(
                tuple(v for k, v in row._mapping.items() if k not in ("array_id", "array_index"))
                for row in connection.execute(select(table))
            )
            for table in (workloads, demand_intervals, demand_levels, demand_hours)
        }


def test_an_array_projects_as_its_elements_submitted_one_by_one(
    engine: Engine, database_url: str, tmp_path: Path
) -> None:
    projector = SqlProjector(engine)
    projector.apply(deliveries((ARRAY, T0, "w", 0)))
    with engine.connect() as connection:
        rows = connection.execute(
            select(workloads.c.workload_id, workloads.c.array_id, workloads.c.array_index)
        ).all()
    assert sorted(rows, key=lambda r: r[2]) == [(f"sweep_{i}", "sweep", i) for i in range(50)]
    other_url = f"sqlite:///{tmp_path / 'other.db'}" if "sqlite" in database_url else database_url
    with fresh_database(other_url) as other:
        one_by_one = [(element, T0, "w", i) for i, (_index, element) in enumerate(elements(ARRAY))]
        SqlProjector(other).apply(deliveries(*one_by_one))
        assert _tables(engine) == _tables(other)
    again = projector.apply(deliveries((ARRAY, T0, "w", 0), (ARRAY, T0, "w", 0)))
    assert again == 1  # the first is skipped by position; the second is the same fact
    with engine.connect() as connection:
        assert len(connection.execute(select(demand_intervals)).all()) == 100


def test_an_element_read_before_its_array_waits_for_it(engine: Engine) -> None:
    placed = WorkloadPlaced(
        workload_id="sweep_3",
        attempt=1,
        pool="p",
        placement=ON_N0,
        allocated=True,
        command_id="place:sweep_3:1",
    )
    started = WorkloadStarted(
        workload_id="sweep_3", attempt=1, pool="p", placement=ON_N0, allocated=True, budget="lab/a"
    )
    projector = SqlProjector(engine)
    projector.apply(deliveries((placed, T0 + 10, "w", 3), (started, T0 + 11, "w", 3)))
    with engine.connect() as connection:
        assert len(connection.execute(select(early_facts)).all()) == 2
    projector.apply(deliveries((ARRAY, T0, "w", 0)))
    with engine.connect() as connection:
        row = connection.execute(
            select(workloads.c.status, workloads.c.pool, workloads.c.started_at).where(
                workloads.c.workload_id == "sweep_3"
            )
        ).one()
        assert tuple(row) == ("running", "p", T0 + 11)
        assert connection.execute(select(runs.c.workload_id, runs.c.budget)).all() == [
            ("sweep_3", "lab/a")
        ]
        assert connection.execute(select(early_facts)).all() == []
        open_demand = connection.execute(
            select(demand_intervals.c.pool).where(
                demand_intervals.c.workload_id == "sweep_3", demand_intervals.c.end_at.is_(None)
            )
        ).all()
        assert open_demand == [("p",)]  # running in p: it wants p's GPUs only


def test_an_array_the_view_has_forgotten_is_answered_from_the_read_models(
    engine: Engine,
) -> None:
    """``GET /arrays/{id}`` of an array whose every element the view has forgotten (it answered
    404): the same answer as the view gave of it, its elements counted as the read models keep
    them, every one archived. A view that never held it stands for one that forgot it."""
    node = NodeRegistered(node="n0", cluster="c", pool="p", gpus=8, gpu_type="H100")
    facts: list[tuple[EventData, int, str, int]] = [(node, T0 - 1, "n", 0), (ARRAY, T0, "w", 0)]
    for index in range(3):  # three ran and ended; the rest were cancelled
        element = f"sweep_{index}"
        facts += [
            (
                WorkloadPlaced(
                    workload_id=element, attempt=1, pool="p", placement=ON_N0, allocated=True,
                    command_id=f"place:{element}:1",
                ),
                T0 + 10, "w", 1 + index,
            ),
            (
                WorkloadStarted(
                    workload_id=element, attempt=1, pool="p", placement=ON_N0, allocated=True
                ),
                T0 + 11, "w", 1 + index,
            ),
            (
                WorkloadFinished(
                    workload_id=element, attempt=1, outcome="failed" if index else "succeeded"
                ),
                T0 + 600, "w", 1 + index,
            ),
        ]  # fmt: skip
    facts += [
        (WorkloadCancelled(workload_id=f"sweep_{i}", cancelled_by="ana"), T0 + 700, "w", 9)
        for i in range(3, 50)
    ]
    projector = SqlProjector(engine)
    projector.apply(deliveries(*facts))
    projector.apply(deliveries((ARRAY, T0, "w", 0)))  # a redelivery keeps the one row
    with engine.connect() as connection:
        assert connection.execute(select(job_arrays.c.array_id)).all() == [("sweep",)]

    holding = LiveView()
    holding.feed(*[d.envelope for d in deliveries(*facts)])
    forgot = LiveView()
    tokens = default_tokens()
    publisher = InMemoryPublisher(InMemoryBroker())
    clock = {"clock": lambda: T0 + 800.0}
    live = TestClient(create_app(holding, publisher, tokens, **clock)).get(
        "/arrays/sweep", headers=ANA
    )
    from_read_models = TestClient(create_app(forgot, publisher, tokens, engine=engine, **clock))
    past = from_read_models.get("/arrays/sweep", headers=ANA)
    assert live.status_code == 200, live.text
    assert past.status_code == 200, past.text
    assert past.json()["statuses"] == {"cancelled": 47, "failed": 2, "succeeded": 1}
    assert past.json()["archived"] == 50
    assert live.json() == {**past.json(), "archived": 0}  # the same array, the same figures
    assert (past.json()["max_running"], past.json()["count"]) == (5, 50)
    assert from_read_models.get("/arrays/other", headers=ANA).status_code == 404
    # and /history's filter reaches the elements the view forgot
    total, ended = past_history(
        engine, before=T0 + 10**6, budget=None, submitter=None, pool=None, since=None,
        limit=5, array="sweep",
    )  # fmt: skip
    assert total == 50
    assert {w.array_id for w in ended} == {"sweep"}
    assert past_history(
        engine, before=T0 + 10**6, budget=None, submitter=None, pool=None, since=None,
        limit=5, array="other",
    ) == (0, [])  # fmt: skip
