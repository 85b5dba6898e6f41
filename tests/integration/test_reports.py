"""The reports over real read models, on SQLite and PostgreSQL: subtotals add up, buckets tile,
corrections are rows of their own, every format round-trips, and a report regenerated from the
same log position is byte-identical."""

from __future__ import annotations

import csv
import io
import itertools
import json
from collections.abc import Iterator
from typing import Any

import pyarrow.parquet as pq
import pytest
from fastapi.testclient import TestClient
from sqlalchemy import Engine, create_engine, func, select
from typer.testing import CliRunner

from services.api import create_app, default_tokens
from services.api.view import LiveView
from services.bus.memory import InMemoryBroker, InMemoryPublisher
from services.devtools.demo_data import project, small_lab
from services.read_models.migrate import migrate
from services.read_models.tables import hourly_usage
from services.reports import buckets, build_report, render, times
from services.reports.cli import report_app
from services.reports.writers import output_columns, output_rows
from tests.databases import fresh_database

pytestmark = [pytest.mark.database]
EVENTS = small_lab()


@pytest.fixture
def engine(database_url: str) -> Iterator[Engine]:
    """Migrated read models holding the small lab's morning (PostgreSQL: a fresh database)."""
    with fresh_database(database_url) as engine:
        project(engine, EVENTS)
        yield engine


SUMMED = ("allocated", "unallocated", "entitlement", "demand", "owed", "workloads", "preemptions")


def _blocks(rows: list[dict[str, Any]]) -> dict[tuple[Any, Any], list[dict[str, Any]]]:
    blocks: dict[tuple[Any, Any], list[dict[str, Any]]] = {}
    for row in rows:
        blocks.setdefault((row["period_start"], row["pool"]), []).append(row)
    return blocks


@pytest.mark.parametrize("bucket", buckets.BUCKETS)
def test_charges_subtotals_add_up_exactly(engine: Engine, bucket: buckets.Bucket) -> None:
    report = build_report(engine, "charges", bucket)
    assert report.rows
    for block in _blocks(report.rows).values():
        for row in block:
            if row["line"] not in ("subtotal", "total"):
                continue
            if row["line"] == "total":
                children = [r for r in block if r["depth"] == 0]
            else:
                children = [r for r in block if r["parent"] == row["budget"]]
            assert children, row
            for key in SUMMED:
                # Workloads are counted on the charges lines (a correction's are already there).
                lines = [c for c in children if key != "workloads" or c["line"] != "correction"]
                assert row[key] == sum(c[key] or 0 for c in lines), (key, row["budget"])


def test_charges_agree_with_the_ledger_and_buckets_tile(engine: Engine) -> None:
    with engine.connect() as connection:
        charged = connection.execute(select(func.sum(hourly_usage.c.allocated_gpu_s))).scalar()
        free = connection.execute(select(func.sum(hourly_usage.c.unallocated_gpu_s))).scalar()
    for bucket in buckets.BUCKETS:
        report = build_report(engine, "charges", bucket)
        totals = [r for r in report.rows if r["line"] == "total"]
        assert sum(int(r["allocated"]) for r in totals) == charged  # type: ignore[arg-type]
        assert sum(int(r["unallocated"]) for r in totals) == free  # type: ignore[arg-type]
        bounds = [(r["period_start"], r["period_end"]) for r in totals]
        assert bounds == sorted(set(bounds))
        for (_a, b), (c, _d) in itertools.pairwise(bounds):
            assert b == c  # no gap, no overlap
        assert report.start is not None
        assert report.end is not None
        assert bounds[0][0] == times.iso(report.start)
        assert bounds[-1][1] == times.iso(report.end)
    hourly = build_report(engine, "charges", "hour")
    # A leaf's owed never exceeds its entitlement nor its demand.
    for row in hourly.rows:
        if row["line"] == "charges":
            assert row["owed"] <= min(row["entitlement"], row["demand"])  # type: ignore[operator]


