"""Contract tests of ``period_usage`` (what the ledger charged per report bucket, kept by the
projector; :mod:`projections.bucket_usage`), the same cases on SQLite and PostgreSQL: the
sums and workload counts are those of the ledger entries, whatever the batches, the order the
topics are read in, a redelivery, or a migration that builds them from entries already
projected."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine, create_engine, select

from events import TopicKind
from events.positions import Delivery
from projections.report_buckets import BUCKETS, floor
from services.projector import sql_projector as projector_module
from services.projector import workload_tables
from services.projector.sql_projector import SqlProjector, _insert
from services.read_models import usage_upkeep
from services.read_models.migrate import migrate
from services.read_models.tables import ledger_entries, period_usage, workloads
from services.reports import build_report, report_bytes
from tests.databases import fresh_database
from tests.integration.test_read_models import simulated_deliveries

pytestmark = [pytest.mark.database]


@pytest.fixture
def engine(database_url: str) -> Iterator[Engine]:
    with fresh_database(database_url) as engine:
        yield engine


@pytest.fixture(scope="module")
def deliveries() -> list[Delivery]:
    return simulated_deliveries()


def _kept(engine: Engine) -> list[tuple[Any, ...]]:
    with engine.connect() as connection:
        return sorted(tuple(row) for row in connection.execute(select(period_usage)))


def _from_every_entry(engine: Engine) -> list[tuple[Any, ...]]:
    """The sums as a report read them before: entry by entry, distinct workloads per line."""
    with engine.connect() as connection:
        who = dict(connection.execute(select(workloads.c.workload_id, workloads.c.submitter)).all())
        rows = connection.execute(select(ledger_entries)).all()
    sums: dict[tuple[Any, ...], list[int]] = defaultdict(lambda: [0, 0])
    seen: dict[tuple[Any, ...], set[str]] = defaultdict(set)
    for row in rows:
        seconds = int(row.gpu_seconds)
        if str(row.debit_account).startswith("capacity:"):
            seconds = -seconds
        for kind in BUCKETS:
            key = (
                kind,
                floor(int(row.bucket_start), kind),
                row.pool,
                row.budget,
                who.get(row.workload_id, "(unknown)"),
                row.corrects is not None,
            )
            sums[key][0 if row.kind == "allocated" else 1] += seconds
            seen[key].add(row.workload_id)
    return sorted((*key, a, u, len(seen[key])) for key, (a, u) in sums.items())


def test_the_sums_are_those_of_every_entry_whatever_the_batches(
    engine: Engine, deliveries: list[Delivery]
) -> None:
    projector = SqlProjector(engine)
    for i in range(0, len(deliveries), 97):
        projector.apply(deliveries[i : i + 97])
    kept = _kept(engine)
    assert kept == _from_every_entry(engine)
    assert {row[0] for row in kept} == set(BUCKETS)
    assert any(row[-1] > 1 for row in kept if row[0] == "day"), "days count several workloads"
    with engine.begin() as connection:
        usage_upkeep.rebuild(connection, _insert)
    assert _kept(engine) == kept, "a rebuild from the tables gives the same rows"


def test_charges_read_ahead_of_the_submissions_move_to_their_submitter(
    engine: Engine, deliveries: list[Delivery], tmp_path: Path
) -> None:
    """A rebuild may read the whole ledger topic before the workloads topic: the entries are
    filed under "(unknown)" until the submission is projected, then under its submitter."""
    ledger = [d for d in deliveries if TopicKind.LEDGER.value in d.position.topic]
    rest = [d for d in deliveries if TopicKind.LEDGER.value not in d.position.topic]
    assert ledger
    assert rest
    projector = SqlProjector(engine)
    projector.apply(ledger)
    assert {row[4] for row in _kept(engine)} == {"(unknown)"}
    for i in range(0, len(rest), 200):
        projector.apply(rest[i : i + 200])
    assert _kept(engine) == _from_every_entry(engine)
    assert "(unknown)" not in {row[4] for row in _kept(engine)}
    in_order = create_engine(f"sqlite:///{tmp_path / 'in-order.db'}")
    migrate(in_order)
    SqlProjector(in_order).apply(deliveries)
    assert _kept(engine) == _kept(in_order)
    for name in ("users", "utilisation"):
        mine = report_bytes(engine, name, "day", "csv").split(b"\n")
        other = report_bytes(in_order, name, "day", "csv").split(b"\n")
        # Same rows; the log positions differ (the ledger was read first here).
        assert [r.rsplit(b",", 1)[0] for r in mine] == [r.rsplit(b",", 1)[0] for r in other]
    # The charges report's columns of the ledger (delivered also reads the runs, whose charged
    # hours are not kept when the ledger is read ahead of the starts: not this table's doing).
    columns = ("budget", "line", "allocated", "unallocated", "workloads", "preemptions")
    mine_rows, other_rows = (
        [tuple(r[c] for c in columns) for r in build_report(e, "charges", "day").rows]
        for e in (engine, in_order)
    )
    assert mine_rows == other_rows
    in_order.dispose()


def test_a_redelivered_batch_adds_nothing(engine: Engine, deliveries: list[Delivery]) -> None:
    projector = SqlProjector(engine)
    half = len(deliveries) // 2
    projector.apply(deliveries[:half])
    projector.apply(deliveries[: half + 50])  # the first half again, and more
    projector.apply(deliveries)
    assert _kept(engine) == _from_every_entry(engine)


def test_migration_0006_builds_the_sums_of_projected_entries(
    deliveries: list[Delivery], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    kept = create_engine(f"sqlite:///{tmp_path / 'kept.db'}")
    migrate(kept)
    SqlProjector(kept).apply(deliveries)
    old = create_engine(f"sqlite:///{tmp_path / 'old.db'}")
    migrate(old, "0005")
    # A projector of before 0006: the entries, no period sums.
    monkeypatch.setattr(projector_module.usage_upkeep, "add_entries", lambda *_args: None)
    monkeypatch.setattr(projector_module.usage_upkeep, "submitted", lambda *_args: None)
    # nor the ledger positions and checkpoint intervals of 0008
    monkeypatch.setattr(projector_module, "_ledger_position", lambda *_args: {})
    monkeypatch.setattr(workload_tables, "note_checkpoints", lambda *_args: None)
    # nor the early facts of 0009 (facts read before their array)
    monkeypatch.setattr(workload_tables, "read_early_facts", lambda *_args: ([], frozenset()))
    monkeypatch.setattr(workload_tables, "keep_early_facts", lambda *_args: None)
    SqlProjector(old).apply(deliveries)
    monkeypatch.undo()
    migrate(old)
    assert _kept(old) == _kept(kept)
    kept.dispose()
    old.dispose()
