"""The FOCUS export: the columns FOCUS 1.0 asks for, accepted by the FinOps Foundation's
validator, the same bytes for the same lines, and money that is the cost lines' money."""

from __future__ import annotations

import csv
import io
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path

import pyarrow.parquet as pq

from events.models import PriceSet
from events.times import DAY, HOUR
from projections.costs import Capacity, Charged, cost_lines
from projections.price_book import PriceBook
from services.reports.focus import COLUMNS, Billing, focus_rows, month_bounds, render_focus
from tests.focus_validator import validate

T0 = int(datetime(2026, 11, 1, tzinfo=UTC).timestamp())


def _lines() -> list:  # type: ignore[type-arg]
    book = PriceBook()
    for amount, at, budget in [
        ("2.50", T0, None),
        ("3.10", T0 + 30 * HOUR, None),
        ("2", T0, "lab"),
    ]:
        book.apply(
            PriceSet(
                pool="a100",
                currency="EUR",
                per_gpu_hour=amount,
                effective_at=datetime.fromtimestamp(at, UTC),
                budget=budget,
                set_by="admin",
            ),
            0,
        )
    rows = [Charged("w1", 1, "lab/a", "a100", T0 + h * HOUR, True, 4 * 3600) for h in range(40)]
    rows += [Charged("w2", 1, "ops/b", "a100", T0 + h * HOUR, False, 1800) for h in range(10)]
    rows += [Charged("w3", 2, "ops/b", "a100", T0 - 5 * HOUR, True, -600, True)]
    rows += [Charged("w4", 1, "ops/b", "h100", T0 + HOUR, True, 3600)]  # no price: unpriced
    cap = {
        ("a100", T0 + h * HOUR): Capacity(8 * 3600, {"lab/a": 1.0, "ops/b": 1.0}) for h in range(48)
    }
    return cost_lines(rows, book, lost={("w1", 1): 5000}, capacity=cap)


def _rows() -> list[dict[str, object]]:
    billing = Billing(T0, T0 + 30 * DAY)
    return focus_rows(_lines(), billing, submitters={"w1": "ana"}, clusters={"a100": "hpc"})


def test_the_export_passes_the_finops_foundations_validator(tmp_path: Path) -> None:
    path = tmp_path / "focus.csv"
    path.write_bytes(render_focus(_rows(), "csv"))
    passed, output = validate(path)
    assert passed, output[-3000:]


def test_the_validator_refuses_an_export_without_a_mandatory_column(tmp_path: Path) -> None:
    """So that the test above can fail: the validator is really checking."""
    table = list(csv.reader(io.StringIO(render_focus(_rows(), "csv").decode())))
    drop = table[0].index("BilledCost")
    path = tmp_path / "broken.csv"
    with path.open("w", newline="") as handle:
        csv.writer(handle).writerows(row[:drop] + row[drop + 1 :] for row in table)
    passed, output = validate(path)
    assert not passed
    assert "BilledCost" in output


def test_the_same_lines_give_the_same_bytes_and_the_money_of_the_lines() -> None:
    first, second = render_focus(_rows(), "csv"), render_focus(_rows(), "csv")
    assert first == second
    assert render_focus(_rows(), "parquet") == render_focus(_rows(), "parquet")
    table = list(csv.DictReader(io.StringIO(first.decode())))
    assert list(table[0]) == [name for name, _ in COLUMNS]
    billed = sum(Decimal(row["BilledCost"]) for row in table)
    assert billed == sum(line.billed_cost for line in _lines())
    kinds = {row["x_CostKind"] for row in table}
    assert kinds == {"usage", "burst", "lost", "idle"}
    correction = [row for row in table if row["ChargeClass"] == "Correction"]
    assert [row["ResourceId"] for row in correction] == ["w3"]
    burst = [row for row in table if row["x_Funding"] == "burst"]
    assert all(Decimal(row["BilledCost"]) == 0 < Decimal(row["ListCost"]) for row in burst)


def test_parquet_holds_the_same_rows_with_typed_columns(tmp_path: Path) -> None:
    path = tmp_path / "focus.parquet"
    path.write_bytes(render_focus(_rows(), "parquet"))
    table = pq.read_table(path)
    assert table.column_names == [name for name, _ in COLUMNS]
    assert sum(table.column("BilledCost").to_pylist()) == sum(line.billed_cost for line in _lines())
    # Parquet keeps seconds as milliseconds
    assert str(table.schema.field("ChargePeriodStart").type) == "timestamp[ms, tz=UTC]"


def test_a_month_is_its_utc_calendar_month() -> None:
    assert month_bounds("2026-12") == (T0 + 30 * DAY, T0 + 61 * DAY)
