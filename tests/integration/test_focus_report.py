"""The FOCUS chargeback over real read models, on SQLite and PostgreSQL: it passes the FinOps
Foundation's validator, its funded BilledCost is the ledger's GPU-seconds times the prices in
force to the cent, it is byte-identical when regenerated and the same over the CLI and HTTP,
and a late charge for a sealed month is a correction in the next month, not an edit."""

from __future__ import annotations

import csv
import io
from collections.abc import Iterator
from datetime import UTC, datetime
from decimal import Decimal
from fractions import Fraction
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import Engine, select
from typer.testing import CliRunner

from events import new_event
from events.envelope import derived_event_id
from events.models import LedgerCharge, PeriodClosed, charge_id
from events.models.ledger import signed_seconds
from services.api import create_app, default_tokens
from services.api.view import LiveView
from services.bus.memory import InMemoryBroker, InMemoryPublisher
from services.devtools.demo_data import POOL, T0, project
from services.read_models.tables import closed_periods, ledger_entries
from services.reports.cli import report_app
from services.reports.costs import budget_money
from services.reports.focus import month_bounds
from services.reports.focus_export import focus_bytes
from services.reports.prices import read_price_book
from tests.databases import fresh_database
from tests.factories import sample_payloads
from tests.focus_validator import validate
from tests.priced_lab import priced_lab

pytestmark = [pytest.mark.database]
MONTH = "2026-11"


def _events() -> list[Any]:
    """The small lab's morning with list prices, a change mid-run and a negotiated rate."""
    return priced_lab()


@pytest.fixture
def engine(database_url: str) -> Iterator[Engine]:
    with fresh_database(database_url) as engine:
        project(engine, _events())
        yield engine


def _table(content: bytes) -> list[dict[str, str]]:
    return list(csv.DictReader(io.StringIO(content.decode())))


@pytest.mark.slow  # 14-32 s: the default run stays under 10 minutes; CI runs it with -m slow
def test_the_export_passes_the_validator_and_reconciles_with_the_ledger(
    engine: Engine, tmp_path: Path
) -> None:
    content = focus_bytes(engine, MONTH, "csv")
    path = tmp_path / "focus.csv"
    path.write_bytes(content)
    passed, output = validate(path)
    assert passed, output[-3000:]
    rows = _table(content)
    with engine.connect() as connection:
        book = read_price_book(connection)
        entries = connection.execute(select(ledger_entries)).all()
    expected = Fraction(0)
    listed = Fraction(0)
    for entry in entries:
        hour = int(entry.bucket_start)
        seconds = signed_seconds(int(entry.gpu_seconds), entry.debit_account)
        listed += (
            Fraction(seconds) * Fraction(book.list_price(entry.pool, hour).per_gpu_hour) / 3600
        )  # type: ignore[union-attr]
        if entry.kind == "allocated":
            rate = book.effective_price(entry.pool, entry.budget, hour).per_gpu_hour  # type: ignore[union-attr]
            expected += Fraction(seconds) * Fraction(rate) / 3600
    work = [row for row in rows if row["x_CostKind"] != "idle"]
    billed = sum(Decimal(row["BilledCost"]) for row in work)
    assert abs(Fraction(billed) - expected) < Fraction(1, 200), (billed, float(expected))
    assert abs(Fraction(sum(Decimal(r["ListCost"]) for r in work)) - listed) < Fraction(1, 200)
    assert {row["x_CostKind"] for row in rows} >= {"usage", "lost", "idle"}
    assert {row["ListUnitPrice"] for row in work} == {"2.35", "3.10"}
    vision = {row["ContractedUnitPrice"] for row in work if row["SubAccountId"] == "lab/vision"}
    assert vision == {"1.999999"}
    seconds = sum(int(row["x_GpuSeconds"]) for row in work)
    assert seconds == sum(signed_seconds(int(e.gpu_seconds), e.debit_account) for e in entries)


