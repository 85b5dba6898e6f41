"""Writing a report as CSV, JSON or Parquet: deterministic bytes for the same report.

GPU-seconds columns are written twice: exact integer ``<name>_gpu_s`` and ``<name>_gpu_h``
(hours, 6 decimals, rounded half to even). Ratios have 6 decimals. In CSV these are fixed-point
text; in JSON numbers; in Parquet ``int64`` and ``float64``. Missing values: empty in CSV,
``null`` in JSON and Parquet. Nothing depends on the wall clock or the machine.
"""

from __future__ import annotations

import csv
import io
import json
from decimal import Decimal
from fractions import Fraction
from typing import Any, Literal, get_args

from services.reports.model import Column, Report, Value

Format = Literal["csv", "json", "parquet"]
FORMATS: tuple[str, ...] = get_args(Format)
MEDIA_TYPES = {
    "csv": "text/csv; charset=utf-8",
    "json": "application/json",
    "parquet": "application/vnd.apache.parquet",
}


def to_decimal(value: Fraction) -> Decimal:
    """``value`` rounded half to even to 6 decimals, in exact integer arithmetic."""
    scaled = value * 10**6
    whole, rest = divmod(scaled.numerator, scaled.denominator)
    twice = 2 * rest
    if twice > scaled.denominator or (twice == scaled.denominator and whole % 2):
        whole += 1
    return Decimal(whole).scaleb(-6)


def hours(gpu_s: int) -> Decimal:
    return to_decimal(Fraction(gpu_s, 3600))


def output_columns(report: Report) -> list[tuple[str, str]]:
    """(name, kind) of every written column; ``gpu_s`` columns become ``_gpu_s`` (int) and
    ``_gpu_h`` (decimal)."""
    out: list[tuple[str, str]] = []
    for column in report.columns:
        if column.kind == "gpu_s":
            out += [(f"{column.name}_gpu_s", "int"), (f"{column.name}_gpu_h", "decimal")]
        elif column.kind == "ratio":
            out.append((column.name, "decimal"))
        else:
            out.append((column.name, column.kind))
    return out


def output_rows(report: Report) -> list[dict[str, Decimal | str | int | bool | None]]:
    """The rows as written: hours and ratios as 6-decimal :class:`Decimal`."""
    rows = []
    for row in report.rows:
        out: dict[str, Decimal | str | int | bool | None] = {}
        for column in report.columns:
            value = row.get(column.name)
            if column.kind == "gpu_s":
                seconds = value if isinstance(value, int) and not isinstance(value, bool) else None
                out[f"{column.name}_gpu_s"] = seconds
                out[f"{column.name}_gpu_h"] = None if seconds is None else hours(seconds)
            elif column.kind == "ratio":
                out[column.name] = _ratio(value)
            else:
                out[column.name] = value if not isinstance(value, Fraction) else str(value)
        rows.append(out)
    return rows


def _ratio(value: Value) -> Decimal | None:
    if value is None or isinstance(value, str | bool):
        return None
    return to_decimal(Fraction(value))


def _text(value: Decimal | str | int | bool | None) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def to_csv(report: Report) -> bytes:
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    columns = output_columns(report)
    writer.writerow([name for name, _ in columns])
    for row in output_rows(report):
        writer.writerow([_text(row[name]) for name, _ in columns])
    return buffer.getvalue().encode("utf-8")


def _json_value(value: Decimal | str | int | bool | None) -> Any:
    return float(value) if isinstance(value, Decimal) else value


def metadata(report: Report) -> dict[str, Any]:
    from services.reports.times import iso

    return {
        "report": report.name,
        "period": report.bucket,
        "from": None if report.start is None else iso(report.start),
        "to": None if report.end is None else iso(report.end),
        "as_of": None if report.as_of is None else iso(report.as_of),
        "log_position": report.log_position,
    }


def to_json(report: Report) -> bytes:
    document = {
        **metadata(report),
        "columns": [{"name": name, "type": kind} for name, kind in output_columns(report)],
        "rows": [{k: _json_value(v) for k, v in row.items()} for row in output_rows(report)],
    }
    return (json.dumps(document, ensure_ascii=False, indent=1) + "\n").encode("utf-8")


def to_parquet(report: Report) -> bytes:
    import pyarrow as pa
    import pyarrow.parquet as pq

    types = {"str": pa.string(), "int": pa.int64(), "bool": pa.bool_(), "decimal": pa.float64()}
    columns = output_columns(report)
    rows = output_rows(report)
    arrays = [
        pa.array([_json_value(row[name]) for row in rows], type=types[kind])
        for name, kind in columns
    ]
    meta: dict[bytes | str, bytes | str] = {
        f"fairshare.{k}": "" if v is None else str(v) for k, v in metadata(report).items()
    }
    schema = pa.schema([pa.field(name, types[kind]) for name, kind in columns], metadata=meta)
    table = pa.Table.from_arrays(arrays, schema=schema)
    sink = io.BytesIO()
    pq.write_table(table, sink, compression="zstd", write_statistics=True)
    return sink.getvalue()


def render(report: Report, fmt: Format) -> bytes:
    if fmt == "csv":
        return to_csv(report)
    if fmt == "json":
        return to_json(report)
    if fmt == "parquet":
        return to_parquet(report)
    raise ValueError(f"format: one of {', '.join(FORMATS)}, not {fmt!r}")


__all__ = ["FORMATS", "MEDIA_TYPES", "Column", "Format", "render"]
