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

    array_id: ArrayId
    #: The elements' indices, as an expression (canonical when the API wrote it).
    indices: ArrayIndices
    #: At most this many elements placed or running at once (None: no limit).
    max_running: int | None = Field(default=None, ge=1, le=MAX_ARRAY_ELEMENTS)
    # -- what every element is (the fields of WorkloadSubmitted, but its id) ----------------
    budget: BudgetPath
    pools: tuple[PoolName, ...] = Field(min_length=1, max_length=64)
    gpus: GpuCount
    gang: GangShape = "single-node"
    min_runtime_s: MinRuntimeSeconds
    resumable: bool = True
    priority: int = Field(default=0, ge=-1_000_000, le=1_000_000)
    submitter: Identifier
    spec: Spec = Field(default_factory=dict)
    time_limit_s: TimeLimitSeconds | None = None

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