def test_regenerated_it_is_byte_identical_and_the_same_over_the_cli_and_http(
    engine: Engine, tmp_path: Path
) -> None:
    first = focus_bytes(engine, MONTH, "csv")
    assert focus_bytes(engine, MONTH, "csv") == first
    assert focus_bytes(engine, MONTH, "parquet") == focus_bytes(engine, MONTH, "parquet")
    out = tmp_path / "cli.csv"
    url = engine.url.render_as_string(hide_password=False)
    done = CliRunner().invoke(
        report_app, ["focus", "--month", MONTH, "--database-url", url, "--out", str(out)]
    )
    assert done.exit_code == 0, done.output
    assert out.read_bytes() == first
    app = create_app(
        LiveView(), InMemoryPublisher(InMemoryBroker()), default_tokens(), engine=engine
    )
    client = TestClient(app)
    admin = {"Authorization": "Bearer admin-token"}
    answer = client.get("/reports/focus", params={"month": MONTH}, headers=admin)
    assert answer.status_code == 200, answer.text
    assert answer.headers["content-type"].startswith("text/csv")
    assert answer.content == first
    assert (
        client.get("/reports/focus", params={"month": "2026-13"}, headers=admin).status_code == 422
    )
    assert client.get("/reports/focus", params={"month": MONTH}).status_code == 401


def test_a_late_charge_for_a_sealed_month_is_a_correction_in_the_next(database_url: str) -> None:
    events = _events()
    with fresh_database(database_url) as engine:
        project(engine, events)
        with engine.connect() as connection:
            ledger_end = connection.execute(
                select(ledger_entries.c.ledger_offset).order_by(
                    ledger_entries.c.ledger_offset.desc()
                )
            ).scalar()
        seal = next(p for p in sample_payloads() if isinstance(p, PeriodClosed))
        cut = seal.model_copy(
            update={"as_of": (seal.as_of[0].model_copy(update={"offset": ledger_end + 1}),)}
        )
        hour = int(T0.timestamp()) // 3600
        late = LedgerCharge(
            charge_id=charge_id("vision-train-1", 1, hour, 2),
            workload_id="vision-train-1",
            budget="lab/vision",
            pool=POOL,
            bucket_start=T0,
            kind="allocated",
            debit_account="budget:lab/vision",
            credit_account=f"capacity:{POOL}",
            gpu_seconds=900,
            amount=900,
            corrects=charge_id("vision-train-1", 1, hour, 0),
        )
        at = datetime(2026, 12, 3, tzinfo=UTC)
        project(
            engine,
            [
                *events,
                new_event(cut, source="tests", time=at, event_id=derived_event_id("seal", "1")),
                new_event(late, source="tests", time=at, event_id=derived_event_id("late", "1")),
            ],
        )
        with engine.connect() as connection:
            assert connection.execute(select(closed_periods.c.period)).scalars().all() == [MONTH]
        november = _table(focus_bytes(engine, MONTH, "csv"))
        december = _table(focus_bytes(engine, "2026-12", "csv"))
    assert all(row["ChargeClass"] == "" for row in november)
    corrections = [row for row in december if row["ChargeClass"] == "Correction"]
    assert [(r["ResourceId"], r["x_GpuSeconds"], r["ListUnitPrice"]) for r in corrections] == [
        ("vision-train-1", "900", "2.35")
    ]
    assert corrections[0]["ChargePeriodStart"] == T0.strftime("%Y-%m-%dT%H:%M:%SZ")
    assert corrections[0]["BillingPeriodStart"] == "2026-12-01T00:00:00Z"


def test_a_budgets_statement_is_the_sum_of_its_focus_rows(engine: Engine) -> None:
    rows = _table(focus_bytes(engine, MONTH, "csv"))
    start, end = month_bounds(MONTH)
    for budget in ("", "lab", "lab/vision"):
        money = budget_money(engine, budget, start, end)
        mine = [
            r
            for r in rows
            if budget == ""
            or r["SubAccountId"] in (budget,)
            or r["SubAccountId"].startswith(budget + "/")
        ]
        assert money.statement.billed == sum(Decimal(r["BilledCost"]) for r in mine), budget
        assert money.forecast.spent == money.statement.billed
        assert money.forecast.at_entitlement >= money.forecast.spent
    assert budget_money(engine, "lab", start, end).statement.currency == "EUR"