def test_corrections_are_rows_of_their_own(engine: Engine) -> None:
    rows = build_report(engine, "charges", "day").rows
    vision = [r for r in rows if r["budget"] == "lab/vision"]
    assert [r["line"] for r in vision] == ["charges", "correction"]
    charges, correction = vision
    assert correction["allocated"] == -600
    assert correction["workloads"] == 1
    assert correction["owed"] is None
    assert correction["entitlement"] is None
    # The original entries are reported as posted: 4 GPUs x 3 h + 4 x (12:00 - 09:00:10) + ...
    lab = next(r for r in rows if r["budget"] == "lab")
    robotics = next(r for r in rows if r["budget"] == "lab/robotics")
    assert (
        lab["allocated"] == charges["allocated"] + correction["allocated"] + robotics["allocated"]
    )
    csv_text = render(build_report(engine, "charges", "day"), "csv").decode()
    assert ",lab/vision,lab,lab,1,true,correction,0.500000,-600,-0.166667," in csv_text


def test_utilisation_adds_up_to_capacity(engine: Engine) -> None:
    report = build_report(engine, "utilisation", "hour")
    assert len(report.rows) == 6
    for row in report.rows:
        parts = sum(int(row[k]) for k in ("allocated", "unallocated", "down", "cordoned", "idle"))  # type: ignore[call-overload]
        assert parts == row["capacity"] == 12 * 3600
    first = report.rows[0]
    assert first["cordoned"] == 4 * 1800  # n3 cordoned at 06:30
    assert first["unallocated"] == 2 * (3600 - 20 * 60 - 5)


def test_users_subtotals_match_the_charges_report(engine: Engine) -> None:
    users = build_report(engine, "users", "day").rows
    charges = build_report(engine, "charges", "day").rows
    subtotals = {r["budget"]: r for r in users if r["line"] == "subtotal"}
    assert sorted(subtotals) == ["lab/robotics", "lab/vision", "ops"]
    for budget, row in subtotals.items():
        lines = [r for r in users if r["budget"] == budget and r["line"] != "subtotal"]
        assert row["allocated"] == sum(int(r["allocated"]) for r in lines)  # type: ignore[call-overload]
        leaf = [r for r in charges if r["budget"] == budget]
        assert row["allocated"] == sum(int(r["allocated"]) for r in leaf)  # type: ignore[call-overload]
    assert {r["submitter"] for r in users if r["budget"] == "lab/vision"} == {"ana", "dan", "*"}
    only = build_report(engine, "users", "day", budget="lab/robotics").rows
    assert {r["budget"] for r in only} == {"lab/robotics"}


@pytest.mark.parametrize("name", ["charges", "utilisation", "users"])
def test_csv_json_and_parquet_round_trip(engine: Engine, name: str) -> None:
    report = build_report(engine, name, "hour")
    expected = output_rows(report)
    columns = output_columns(report)

    def as_text(value: Any) -> str:
        if value is None:
            return ""
        if isinstance(value, bool):
            return "true" if value else "false"
        return str(value)

    parsed = list(csv.reader(io.StringIO(render(report, "csv").decode())))
    assert parsed[0] == [c for c, _ in columns]
    assert parsed[1:] == [[as_text(row[c]) for c, _ in columns] for row in expected]

    table = pq.read_table(io.BytesIO(render(report, "parquet")))
    assert table.column_names == [c for c, _ in columns]
    assert table.schema.metadata[b"fairshare.log_position"] == report.log_position.encode()
    for got, want in zip(table.to_pylist(), expected, strict=True):
        for column, kind in columns:
            if kind == "decimal" and want[column] is not None:
                assert got[column] == float(want[column])  # type: ignore[arg-type]
            else:
                assert got[column] == want[column], column

    document = json.loads(render(report, "json"))
    assert document["report"] == name
    assert document["log_position"] == report.log_position
    assert len(document["rows"]) == len(expected)
    for got, want in zip(document["rows"], expected, strict=True):
        assert got.keys() == want.keys()


def test_regenerated_reports_are_byte_identical(engine: Engine) -> None:
    def all_bytes() -> list[bytes]:
        return [
            render(build_report(engine, name, bucket), fmt)  # type: ignore[arg-type]
            for name in ("charges", "utilisation", "users")
            for bucket in ("hour", "week")
            for fmt in ("csv", "json", "parquet")
        ]

    first = all_bytes()
    engine.dispose()  # new connections, as a later run would have
    # The same events delivered again are skipped by position: same position, same bytes.
    assert project(engine, EVENTS) == 0
    assert all_bytes() == first
    assert "demo.ledger/0@16" in build_report(engine, "charges", "day").log_position


