"""Contract tests of the SQL read models: the same cases on SQLite and on PostgreSQL.

Events come from a simulated run (real trace rows), through the in-memory bus so that each has
a real (topic, partition, offset) position.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import Engine, create_engine, func, select

from events import TopicKind, Topics, new_event
from events.envelope import derived_event_id
from events.models import EventData, LedgerCharge, WorkloadPreempted
from events.positions import Delivery
from scheduling.scheduling_pass import run_pass
from services.bus.memory import InMemoryBroker, InMemoryPublisher, InMemorySubscriber
from services.projector import sql_projector as projector_module
from services.projector import workload_tables
from services.projector.sql_projector import SqlProjector
from services.read_models.migrate import migrate
from services.read_models.tables import hourly_usage, ledger_entries, metadata, runs, workloads
from services.simulator.engine import Simulation, SimulationConfig
from services.simulator.trace import DEVELOPMENT_TRACES as TRACES
from services.simulator.trace import load_budgets, load_trace
from tests.databases import fresh_database

pytestmark = [pytest.mark.database]


@pytest.fixture
def engine(database_url: str) -> Iterator[Engine]:
    """A migrated, empty database of each backend (PostgreSQL: a fresh database per test)."""
    with fresh_database(database_url) as engine:
        yield engine


@pytest.fixture(scope="module")
def deliveries() -> list[Delivery]:
    return simulated_deliveries()


def simulated_deliveries() -> list[Delivery]:
    """A simulated run's events (150 trace rows, with preemptions), each at its position."""
    jobs = load_trace(TRACES / "philly-2017-09.csv", limit=150)
    log: list[Any] = []

    def record(data: EventData, at: float) -> None:
        log.append(
            new_event(
                data,
                source="sim",
                time=datetime.fromtimestamp(at, UTC),
                event_id=derived_event_id("t", str(len(log))),
            )
        )

    Simulation(
        jobs,
        load_budgets(TRACES / "philly-budgets.csv"),
        SimulationConfig(gpus=16),
        run_pass,
        recorder=record,
    ).run()
    broker = InMemoryBroker(partitions=3)
    topics = Topics(prefix="rm.")
    publisher = InMemoryPublisher(broker, topics)
    for envelope in log:
        publisher.publish(envelope)
    subscriber = InMemorySubscriber(broker, "rm", list(TopicKind), topics)
    got = subscriber.poll(max_records=10**9)
    assert len(got) == len(log)
    return got


def _snapshot(engine: Engine) -> dict[str, list[tuple[Any, ...]]]:
    with engine.connect() as connection:
        return {
            table.name: sorted(tuple(row) for row in connection.execute(select(table)))
            for table in metadata.sorted_tables
            if table.name != "projector_positions"
        }


def test_migrations_build_exactly_the_declared_schema(engine: Engine) -> None:
    migrate(engine)  # idempotent
    with engine.connect() as connection:
        diff = compare_metadata(MigrationContext.configure(connection), metadata)
    assert diff == []


def test_projection_of_a_run(engine: Engine, deliveries: list[Delivery]) -> None:
    projector = SqlProjector(engine)
    assert projector.apply(deliveries) == len(deliveries)
    charges = [d.envelope.data for d in deliveries if isinstance(d.envelope.data, LedgerCharge)]
    assert charges, "the run posted charges"
    with engine.connect() as connection:
        assert connection.execute(select(func.count()).select_from(ledger_entries)).scalar() == len(
            charges
        )
        allocated = connection.execute(select(func.sum(hourly_usage.c.allocated_gpu_s))).scalar()
        statuses = dict(
            connection.execute(
                select(workloads.c.status, func.count()).group_by(workloads.c.status)
            ).all()
        )
    expected = sum(c.signed_gpu_seconds for c in charges if c.kind == "allocated")
    assert allocated == expected
    assert statuses.get("succeeded", 0) > 0
    assert sum(statuses.values()) == 150
    preempted = sum(1 for d in deliveries if isinstance(d.envelope.data, WorkloadPreempted))
    assert preempted > 0, "the run had preemptions"
    with engine.connect() as connection:
        counted = connection.execute(select(func.sum(workloads.c.preemptions))).scalar()
        attempts = connection.execute(select(func.max(workloads.c.attempt))).scalar()
    assert counted == preempted
    assert attempts is not None
    assert attempts > 1, "requeued work is on its next attempt"
    positions = projector.positions()
    assert positions, "positions are stored"
    for (topic, partition), offset in positions.items():
        last = max(
            d.position.offset
            for d in deliveries
            if (d.position.topic, d.position.partition) == (topic, partition)
        )
        assert offset == last + 1


