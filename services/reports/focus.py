"""The chargeback export in FOCUS 1.0 (the FinOps Open Cost and Usage Specification), the
format finance tools import: one row per cost line (:mod:`projections.costs`).

Columns: every FOCUS 1.0 column, in the specification's names, and ``x_`` columns for
Fairshare's own figures. The FinOps Foundation's validator (PyPI ``focus-validator`` 1.0.0, the
release Python 3.11 resolves to) still checks five columns under their 1.0-preview names
(``Provider``, ``Publisher``, ``InvoiceIssuer``, ``ResourceID``, and ``ChargeType``, which 1.0
renamed ``ChargeCategory``); the export carries those too, with the same values, so that it
passes that validator and reads in tools that know only the final names.

Deterministic: rows in the cost lines' order, fixed-point money with 6 decimals, times in UTC
ISO 8601 with a Z, so the same log gives the same bytes (CSV and Parquet alike).
"""

from __future__ import annotations

import csv
import io
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal
from typing import Literal

import orjson

from events.times import HOUR
from projections.costs import PLATFORM, CostLine
from projections.money import PLACES

FocusFormat = Literal["csv", "parquet"]
FOCUS_FORMATS: tuple[FocusFormat, ...] = ("csv", "parquet")
MEDIA_TYPES = {"csv": "text/csv; charset=utf-8", "parquet": "application/vnd.apache.parquet"}

#: (name, type) of every column, in order. Types: decimal, datetime, string, json.
COLUMNS: tuple[tuple[str, str], ...] = (
    ("AvailabilityZone", "string"),
    ("BilledCost", "decimal"),
    ("BillingAccountId", "string"),
    ("BillingAccountName", "string"),
    ("BillingCurrency", "string"),
    ("BillingPeriodEnd", "datetime"),
    ("BillingPeriodStart", "datetime"),
    ("ChargeCategory", "string"),
    ("ChargeClass", "string"),
    ("ChargeDescription", "string"),
    ("ChargeFrequency", "string"),
    ("ChargePeriodEnd", "datetime"),
    ("ChargePeriodStart", "datetime"),
    ("CommitmentDiscountCategory", "string"),
    ("CommitmentDiscountId", "string"),
    ("CommitmentDiscountName", "string"),
    ("CommitmentDiscountStatus", "string"),
    ("CommitmentDiscountType", "string"),
    ("ConsumedQuantity", "decimal"),
    ("ConsumedUnit", "string"),
    ("ContractedCost", "decimal"),
    ("ContractedUnitPrice", "decimal"),
    ("EffectiveCost", "decimal"),
    ("InvoiceIssuerName", "string"),
    ("ListCost", "decimal"),
    ("ListUnitPrice", "decimal"),
    ("PricingCategory", "string"),
    ("PricingQuantity", "decimal"),
    ("PricingUnit", "string"),
    ("ProviderName", "string"),
    ("PublisherName", "string"),
    ("RegionId", "string"),
    ("RegionName", "string"),
    ("ResourceId", "string"),
    ("ResourceName", "string"),
    ("ResourceType", "string"),
    ("ServiceCategory", "string"),
    ("ServiceName", "string"),
    ("SkuId", "string"),
    ("SkuPriceId", "string"),
    ("SubAccountId", "string"),
    ("SubAccountName", "string"),
    ("Tags", "json"),
    # the 1.0-preview names the validator 1.0.0 checks (see the module's docstring)
    ("ChargeType", "string"),
    ("InvoiceIssuer", "string"),
    ("Provider", "string"),
    ("Publisher", "string"),
    ("ResourceID", "string"),
    # Fairshare's own
    ("x_CostKind", "string"),
    ("x_Funding", "string"),
    ("x_GpuSeconds", "int"),
    ("x_IdleMethod", "string"),
    ("x_Pool", "string"),
    ("x_Priced", "string"),
    ("x_Submitter", "string"),
)

GPU_HOURS = "GPU-Hours"
_DESCRIPTIONS = {
    "usage": "GPU time of funded work",
    "burst": "GPU time of burst work (free, list value shown)",
    "lost": "GPU time lost to preemption (work the run did not keep)",
    "idle": "Idle and unrecovered capacity",
}


@dataclass(frozen=True)
class Billing:
    """Who bills whom, and for which period."""

    start: int
    end: int
    #: The root of the budget tree, as an account.
    account_id: str = "fairshare"
    account_name: str = "Fairshare"
    invoice_issuer: str = "Fairshare"
    provider: str = "Fairshare"
    #: The billing currency of lines no price covers (they cost 0 in it).
    currency: str = "EUR"


def focus_rows(
    lines: Sequence[CostLine],
    billing: Billing,
    *,
    submitters: Mapping[str, str],
    clusters: Mapping[str, str],
) -> list[dict[str, object]]:
    """One FOCUS row per line (``submitters``: workload -> who submitted it; ``clusters``:
    pool -> the cluster it runs on, FOCUS's region)."""
    return [_row(line, billing, submitters, clusters) for line in lines]