def test_reports_over_http_and_the_cli(engine: Engine, tmp_path: Any) -> None:
    view = LiveView()
    view.feed(*EVENTS)
    app = create_app(view, InMemoryPublisher(InMemoryBroker()), default_tokens(), engine=engine)
    client = TestClient(app)
    admin = {"Authorization": "Bearer admin-token"}
    expected = render(build_report(engine, "charges", "day"), "csv")
    got = client.get("/reports/charges?bucket=day&format=csv", headers=admin)
    assert got.status_code == 200, got.text
    assert got.headers["content-type"].startswith("text/csv")
    assert got.content == expected
    parquet = client.get(
        "/reports/utilisation",
        params={
            "period": "hour",  # the old name of bucket, still understood
            "format": "parquet",
            "from": "2026-11-02T08:00",
            "to": "2026-11-02T10:00",
        },
        headers=admin,
    )
    assert parquet.status_code == 200
    assert pq.read_table(io.BytesIO(parquet.content)).num_rows == 2
    assert client.get("/reports/charges").status_code == 401
    assert client.get("/reports/nope", headers=admin).status_code == 404
    assert client.get("/reports/charges?bucket=year", headers=admin).status_code == 422
    assert client.get("/reports/charges?from=soon", headers=admin).status_code == 422

    out = tmp_path / "charges.csv"
    url = engine.url.render_as_string(hide_password=False)
    result = CliRunner().invoke(
        report_app,
        ["charges", "--database-url", url, "--bucket", "day", "--format", "csv", "--out", str(out)],
    )
    assert result.exit_code == 0, result.output
    assert out.read_bytes() == expected
    result = CliRunner().invoke(report_app, ["users", "--database-url", url, "--format", "json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["report"] == "users"


def test_entitlement_follows_shares_that_change_inside_an_hour(tmp_path: Any) -> None:
    """A budget created half-way through an hour is entitled to that half hour, and its
    sibling's share drops from then on (shares change at event times, not on the hour)."""
    from datetime import UTC, datetime

    from events import new_event
    from events.models import BudgetCreated, EventData, NodeRegistered, WorkloadSubmitted

    hour = 1_790_000_000 // 3600 * 3600

    def at(data: EventData, t: int) -> Any:
        return new_event(data, source="tests", time=datetime.fromtimestamp(t, UTC))

    events = [
        at(BudgetCreated(budget="a", created_by="admin"), hour - 3600),
        at(NodeRegistered(node="n1", cluster="c", pool="p", gpus=4, gpu_type="x"), hour - 3600),
        at(BudgetCreated(budget="b", created_by="admin"), hour + 1800),
        at(
            WorkloadSubmitted(
                workload_id="w",
                budget="a",
                pools=("p",),
                gpus=1,
                min_runtime_s=60,
                submitter="ana",
            ),
            hour + 3 * 3600,
        ),
    ]
    engine = create_engine(f"sqlite:///{tmp_path}/reports.db")
    migrate(engine)
    project(engine, events)
    rows = build_report(engine, "charges", "hour", hour, hour + 3600).rows
    entitlement = {r["budget"]: r["entitlement"] for r in rows if r["line"] == "charges"}
    # a: all 4 GPUs for the first half hour, half of them for the second; b: half of them.
    assert entitlement == {"a": 4 * 1800 + 2 * 1800, "b": 2 * 1800}
    engine.dispose()


def test_past_hours_are_priced_with_the_weights_then_in_force(database_url: str) -> None:
    """A weight change takes effect from its event time: the hours before it keep the old
    shares, and a report regenerated after the change does not re-price them."""
    from datetime import UTC, datetime

    from events import new_event
    from events.models import BudgetCreated, BudgetWeightChanged, EventData, NodeRegistered
    from tests.factories import submitted

    hour = 1_790_000_000 // 3600 * 3600

    def at(data: EventData, t: int) -> Any:
        return new_event(data, source="tests", time=datetime.fromtimestamp(t, UTC))

    events = [
        at(BudgetCreated(budget="a", weight=3, created_by="admin"), hour - 3600),
        at(BudgetCreated(budget="b", weight=1, created_by="admin"), hour - 3600),
        at(NodeRegistered(node="n1", cluster="c", pool="p", gpus=4, gpu_type="x"), hour - 3600),
        at(BudgetWeightChanged(budget="a", weight=1, changed_by="admin"), hour + 1800),
        at(BudgetWeightChanged(budget="b", weight=3, changed_by="admin"), hour + 3600),
        # the log goes on past the last hour reported
        at(submitted("w1", budget="a", pools=("p",), min_runtime_s=60), hour + 7200),
    ]
    with fresh_database(database_url) as engine:
        project(engine, events)
        rows = build_report(engine, "charges", "hour", hour - 3600, hour + 7200).rows
    entitlement = {
        (r["period_start"], r["budget"]): r["entitlement"] for r in rows if r["line"] == "charges"
    }
    before, during, after = (times.iso(hour + k * 3600) for k in (-1, 0, 1))
    # 3:1 before the change, 1:1 from half past, then 1:3 (4 GPUs).
    assert entitlement[(before, "a")] == 3 * 3600
    assert entitlement[(before, "b")] == 1 * 3600
    assert entitlement[(during, "a")] == 3 * 1800 + 2 * 1800
    assert entitlement[(during, "b")] == 1 * 1800 + 2 * 1800
    assert entitlement[(after, "a")] == 1 * 3600
    assert entitlement[(after, "b")] == 3 * 3600


def test_utilisation_integrates_nodes_joining_going_down_and_cordoned(database_url: str) -> None:
    """Capacity counts a node from its registration; down and cordoned GPU-seconds come from
    the node's state at each moment, not from its state today."""
    from datetime import UTC, datetime

    from events import new_event
    from events.models import (
        EventData,
        NodeCordoned,
        NodeDown,
        NodeRegistered,
        NodeUncordoned,
        NodeUp,
    )

    hour = 1_790_000_000 // 3600 * 3600

    def at(data: EventData, t: int) -> Any:
        return new_event(data, source="tests", time=datetime.fromtimestamp(t, UTC))

    events = [
        at(NodeRegistered(node="n1", cluster="c", pool="p", gpus=4, gpu_type="x"), hour - 60),
        at(NodeRegistered(node="n2", cluster="c", pool="p", gpus=2, gpu_type="x"), hour + 1800),
        at(NodeDown(node="n1"), hour + 600),
        at(NodeUp(node="n1"), hour + 1200),
        at(NodeCordoned(node="n2", cordoned_by="admin"), hour + 2400),
        at(NodeUncordoned(node="n2", uncordoned_by="admin"), hour + 3000),
        at(NodeRegistered(node="n3", cluster="c", pool="p", gpus=1, gpu_type="x"), hour + 7200),
    ]
    with fresh_database(database_url) as engine:
        project(engine, events)
        (row,) = build_report(engine, "utilisation", "hour", hour, hour + 3600).rows
    assert row["capacity"] == 4 * 3600 + 2 * 1800
    assert row["down"] == 4 * 600
    assert row["cordoned"] == 2 * 600
    assert row["idle"] == row["capacity"] - row["down"] - row["cordoned"]
    assert row["gpus"] == 6


@pytest.mark.parametrize("name", ["charges", "users", "utilisation"])
def test_a_report_of_one_bucket_is_that_bucket_of_the_whole(engine: Engine, name: str) -> None:
    """A report reads its range alone (the bucket sums, the preemptions and node states of
    the range): each hour's report is the whole report's rows of that hour."""
    whole = build_report(engine, name, "hour")
    assert whole.start is not None
    assert whole.end is not None
    assert any(r.get("preemptions") for r in whole.rows) or name == "utilisation"
    for start, end in buckets.tiles(whole.start, whole.end, "hour"):
        one = build_report(engine, name, "hour", start, end)
        assert one.rows == [r for r in whole.rows if r["period_start"] == times.iso(start)]