def test_a_crash_and_redelivery_leave_the_same_tables(
    engine: Engine,
    deliveries: list[Delivery],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    reference = create_engine(f"sqlite:///{tmp_path / 'reference.db'}")
    migrate(reference)
    SqlProjector(reference).apply(deliveries)

    half = len(deliveries) // 2
    SqlProjector(engine).apply(deliveries[:half])
    before_crash = SqlProjector(engine).positions()

    class KilledError(RuntimeError):
        pass

    calls = 0
    write_charges = projector_module._charges

    def dies_after_two_charges(connection: Any, batch: list[Any]) -> None:
        nonlocal calls
        calls += 1
        write_charges(connection, batch[:2])
        raise KilledError("the projector dies mid-batch")

    monkeypatch.setattr(projector_module, "_charges", dies_after_two_charges)
    with pytest.raises(KilledError):
        SqlProjector(engine).apply(deliveries[half:])
    monkeypatch.undo()
    assert calls == 1, "it died after writing two charges of the batch"
    assert SqlProjector(engine).positions() == before_crash, "nothing of the batch was kept"
    # The restarted projector is handed everything again, from the start (at-least-once).
    SqlProjector(engine).apply(deliveries)
    SqlProjector(engine).apply(deliveries[half:])  # and some of it twice more
    assert _snapshot(engine) == _snapshot(reference)
    reference.dispose()


def test_a_log_read_a_topic_at_a_time_leaves_the_tables_of_the_log_read_in_order(
    engine: Engine, deliveries: list[Delivery], database_url: str, tmp_path: Path
) -> None:
    """A projector's first start on an existing log reads each partition in turn: the ledger's
    charges before the starts of the runs they charge, every workload's facts after the
    heartbeats. Every table is that of the log read in the order it was written: a run started
    after its charges were read starts charged as far as they reach, and is settled when it
    ends."""
    by_topic = sorted(deliveries, key=lambda d: (d.position.topic, d.position.partition))
    topics = [d.position.topic for d in by_topic]
    assert topics.index("rm.ledger") < topics.index("rm.workloads"), "the ledger is read first"
    projector = SqlProjector(engine)
    for i in range(0, len(by_topic), 500):  # the projector service's batches
        projector.apply(by_topic[i : i + 500])
    other_url = (
        f"sqlite:///{tmp_path / 'in-order.db'}" if "sqlite" in database_url else database_url
    )
    with fresh_database(other_url) as in_order:
        SqlProjector(in_order).apply(sorted(deliveries, key=lambda d: d.envelope.time))
        assert _snapshot(engine) == _snapshot(in_order)
    with engine.connect() as connection:
        settled = connection.execute(select(func.count()).where(runs.c.settled)).scalar()
    assert settled, "runs charged to their end are settled"


def test_duplicated_charges_at_new_offsets_are_not_counted_twice(
    engine: Engine, deliveries: list[Delivery]
) -> None:
    projector = SqlProjector(engine)
    projector.apply(deliveries)
    before = _snapshot(engine)
    charge = next(d for d in deliveries if isinstance(d.envelope.data, LedgerCharge))
    again = Delivery(
        charge.envelope,
        charge.position.__class__(charge.position.topic, charge.position.partition, 10**6),
    )
    assert projector.apply([again]) == 1
    assert _snapshot(engine) == before


def test_migration_0002_gives_existing_budgets_their_weights_as_history(tmp_path: Path) -> None:
    from services.read_models.tables import budget_weights, budgets

    engine = create_engine(f"sqlite:///{tmp_path}/old.db")
    migrate(engine, "0001")
    with engine.begin() as connection:
        connection.execute(
            budgets.insert(),
            [
                {"budget": "lab", "weight": 2.0, "pool_weights": {"a100": 5.0}, "created_at": 7},
                {"budget": "lab/x", "weight": 1.0, "pool_weights": {}, "created_at": 9},
            ],
        )
    migrate(engine)
    with engine.connect() as connection:
        rows = sorted(
            (r.budget, r.pool, r.weight, r.effective_at)
            for r in connection.execute(select(budget_weights))
        )
    assert rows == [("lab", "", 2.0, 7), ("lab", "a100", 5.0, 7), ("lab/x", "", 1.0, 9)]
    engine.dispose()


def test_migration_0003_takes_existing_nodes_as_always_registered(tmp_path: Path) -> None:
    from services.read_models.tables import node_states, nodes

    engine = create_engine(f"sqlite:///{tmp_path}/old.db")
    migrate(engine, "0002")
    with engine.begin() as connection:
        connection.execute(
            nodes.insert(),
            [
                {"node": "a", "cluster": "c", "pool": "p", "gpus": 4, "gpu_type": "x",
                 "state": "up", "changed_at": 50},
                {"node": "b", "cluster": "c", "pool": "p", "gpus": 2, "gpu_type": "x",
                 "state": "down", "changed_at": 70},
            ],
        )  # fmt: skip
    migrate(engine)
    with engine.connect() as connection:
        rows = sorted(
            (r.node, r.state, r.effective_at) for r in connection.execute(select(node_states))
        )
    assert rows == [("a", "up", 0), ("b", "down", 70), ("b", "up", 0)]
    engine.dispose()


def _histograms(engine: Engine) -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]]]:
    from services.read_models.tables import demand_hours, demand_levels

    with engine.connect() as connection:
        return (
            sorted(tuple(r) for r in connection.execute(select(demand_hours))),
            sorted(tuple(r) for r in connection.execute(select(demand_levels))),
        )


