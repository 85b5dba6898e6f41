"""A job array: one fact for N workloads (topic: workloads, keyed by the array id).

One record, so the array is in the log whole or not at all, however a writer crashes, and a
retry of the request finds it whole. Its elements are the workloads ``<array id>_<index>``;
every reader gets them from :func:`elements`, the one expansion, as the submissions they stand
for. Their later facts (placed, started, ended) are the elements' own, keyed by their ids, as
any workload's.

The indices travel as an expression (``events/arrays.py``), never as a list, so the fact of a
10,000-element array is as small as one submission. ``max_running`` (``--array 0-999%50``)
bounds how many elements hold GPUs at once; the scheduler's fold enforces it
(``projections/array_gates.py``).
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterator
from typing import ClassVar

from pydantic import Field, model_validator

from events.arrays import (
    MAX_ARRAY_ELEMENTS,
    element_id,
    parse_indices,
)
from events.models.base import EventData
from events.models.workloads import WorkloadSubmitted, distinct_pools
from events.topics import TopicKind
from events.types import (
    ArrayId,
    ArrayIndices,
    BudgetPath,
    GangShape,
    GpuCount,
    Identifier,
    MinRuntimeSeconds,
    PoolName,
    Spec,
    TimeLimitSeconds,
)


class WorkloadArraySubmitted(EventData):
    """N workloads in one fact, each ``<array_id>_<index>`` with the fields below; the id is
    the client's (idempotent submit, as for one workload)."""

    event_type: ClassVar[str] = "fairshare.workload_array.submitted.v1"
    topic: ClassVar[TopicKind] = TopicKind.WORKLOADS
    subject_field: ClassVar[str] = "array_id"

    array_id: ArrayId = Field(
        description=(
            "The client's id for the array (idempotent submit); the record's subject. Its "
            "elements are the workloads <array_id>_<index>. Stated by the api from the request "
            "(or an admin)."
        )
    )
    indices: ArrayIndices = Field(
        description=(
            "The elements' indices, as an expression (0-999, 0-99:2, 1,3,5-7; at most 100,000 "
            "indices; canonical when the api wrote it). Every reader expands it the same way "
            "(events.models.arrays.elements). Stated by the api from the request (or an admin)."
        )
    )
    max_running: int | None = Field(
        default=None,
        ge=1,
        le=MAX_ARRAY_ELEMENTS,
        description=(
            "At most this many elements placed or running at once (None: no limit); the "
            "scheduler's fold keeps the others out of its queues (projections/array_gates.py). "
            "Stated by the api from the request (or an admin)."
        ),
    )
    # -- what every element is (the fields of WorkloadSubmitted, but its id) ----------------
    budget: BudgetPath = Field(
        description=(
            "Every element's budget: as a submission's budget (the leaf that funds it). Stated by "
            "the api from the request (or an admin)."
        )
    )
    pools: tuple[PoolName, ...] = Field(
        min_length=1,
        max_length=64,
        description=(
            "Every element's acceptable pools, in order of preference, each once. Stated by the "
            "api from the request (or an admin)."
        ),
    )
    gpus: GpuCount = Field(
        description=(
            "GPUs per run of every element (the gang's total). Stated by the api from the request "
            "(or an admin)."
        )
    )
    gang: GangShape = Field(
        default="single-node",
        description=(
            "Every element's gang shape: as a submission's gang (design 2.5). Stated by the api "
            "from the request (or an admin)."
        ),
    )
    min_runtime_s: MinRuntimeSeconds = Field(
        description=(
            "Every element's contract, in seconds from each run's start: 0 = unallocated (burst, "
            "free), > 0 = allocated (charged to the budget); as a submission's. Stated by the api "
            "from the request (or an admin)."
        )
    )
    resumable: bool = Field(
        default=True,
        description=(
            "Whether each element's preempted or lost runs are requeued. Stated by the api from "
            "the request (or an admin)."
        ),
    )
    priority: int = Field(
        default=0,
        ge=-1_000_000,
        le=1_000_000,
        description=(
            "Every element's priority within its budget (higher first); elements of equal "
            "priority and submit time queue in index order. Stated by the api from the request "
            "(or an admin)."
        ),
    )
    submitter: Identifier = Field(
        description=(
            "Who submitted the array (the api caller's user id): each element's. Stated by the "
            "api from the request (or an admin)."
        )
    )
    spec: Spec = Field(
        default_factory=dict,
        description=(
            "Every element's spec, as a submission's (the agent's business); the agent tells each "
            "run its index (FAIRSHARE_ARRAY_INDEX). Stated by the api from the request (or an "
            "admin)."
        ),
    )
    time_limit_s: TimeLimitSeconds | None = Field(
        default=None,
        description=(
            "Every element's time limit in seconds per run (None: the pool's default); as a "
            "submission's. Stated by the api from the request (or an admin)."
        ),
    )

    @model_validator(mode="after")
    def _distinct_pools(self) -> WorkloadArraySubmitted:
        distinct_pools(self.pools)
        return self

    @property
    def count(self) -> int:
        return len(parse_indices(self.indices))


#: The fields an element takes from its array (all of a submission's but its id).
ELEMENT_FIELDS: tuple[str, ...] = tuple(
    name for name in WorkloadSubmitted.model_fields if name != "workload_id"
)


def elements(array: WorkloadArraySubmitted) -> Iterator[tuple[int, WorkloadSubmitted]]:
    """Each element's index and the submission it stands for, in index order: the one
    expansion every reader of the array's fact goes through.

    Built without validation (the array's fact was validated, and each field is its), and
    sharing the array's spec and pools: 10,000 copies of a spec would be 10,000 times its
    size in every reader's memory."""
    shared = {name: getattr(array, name) for name in ELEMENT_FIELDS}
    for index in parse_indices(array.indices):
        yield (
            index,
            WorkloadSubmitted.model_construct(
                workload_id=element_id(array.array_id, index), **shared
            ),
        )


def element_index(array: WorkloadArraySubmitted, workload_id: str) -> int | None:
    """The index of ``workload_id`` in ``array``, or None when it is none of its elements."""
    prefix = array.array_id + "_"
    suffix = workload_id.removeprefix(prefix)
    if suffix == workload_id or not suffix.isdigit() or suffix != str(int(suffix)):
        return None
    index = int(suffix)
    indices = parse_indices(array.indices)
    position = bisect_left(indices, index)
    return index if position < len(indices) and indices[position] == index else None
