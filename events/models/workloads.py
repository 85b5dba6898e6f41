"""The life of a workload (topic: workloads, keyed by workload id).

``attempt`` numbers each run of a workload (1 for the first placement, +1 after each requeue), so
that charges, preemptions and ends always name the run they belong to, even when a late event of
an earlier run arrives after a requeue.
"""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import Field, model_validator

from events.models.base import EventData
from events.models.placement import Placement
from events.topics import TopicKind
from events.types import (
    BudgetPath,
    DerivedId,
    GangShape,
    GpuCount,
    Identifier,
    MinRuntimeSeconds,
    PoolName,
    Seconds,
    ShortText,
    Spec,
    TimeLimitSeconds,
    UtcDateTime,
)

Attempt = int


class WorkloadSubmitted(EventData):
    """A request for GPUs against a leaf budget; the id is the client's (idempotent submit)."""

    event_type: ClassVar[str] = "fairshare.workload.submitted.v1"
    topic: ClassVar[TopicKind] = TopicKind.WORKLOADS
    subject_field: ClassVar[str] = "workload_id"

    workload_id: Identifier
    budget: BudgetPath
    #: Acceptable pools, in order of preference.
    pools: tuple[PoolName, ...] = Field(min_length=1, max_length=64)
    gpus: GpuCount
    gang: GangShape = "single-node"
    #: 0 = unallocated (free, preemptible any time); > 0 = allocated, protected this long.
    min_runtime_s: MinRuntimeSeconds
    resumable: bool = True
    #: Orders workloads within one budget only.
    priority: int = Field(default=0, ge=-1_000_000, le=1_000_000)
    submitter: Identifier
    #: Opaque to the scheduler; the agent's business (command, image, env, expected duration).
    spec: Spec = Field(default_factory=dict)
    #: How long one run may last before its agent stops it; None: the pool's default. The
    #: scheduler caps it at the pool's maximum and never below ``min_runtime_s``
    #: (``scheduling/time_limits.py``).
    time_limit_s: TimeLimitSeconds | None = None

    @model_validator(mode="after")
    def _distinct_pools(self) -> WorkloadSubmitted:
        distinct_pools(self.pools)
        return self

    @property
    def allocated(self) -> bool:
        return self.min_runtime_s > 0


def distinct_pools(pools: tuple[str, ...]) -> None:
    """A pool listed twice would be queued in twice: refused by every model that lists pools."""
    if len(set(pools)) != len(pools):
        raise ValueError("pools: each pool may be listed only once")


class WorkloadCancelled(EventData):
    event_type: ClassVar[str] = "fairshare.workload.cancelled.v1"
    topic: ClassVar[TopicKind] = TopicKind.WORKLOADS
    subject_field: ClassVar[str] = "workload_id"

    workload_id: Identifier
    cancelled_by: Identifier
    reason: ShortText = ""


class WorkloadPlaced(EventData):
    """The scheduler assigned GPUs (the place command with the same ``command_id`` says why)."""

    event_type: ClassVar[str] = "fairshare.workload.placed.v1"
    topic: ClassVar[TopicKind] = TopicKind.WORKLOADS
    subject_field: ClassVar[str] = "workload_id"

    workload_id: Identifier
    attempt: Attempt = Field(ge=1)
    pool: PoolName
    placement: Placement
    allocated: bool
    command_id: DerivedId


class WorkloadStarted(EventData):
    """The agent started the workload on its GPUs; occupancy (and charging) starts here."""

    event_type: ClassVar[str] = "fairshare.workload.started.v1"
    topic: ClassVar[TopicKind] = TopicKind.WORKLOADS
    subject_field: ClassVar[str] = "workload_id"

    workload_id: Identifier
    attempt: Attempt = Field(ge=1)
    pool: PoolName
    placement: Placement
    allocated: bool
    #: The workload's budget, as its agent read it: the charging fold of this partition then
    #: needs no fact of another one (an array element's submission lies on its array's
    #: partition, which a charging shard may not hold). None in logs written before arrays,
    #: where the submission, on this partition, names it.
    budget: BudgetPath | None = None


class WorkloadPreempted(EventData):
    """The run was stopped by a preempt command; occupancy ends at the event time."""

    event_type: ClassVar[str] = "fairshare.workload.preempted.v1"
    topic: ClassVar[TopicKind] = TopicKind.WORKLOADS
    subject_field: ClassVar[str] = "workload_id"

    workload_id: Identifier
    attempt: Attempt = Field(ge=1)
    command_id: DerivedId
    #: How long the run held its GPUs, for the contract check (>= min_runtime_s unless unallocated).
    ran_s: Seconds


class WorkloadRequeued(EventData):
    """A resumable workload is pending again, keeping its original submit time."""

    event_type: ClassVar[str] = "fairshare.workload.requeued.v1"
    topic: ClassVar[TopicKind] = TopicKind.WORKLOADS
    subject_field: ClassVar[str] = "workload_id"

    workload_id: Identifier
    #: The attempt that ended; the next placement is ``attempt + 1``.
    attempt: Attempt = Field(ge=1)
    original_submit_time: UtcDateTime
    reason: Literal["preempted", "lost"]


class WorkloadFinished(EventData):
    event_type: ClassVar[str] = "fairshare.workload.finished.v1"
    topic: ClassVar[TopicKind] = TopicKind.WORKLOADS
    subject_field: ClassVar[str] = "workload_id"

    workload_id: Identifier
    attempt: Attempt = Field(ge=1)
    outcome: Literal["succeeded", "failed"]
    exit_code: int | None = None
    message: ShortText = ""


class WorkloadLost(EventData):
    """The node died under the run; it is charged up to ``last_heartbeat``."""

    event_type: ClassVar[str] = "fairshare.workload.lost.v1"
    topic: ClassVar[TopicKind] = TopicKind.WORKLOADS
    subject_field: ClassVar[str] = "workload_id"

    workload_id: Identifier
    attempt: Attempt = Field(ge=1)
    node: Identifier
    last_heartbeat: UtcDateTime
