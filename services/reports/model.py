"""A report: typed columns, rows of exact values, and where in the log they were computed.

Rows hold exact values only: integer GPU-seconds, :class:`~fractions.Fraction` ratios, strings,
booleans, ``None`` for "not applicable". Hours and ratios are formatted by the writers
(:mod:`services.reports.writers`), once, at output.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from fractions import Fraction
from typing import Literal

#: ``gpu_s``: integer GPU-seconds, written as two columns, ``<name>_gpu_s`` and ``<name>_gpu_h``.
Kind = Literal["str", "int", "bool", "gpu_s", "ratio"]
Value = str | int | bool | Fraction | None


@dataclass(frozen=True)
class Column:
    name: str
    kind: Kind
    doc: str = ""


@dataclass
class Report:
    name: str
    bucket: str
    #: The buckets reported, ``[start, end)`` (epoch seconds), None when there was no data.
    start: int | None
    end: int | None
    #: The horizon: the latest event time in the read models (never the wall clock).
    as_of: int | None
    #: Where the projector had read the log to (``topic/partition@next_offset;...``).
    log_position: str
    columns: tuple[Column, ...]
    rows: list[dict[str, Value]] = field(default_factory=list)
