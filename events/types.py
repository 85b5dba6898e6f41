"""Constrained field types shared by every event model.

Events are the system of record: a value that slips in malformed (a naive time, a negative GPU
count, an empty id) would be replayed forever. So the constraints live in the types, and every
model uses them instead of bare ``str``/``int``.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, Field, GetCoreSchemaHandler, JsonValue, StringConstraints
from pydantic_core import core_schema

from events.arrays import ELEMENT_SUFFIX_CHARS, MAX_EXPRESSION_CHARS, parse_indices

#: Longest contract a workload may ask for, system-wide (docs/design.md section 2.2: a default
#: cap of 8 h).
#: A pool may set a lower cap; the scheduling core checks that one.
MAX_MIN_RUNTIME_S = 8 * 3600

#: A pool's time limits when nobody set them (docs/design.md section 2.2, like Slurm's
#: ``DefaultTime``/``MaxTime``): work that declares no limit may run 24 h; none may ask for more
#: than 7 days.
DEFAULT_TIME_LIMIT_S = 24 * 3600
DEFAULT_MAX_TIME_LIMIT_S = 7 * 86400
#: The longest limit any workload or pool may state at all (a year): a bound on the values the
#: log may carry, not a policy.
TIME_LIMIT_CAP_S = 366 * 86400


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

#: The one character set of ids and names (workload ids, users, nodes, clusters): letters,
#: digits and ``. _ : @ / -``. No whitespace, no control or escape character, nothing a terminal
#: would interpret; a path built from one is still built from its hash (the local agent's run
#: directories), never from the id itself.
ID_PATTERN = r"^[A-Za-z0-9._:@/-]+$"
#: The longest id a client may choose.
MAX_ID_LENGTH = 128

#: A client's or an operator's id (workload ids, users, nodes, clusters, GPU types).
Identifier = Annotated[
    str, StringConstraints(min_length=1, max_length=MAX_ID_LENGTH, pattern=ID_PATTERN)
]

#: Where a node sits in the network (a block, a rack), named as its cluster names it: the
#: characters of an id, or "" when nobody said (placement then treats the node as near no other).
TopologyName = Annotated[
    str, StringConstraints(max_length=MAX_ID_LENGTH, pattern=r"^[A-Za-z0-9._:@/-]*$")
]

#: An id the system derives from a client's (``place:<workload>:<attempt>``, charge ids): the
#: same characters, with room for what is added around the client's id.
DerivedId = Annotated[str, StringConstraints(min_length=1, max_length=300, pattern=ID_PATTERN)]

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

#: Integer GPU-seconds: the unit of every charge (docs/design.md section 2.9).
GpuSeconds = Annotated[int, Field(ge=0)]

#: A contract length: 0 (unallocated, free, preemptible) up to the system cap.
MinRuntimeSeconds = Annotated[int, Field(ge=0, le=MAX_MIN_RUNTIME_S)]

#: How long one run of a workload may last before its agent stops it (its time limit).
TimeLimitSeconds = Annotated[int, Field(ge=1, le=TIME_LIMIT_CAP_S)]

#: A positive, finite weight set by whoever manages the parent budget.
Weight = Annotated[float, Field(gt=0, le=1e9, allow_inf_nan=False)]

#: Free text may hold tab and newline, but no other C0 control character, no DEL (a NUL breaks
#: PostgreSQL, escapes rewrite a terminal) and, since validation works on Unicode scalar values,
#: no lone surrogate.
TEXT_PATTERN = r"^[^\x00-\x08\x0B-\x1F\x7F]*$"

#: Free text kept short enough to ride in a Kafka header or a table cell.
ShortText = Annotated[str, StringConstraints(max_length=2000, pattern=TEXT_PATTERN)]

#: The largest ``spec`` of a workload, as JSON: far below the broker's message size, so a
#: submission that passes validation is never refused by the log.
MAX_SPEC_BYTES = 64 * 1024
#: How deep a ``spec`` may nest.
MAX_SPEC_DEPTH = 32


class SpecTooLargeError(ValueError):
    """A spec over :data:`MAX_SPEC_BYTES` (the API answers 413 for it, not 422)."""


def checked_spec(spec: dict[str, Any]) -> dict[str, Any]:
    """Every string of a spec (keys too) is text as :data:`TEXT_PATTERN` allows it, every
    number is finite (JSON has no NaN: a serialiser would write ``null`` or fail), the nesting
    is at most :data:`MAX_SPEC_DEPTH` deep and the JSON at most :data:`MAX_SPEC_BYTES`. The size
    is counted while walking (UTF-8 bytes of the strings plus punctuation), an upper bound of
    the compact JSON's size, so no serialiser is needed here."""
    size = _spec_size(spec, 0)
    if size > MAX_SPEC_BYTES:
        raise SpecTooLargeError(f"spec is over {MAX_SPEC_BYTES} bytes as JSON (the cap of a spec)")
    return spec


