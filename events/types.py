"""Constrained field types shared by every event model.

Events are the system of record: a value that slips in malformed (a naive time, a negative GPU
count, an empty id) would be replayed forever. So the constraints live in the types, and every
model uses them instead of bare ``str``/``int``.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated

from pydantic import AfterValidator, AwareDatetime, Field, StringConstraints

#: Longest contract a workload may ask for, system-wide (DESIGN.md: "default cap 8 h").
#: A pool may set a lower cap; the scheduling core checks that one.
MAX_MIN_RUNTIME_S = 8 * 3600


def _to_utc(value: datetime) -> datetime:
    """Normalise to UTC so that equal instants serialise to equal bytes (replay determinism)."""
    return value.astimezone(UTC)


#: An aware timestamp, normalised to UTC. Naive datetimes are rejected: their meaning depends on
#: the machine that wrote them, which an auditor cannot know.
UtcDateTime = Annotated[AwareDatetime, AfterValidator(_to_utc)]

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

#: Integer GPU-seconds: the unit of every charge (DESIGN.md "Charges").
GpuSeconds = Annotated[int, Field(ge=0)]

#: A contract length: 0 (unallocated, free, preemptible) up to the system cap.
MinRuntimeSeconds = Annotated[int, Field(ge=0, le=MAX_MIN_RUNTIME_S)]

#: A positive, finite weight set by whoever manages the parent budget.
Weight = Annotated[float, Field(gt=0, le=1e9, allow_inf_nan=False)]

#: Free text kept short enough to ride in a Kafka header or a table cell.
ShortText = Annotated[str, StringConstraints(max_length=2000)]
