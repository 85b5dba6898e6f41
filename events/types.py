"""Constrained field types shared by every event model.

Events are the system of record: a value that slips in malformed (a naive time, a negative GPU
count, an empty id) would be replayed forever. So the constraints live in the types, and every
model uses them instead of bare ``str``/``int``.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Any

from pydantic import Field, GetCoreSchemaHandler, StringConstraints
from pydantic_core import core_schema

#: Longest contract a workload may ask for, system-wide (docs/design.md section 2.2: a default
#: cap of 8 h).
#: A pool may set a lower cap; the scheduling core checks that one.
MAX_MIN_RUNTIME_S = 8 * 3600


def _to_utc(value: datetime) -> datetime:
    return value.astimezone(UTC)


class _UtcDateTimeSchema:
    """Aware date-times, normalised to UTC so that equal instants serialise to equal bytes
    (replay determinism). A time already at offset 0 (every time Fairshare writes) is accepted
    by pydantic-core alone; only other offsets reach the Python conversion. An audit decodes
    millions of times, and a Python call per time field was a tenth of its cost."""

    @classmethod
    def __get_pydantic_core_schema__(
        cls, source: Any, handler: GetCoreSchemaHandler
    ) -> core_schema.CoreSchema:
        return core_schema.union_schema(
            [
                core_schema.datetime_schema(tz_constraint=0),
                core_schema.no_info_after_validator_function(
                    _to_utc, core_schema.datetime_schema(tz_constraint="aware")
                ),
            ],
            mode="left_to_right",
            custom_error_type="datetime_utc",
            custom_error_message=(
                "Input should be a date-time with a timezone "
                "(RFC 3339, e.g. 2026-01-01T00:00:00Z); naive times are ambiguous"
            ),
        )


_UNIX_EPOCH_ORDINAL = 719163  # date(1970, 1, 1).toordinal()


def utc_epoch_seconds(value: datetime) -> int:
    """Whole seconds since the Unix epoch (floored) of a :data:`UtcDateTime` value.

    Folds take the time of every event; ``datetime.timestamp()`` asks the tzinfo for its
    offset, which for pydantic's UTC costs three times the arithmetic. Every UtcDateTime has
    offset 0 by validation, so the calendar fields are already UTC.
    """
    if value.tzinfo is None:
        raise ValueError("a naive datetime has no defined instant")
    return (
        (value.toordinal() - _UNIX_EPOCH_ORDINAL) * 86400
        + value.hour * 3600
        + value.minute * 60
        + value.second
    )


#: An aware timestamp, normalised to UTC. Naive datetimes are rejected: their meaning depends on
#: the machine that wrote them, which an auditor cannot know.
UtcDateTime = Annotated[datetime, _UtcDateTimeSchema]

#: A non-empty identifier without whitespace (client-generated workload ids, users, nodes).
Identifier = Annotated[str, StringConstraints(min_length=1, max_length=256, pattern=r"^\S+$")]

#: A budget's path in the organisation tree, e.g. ``lab/robotics/sim2real``.
BudgetPath = Annotated[
    str,
    StringConstraints(
        min_length=1,
        max_length=512,
        pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*(/[A-Za-z0-9][A-Za-z0-9_.-]*)*$",
    ),
]

#: A pool: a cluster, or a GPU type within one (``cluster-a`` or ``cluster-a/h100``).
PoolName = Annotated[
    str,
    StringConstraints(min_length=1, max_length=128, pattern=r"^[A-Za-z0-9][A-Za-z0-9_.:/-]*$"),
]

#: A count of GPUs: at least one.
GpuCount = Annotated[int, Field(ge=1, le=1_000_000)]

#: A GPU's index on its node.
GpuIndex = Annotated[int, Field(ge=0, le=1023)]

#: Whole seconds, never negative.
Seconds = Annotated[int, Field(ge=0)]

#: Integer GPU-seconds: the unit of every charge (docs/design.md section 2.8).
GpuSeconds = Annotated[int, Field(ge=0)]

#: A contract length: 0 (unallocated, free, preemptible) up to the system cap.
MinRuntimeSeconds = Annotated[int, Field(ge=0, le=MAX_MIN_RUNTIME_S)]

#: A positive, finite weight set by whoever manages the parent budget.
Weight = Annotated[float, Field(gt=0, le=1e9, allow_inf_nan=False)]

#: Free text kept short enough to ride in a Kafka header or a table cell.
ShortText = Annotated[str, StringConstraints(max_length=2000)]