def _spec_size(value: Any, depth: int) -> int:
    if depth > MAX_SPEC_DEPTH:
        raise ValueError(f"spec nests deeper than {MAX_SPEC_DEPTH} levels")
    if isinstance(value, str):
        return _text_size(value)
    if isinstance(value, bool) or value is None:
        return 5
    if isinstance(value, int):
        return len(str(value)) if abs(value) < 10**30 else _too_long_number()
    if isinstance(value, float):
        if value != value or value in (float("inf"), float("-inf")):
            raise ValueError("spec: NaN and Infinity are not JSON numbers")
        return 24
    if isinstance(value, dict):
        return 2 + sum(_text_size(k) + 2 + _spec_size(v, depth + 1) for k, v in value.items())
    if isinstance(value, list | tuple):
        return 2 + sum(_spec_size(v, depth + 1) + 1 for v in value)
    raise ValueError(f"spec: {type(value).__name__} is not a JSON value")


def _too_long_number() -> int:
    raise ValueError("spec: integers are limited to 30 digits")


def _text_size(text: str) -> int:
    if _CONTROL.search(text):
        raise ValueError("spec: strings may not hold control characters (tab and newline only)")
    try:
        return len(text.encode()) + 2
    except UnicodeEncodeError:
        raise ValueError("spec: strings may not hold lone surrogates") from None


_CONTROL = re.compile(r"[\x00-\x08\x0B-\x1F\x7F]")

#: A workload's spec: opaque to the scheduler (the agent's business), but JSON a log can keep.
Spec = Annotated[dict[str, JsonValue], AfterValidator(checked_spec)]


# -- kinds the events and the API's answers share ------------------------------------------------
# Here rather than beside their events, so that the CLI checks an answer without building the
# event classes (the workload events' module took 46 ms of every command that read an answer).

#: How a gang lays its GPUs over nodes.
GangShape = Literal["single-node", "whole-nodes"]
#: A member's role in a budget.
Role = Literal["member", "manager"]
#: An ISO 4217 code's shape (whether the code exists is the API's check: the list changes,
#: a fact already on the log must keep reading).
CurrencyCode = Annotated[str, StringConstraints(pattern=r"^[A-Z]{3}$")]


def _names_indices(text: str) -> str:
    parse_indices(text)  # raises ArraySpecError (a ValueError) naming the bad item
    return text


#: An array's id: an id short enough that each element's (``<id>_<index>``) is one too.
ArrayId = Annotated[
    str,
    StringConstraints(
        min_length=1, max_length=MAX_ID_LENGTH - ELEMENT_SUFFIX_CHARS, pattern=ID_PATTERN
    ),
]
#: An index expression (``0-999``, ``0-99:2``, ``1,3,5-7``): see ``events/arrays.py``.
ArrayIndices = Annotated[
    str,
    StringConstraints(min_length=1, max_length=MAX_EXPRESSION_CHARS),
    AfterValidator(_names_indices),
]