def test_demand_histograms_are_those_of_the_intervals(
    engine: Engine, deliveries: list[Delivery]
) -> None:
    """What the projector keeps fact by fact (three partitions: facts of one workload are read
    out of time order across topics) is what migration 0005 builds from the intervals."""
    from services.read_models.demand_upkeep import backfill
    from services.read_models.tables import demand_hours, demand_levels

    SqlProjector(engine).apply(deliveries)
    kept = _histograms(engine)
    assert kept[0], "demand was kept hour by hour"
    with engine.begin() as connection:
        connection.execute(demand_hours.delete())
        connection.execute(demand_levels.delete())
        backfill(connection, projector_module._insert)
    assert _histograms(engine) == kept


def test_a_crash_in_the_demand_upkeep_keeps_nothing_of_the_batch(
    engine: Engine,
    deliveries: list[Delivery],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """kill -9 mid-batch, between the demand changes of two runs of workload facts: the
    intervals and their histograms roll back together, and the redelivered batch leaves the
    tables of an uninterrupted run."""
    reference = create_engine(f"sqlite:///{tmp_path / 'reference.db'}")
    migrate(reference)
    SqlProjector(reference).apply(deliveries)
    first = next(i for i, d in enumerate(deliveries) if d.envelope.type.endswith("submitted.v1"))
    third = first + 5
    SqlProjector(engine).apply(deliveries[:third])
    before = (SqlProjector(engine).positions(), _histograms(engine))

    class KilledError(RuntimeError):
        pass

    calls = 0
    upkeep = workload_tables.apply_changes

    def dies_on_the_second(connection: Any, changes: Any, insert: Any) -> None:
        nonlocal calls
        calls += 1
        upkeep(connection, changes, insert)
        if calls == 2:
            raise KilledError("the projector dies between two runs' demand changes")

    monkeypatch.setattr(workload_tables, "apply_changes", dies_on_the_second)
    with pytest.raises(KilledError):
        SqlProjector(engine).apply(deliveries[third:])
    monkeypatch.undo()
    assert (SqlProjector(engine).positions(), _histograms(engine)) == before
    SqlProjector(engine).apply(deliveries)
    assert _snapshot(engine) == _snapshot(reference)
    reference.dispose()


def test_workload_facts_read_twice_change_no_histogram(
    engine: Engine, deliveries: list[Delivery]
) -> None:
    projector = SqlProjector(engine)
    projector.apply(deliveries)
    before = _snapshot(engine)
    facts = [d for d in deliveries if d.envelope.type.startswith("fairshare.workload.")]
    again = [
        Delivery(
            d.envelope, d.position.__class__(d.position.topic, d.position.partition, 10**6 + i)
        )
        for i, d in enumerate(facts)
    ]
    assert projector.apply(again) == len(again)
    assert _snapshot(engine) == before


def test_migration_0005_builds_the_histograms_of_projected_intervals(
    deliveries: list[Delivery], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    kept = create_engine(f"sqlite:///{tmp_path / 'kept.db'}")
    migrate(kept)
    SqlProjector(kept).apply(deliveries)
    old = create_engine(f"sqlite:///{tmp_path / 'old.db'}")
    migrate(old, "0004")
    # A projector of before 0005: the intervals, no histograms (nor the period sums of 0006).
    monkeypatch.setattr(workload_tables, "apply_changes", lambda *_args: None)
    monkeypatch.setattr(projector_module.usage_upkeep, "add_entries", lambda *_args: None)
    monkeypatch.setattr(projector_module.usage_upkeep, "submitted", lambda *_args: None)
    # nor the ledger positions and checkpoint intervals of 0008
    monkeypatch.setattr(projector_module, "_ledger_position", lambda *_args: {})
    monkeypatch.setattr(workload_tables, "note_checkpoints", lambda *_args: None)
    # nor the facts held for their workload of 0009
    monkeypatch.setattr(workload_tables, "read_early_facts", lambda *_args: ([], frozenset()))
    monkeypatch.setattr(workload_tables, "keep_early_facts", lambda *_args: None)
    SqlProjector(old).apply(deliveries)
    monkeypatch.undo()
    migrate(old)
    assert _histograms(old) == _histograms(kept)
    kept.dispose()
    old.dispose()


def test_whole_hours_read_summed_give_the_figures_of_every_charge(
    engine: Engine, deliveries: list[Delivery]
) -> None:
    """On both backends: the database sums a bin's hours (one CASE branch per span; for a read
    of one bin, the hour in progress and the open runs too) and the figures equal those read
    charge by charge and interval by interval."""
    from sqlalchemy import func, select

    from events.times import DAY, HOUR
    from projections.figures import Bins, pool_figures
    from services.read_models.tables import demand_levels
    from services.reports.history import pool_histories
    from services.reports.window import read_tree, window_figures

    SqlProjector(engine).apply(deliveries)
    first = min(int(d.envelope.time.timestamp()) for d in deliveries) // HOUR * HOUR
    with engine.connect() as connection:
        last = int(connection.execute(select(func.max(demand_levels.c.since))).scalar_one())
    # after the latest demand change, the hour in progress and the open runs come summed
    live = [last + 17 * 60 + 0.5, last + 3 * HOUR + 1234]
    for bins in (
        Bins.one(float(first), float(first + 7 * DAY + 1234)),
        Bins(tuple(float(first + i * 6 * HOUR) for i in range(29)), float(first + 7 * DAY - 99)),
        *(Bins.one(float((at - 7 * DAY) // HOUR * HOUR), at) for at in live),
    ):
        summed = window_figures(engine, bins)
        with engine.connect() as connection:
            tree = read_tree(connection)
            exact = pool_histories(connection, bins.bounds[0], bins.stop)
        assert any(f.total.owed_total > 0 for f in summed.pools.values()), "something was owed"
        for pool, figures in summed.pools.items():
            other = pool_figures(exact[pool], tree, bins, tree.leaves())
            for budget, series in other.budgets.items():
                mine = figures.budgets[budget]
                for a, b in zip(mine.columns(), series.columns(), strict=True):
                    assert a == pytest.approx(b, rel=1e-9, abs=1e-6), (pool, budget)