def _row(
    line: CostLine, billing: Billing, submitters: Mapping[str, str], clusters: Mapping[str, str]
) -> dict[str, object]:
    work = line.kind != "idle"
    quantity = _hours(line.gpu_s) if work else None
    funding = "funded" if line.allocated else "burst"
    who = submitters.get(line.workload_id or "", "") if work else ""
    region = clusters.get(line.pool, line.pool)
    description = _DESCRIPTIONS[line.kind] + f" in pool {line.pool}"
    if line.kind == "idle":
        description += f", allocated by {line.method}"
    if line.correction:
        description += ", a late correction of a closed period"
    if not line.priced:
        description += " (no list price in force: not priced)"
    sku_price = f"{line.pool}:{line.list_unit_price}" if line.priced else f"{line.pool}:unpriced"
    tags = {
        "fairshare/pool": line.pool,
        "fairshare/funding": funding if work else "idle",
        "fairshare/org-path": line.budget,
    }
    if who:
        tags["fairshare/user"] = who
    row: dict[str, object] = {
        "AvailabilityZone": None,
        "BilledCost": line.billed_cost,
        "BillingAccountId": billing.account_id,
        "BillingAccountName": billing.account_name,
        "BillingCurrency": line.currency or billing.currency,
        "BillingPeriodEnd": _time(billing.end),
        "BillingPeriodStart": _time(billing.start),
        "ChargeCategory": "Usage",
        "ChargeClass": "Correction" if line.correction else None,
        "ChargeDescription": description,
        "ChargeFrequency": "Usage-Based",
        "ChargePeriodEnd": _time(line.end),
        "ChargePeriodStart": _time(line.start),
        "CommitmentDiscountCategory": None,
        "CommitmentDiscountId": None,
        "CommitmentDiscountName": None,
        "CommitmentDiscountStatus": None,
        "CommitmentDiscountType": None,
        "ConsumedQuantity": quantity,
        "ConsumedUnit": GPU_HOURS if work else None,
        "ContractedCost": line.effective_cost,
        "ContractedUnitPrice": line.effective_unit_price if work and line.priced else None,
        "EffectiveCost": line.effective_cost,
        "InvoiceIssuerName": billing.invoice_issuer,
        "ListCost": line.list_cost,
        "ListUnitPrice": line.list_unit_price if line.priced else None,
        "PricingCategory": "Standard" if line.allocated and work else "Other",
        "PricingQuantity": quantity,
        "PricingUnit": GPU_HOURS if work else None,
        "ProviderName": billing.provider,
        "PublisherName": billing.provider,
        "RegionId": region,
        "RegionName": region,
        "ResourceId": line.workload_id,
        "ResourceName": line.workload_id,
        "ResourceType": "GPU workload" if work else None,
        "ServiceCategory": "Compute",
        "ServiceName": "GPU time",
        "SkuId": line.pool,
        "SkuPriceId": sku_price,
        "SubAccountId": line.budget,
        "SubAccountName": "platform" if line.budget == PLATFORM else line.budget.rpartition("/")[2],
        "Tags": tags,
        "ChargeType": "Usage",
        "InvoiceIssuer": billing.invoice_issuer,
        "Provider": billing.provider,
        "Publisher": billing.provider,
        "ResourceID": line.workload_id,
        "x_CostKind": line.kind,
        "x_Funding": funding if work else "idle",
        "x_GpuSeconds": line.gpu_s,
        "x_IdleMethod": line.method or None,
        "x_Pool": line.pool,
        "x_Priced": "true" if line.priced else "false",
        "x_Submitter": who or None,
    }
    return row


def _hours(gpu_s: int) -> Decimal:
    exact = Decimal(gpu_s) / Decimal(HOUR)
    return exact.quantize(Decimal(1).scaleb(-PLACES))


def _time(at: int) -> str:
    return datetime.fromtimestamp(at, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _text(value: object) -> str:
    if value is None:
        return ""
    if isinstance(value, Decimal):
        return format(value, "f")
    if isinstance(value, dict):
        return orjson.dumps(value, option=orjson.OPT_SORT_KEYS).decode()
    return str(value)


def to_csv(rows: Sequence[Mapping[str, object]]) -> bytes:
    out = io.StringIO(newline="")
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow([name for name, _ in COLUMNS])
    for row in rows:
        writer.writerow([_text(row[name]) for name, _ in COLUMNS])
    return out.getvalue().encode()


def to_parquet(rows: Sequence[Mapping[str, object]]) -> bytes:
    import pyarrow as pa
    import pyarrow.parquet as pq

    types: dict[str, pa.DataType] = {
        "decimal": pa.decimal128(24, PLACES),
        "datetime": pa.timestamp("s", tz="UTC"),
        "string": pa.string(),
        "json": pa.string(),
        "int": pa.int64(),
    }
    arrays = []
    for name, kind in COLUMNS:
        values = [row[name] for row in rows]
        if kind == "datetime":
            values = [None if v is None else _parse_time(str(v)) for v in values]
        elif kind == "json":
            values = [None if v is None else _text(v) for v in values]
        arrays.append(pa.array(values, type=types[kind]))
    schema = pa.schema([pa.field(name, types[kind]) for name, kind in COLUMNS])
    sink = io.BytesIO()
    pq.write_table(pa.Table.from_arrays(arrays, schema=schema), sink, compression="zstd")
    return sink.getvalue()


def _parse_time(text: str) -> datetime:
    return datetime.strptime(text, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)


def render_focus(rows: Sequence[Mapping[str, object]], fmt: FocusFormat) -> bytes:
    if fmt == "csv":
        return to_csv(rows)
    if fmt == "parquet":
        return to_parquet(rows)
    raise ValueError(f"format: one of {', '.join(FOCUS_FORMATS)}, not {fmt!r}")


def month_bounds(text: str) -> tuple[int, int]:
    """``2026-11`` -> the month's [start, end) in epoch seconds (UTC)."""
    try:
        first = datetime.strptime(text, "%Y-%m").replace(tzinfo=UTC)
    except ValueError as error:
        raise ValueError(f"a month is YYYY-MM, not {text!r}") from error
    following = first.replace(year=first.year + first.month // 12, month=first.month % 12 + 1)
    return int(first.timestamp()), int(following.timestamp())
