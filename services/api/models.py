"""The API's language: request bodies and typed answers, shared by the server and its client.

Request bodies use the event field types of ``events/types.py``, strict, and no unknown fields
(a typo must not silently drop a setting), so a 422 names the field.

Answers mirror the JSON the API has always sent, key for key and in the same order: the server
builds them, FastAPI serialises them, and the CLI client parses them back into the same classes
(unknown keys are ignored there, so an older client reads a newer server). Numbers keep their
JSON type: a field that may hold an int or a float says so (``int | float``), because a float
field would turn ``5`` into ``5.0``.

This module imports pydantic and ``events`` only, never FastAPI, so the CLI imports it cheaply.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, JsonValue, field_validator

from events.models.budgets import Role
from events.models.workloads import GangShape
from events.types import (
    BudgetPath,
    GpuCount,
    Identifier,
    MinRuntimeSeconds,
    PoolName,
    ShortText,
    Spec,
    Weight,
)


# -- requests -----------------------------------------------------------------------------------
class _Request(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


class SubmitRequest(_Request):
    """A workload; ``workload_id`` is the client's, so a retried submit is idempotent."""

    workload_id: Identifier
    budget: BudgetPath
    #: Acceptable pools, in order of preference.
    pools: list[PoolName] = Field(min_length=1, max_length=64)
    gpus: GpuCount
    gang: GangShape = "single-node"
    #: 0 = unallocated (free, preemptible any time); > 0 = allocated, protected this long.
    min_runtime_s: MinRuntimeSeconds
    resumable: bool = True
    priority: int = Field(default=0, ge=-1_000_000, le=1_000_000)
    spec: Spec = Field(default_factory=dict)

    @field_validator("pools")
    @classmethod
    def _distinct(cls, pools: list[str]) -> list[str]:
        if len(set(pools)) != len(pools):
            raise ValueError("each pool may be listed only once")
        return pools


class CancelRequest(_Request):
    reason: ShortText = ""


class WeightRequest(_Request):
    weight: Weight
    #: A weight for one pool only; None: the weight in every pool without an override.
    pool: PoolName | None = None
    reason: ShortText = ""


class MemberRequest(_Request):
    user: Identifier
    role: Role = "member"


class CordonRequest(_Request):
    reason: ShortText = ""


# -- answers ------------------------------------------------------------------------------------
class Answer(BaseModel):
    """Base of every answer."""

    model_config = ConfigDict(extra="ignore")


class Health(Answer):
    status: str = "ok"
    #: The view has folded the log up to the end offsets read when this check started.
    caught_up: bool
    consumer_running: bool
    events: int
    #: Records before those end offsets not folded yet.
    behind: int = 0
    #: Facts held because what they depend on has not been read yet.
    waiting: int = 0
    #: Facts the fold refused (each is logged with its reason).
    rejected: int = 0


class Me(Answer):
    user: str
    admin: bool
    #: Budget path -> roles held there (they cover the subtree).
    roles: dict[str, list[str]]


class PlacementPart(Answer):
    node: str
    gpus: list[int]


class WorkloadView(Answer):
    workload_id: str
    budget: str
    submitter: str
    status: str
    pools: list[str]
    gpus: int
    gang: str
    min_runtime_s: int
    allocated: bool
    resumable: bool
    priority: int
    spec: dict[str, JsonValue]
    attempt: int
    pool: str | None
    placement: list[PlacementPart]
    submitted_at: str
    placed_at: str | None
    started_at: str | None
    contract_ends_at: str | None
    preempting: bool
    cancel_requested: bool


class WorkloadList(Answer):
    total: int
    workloads: list[WorkloadView]


#: The detail of a 202: the event is in the log, this API's view has not folded it yet.
NOT_YET_VISIBLE = "recorded in the event log; not yet visible in this API's view"


class Accepted(Answer):
    """202 Accepted: recorded, not yet visible (read-your-writes timed out)."""

    status: Literal["accepted"] = "accepted"
    event_id: str
    detail: str = NOT_YET_VISIBLE


class WorkloadAccepted(Accepted):
    workload_id: str


class BudgetAccepted(Accepted):
    budget: str


class NodeAccepted(Accepted):
    node: str


class AlreadyAccepted(Answer):
    """202 for a repeated submit this API published but has not seen folded yet."""

    status: Literal["accepted"] = "accepted"
    workload_id: str
    detail: str = "already submitted; not yet visible in this API's view"


# -- why pending: one model per reason kind, told apart by ``code`` ----------------------------
class _Reason(Answer):
    code: str
    message: str


class PlainReason(_Reason):
    code: Literal["no-share", "no-nodes", "unallocated"]


class BudgetAheadView(Answer):
    budget: str
    rank: int | None
    usage_ratio: float | None
    workloads_ahead: int


class FairShareReason(_Reason):
    code: Literal["fair-share"]
    budget: str
    budget_rank: int | None
    budget_usage_ratio: float | None
    budgets_ahead: list[BudgetAheadView]


class BudgetQueueReason(_Reason):
    code: Literal["budget-queue"]
    #: The first 20.
    workloads_ahead: list[str]


class CapacityReason(_Reason):
    """Whether and how the gang fits, with what the pool offers it now."""

    code: Literal["too-large", "fits-now", "insufficient-capacity"]
    fits_now: bool
    needs_whole_nodes: bool
    free_gpus: int
    largest_free_node: str | None
    largest_free_gpus: int
    free_gpus_on_idle_nodes: int | None
    capacity: int
    largest_node_gpus: int


class ContractView(Answer):
    workload_id: str
    budget: str
    gpus: int
    min_runtime_s: int
    contract_ends_at: str


class ContractReason(_Reason):
    code: Literal["contract"]
    waits_on: str
    contract_ends_at: str
    #: The first 10, soonest end first.
    contracts: list[ContractView]


class WorkloadsReason(_Reason):
    code: Literal["starting", "ranks-ahead"]
    #: The first 10.
    workloads: list[str]


class CordonedReason(_Reason):
    code: Literal["cordoned-nodes"]
    nodes: list[str]
    gpus: int


class DownReason(_Reason):
    code: Literal["down-nodes"]
    nodes: list[str]


Reason = Annotated[
    PlainReason
    | FairShareReason
    | BudgetQueueReason
    | CapacityReason
    | ContractReason
    | WorkloadsReason
    | CordonedReason
    | DownReason,
    Field(discriminator="code"),
]


class QueueEntry(Answer):
    position: int
    workload_id: str
    budget: str
    submitter: str
    gpus: int
    gang: str
    min_runtime_s: int
    allocated: bool
    priority: int
    submitted_at: str
    budget_rank: int | None
    usage_ratio: float | None
    #: Absent (not null) when the queue was asked for without reasons.
    reasons: list[Reason] | None = Field(default=None, exclude_if=lambda value: value is None)


class PoolQueueView(Answer):
    pool: str
    capacity: int
    free_gpus: int
    largest_free_gpus: int
    cordoned_nodes: list[str]
    queue_length: int
    pending: list[QueueEntry]


class QueueView(Answer):
    as_of: str
    window_s: int
    pools: list[PoolQueueView]


class PendingInPool(Answer):
    pool: str
    position: int
    queue_length: int
    budget_rank: int | None
    usage_ratio: float | None
    reasons: list[Reason]


# -- decision records ---------------------------------------------------------------------------
class PositionView(Answer):
    topic: str
    partition: int
    offset: int


class StandingView(Answer):
    budget: str
    rank: int
    share: float
    usage_gpu_s: int
    usage_ratio: float


class _CommandRecord(Answer):
    time: str
    command_id: str
    attempt: int
    pool: str
    reason: str
    detail: str
    pass_id: int
    input_position: list[PositionView]
    budgets: list[StandingView]


class PlacementRecord(_CommandRecord):
    placement: list[PlacementPart]


class PreemptionRecord(_CommandRecord):
    preemptor: str | None
    preemptor_budget: str | None
    requeue: bool
    grace_period_s: int
    message: str


class WhyView(Answer):
    workload_id: str
    status: str
    attempt: int
    as_of: str
    pending: list[PendingInPool]
    placements: list[PlacementRecord]
    preemptions: list[PreemptionRecord]


# -- budgets ------------------------------------------------------------------------------------
class PoolFigures(Answer):
    share: float | None
    usage_gpu_s: float
    usage_ratio: float | None
    rank: int | None
    sibling_rank: int | None
    owed_gpu_s: float | None
    delivered_gpu_s: float
    delivered_ratio: float | None
    demand_gpus: int
    #: min(share x capacity, demand): an int when the demand is the smaller.
    entitled_gpus: int | float | None


class BudgetView(Answer):
    budget: str
    parent: str | None
    depth: int
    leaf: bool
    closed: bool
    weight: float
    pool_weights: dict[str, float]
    members: dict[str, list[str]]
    pools: dict[str, PoolFigures]


class BudgetDetail(BudgetView):
    as_of: str
    window_s: int


class PoolCapacity(Answer):
    pool: str
    capacity: int


class BudgetReport(Answer):
    as_of: str
    window_s: int
    pools: list[PoolCapacity]
    #: How ``owed_gpu_s`` is computed, in words.
    owed: str
    budgets: list[BudgetView]


class WeightSet(Answer):
    budget: str
    weight: float
    pool: str | None
    event_id: str


class MemberGrant(Answer):
    budget: str
    user: str
    role: str
    #: False: the role was already held, nothing was published.
    changed: bool


# -- nodes --------------------------------------------------------------------------------------
class NodeView(Answer):
    node: str
    cluster: str
    pool: str
    gpu_type: str
    gpus: int
    used_gpus: int
    free_gpus: int
    #: idle, mixed, allocated, cordoned, draining, drained or down.
    state: str
    cordoned: bool
    down: bool
    drained: bool
    workloads: list[str]
    last_heartbeat: str | None


class NodeList(Answer):
    nodes: list[NodeView]


#: What each write answers: the new state, or 202 with what was recorded.
SubmitAnswer = WorkloadView | WorkloadAccepted | AlreadyAccepted
CancelAnswer = WorkloadView | WorkloadAccepted
WeightAnswer = WeightSet | BudgetAccepted
MemberAnswer = MemberGrant | BudgetAccepted
NodeAnswer = NodeView | NodeAccepted


# -- the dashboard's data ------------------------------------------------------------------------
class RecentPreemption(Answer):
    workload_id: str
    budget: str | None
    submitter: str | None
    status: str | None
    time: str
    pool: str
    attempt: int
    reason: str
    preemptor: str | None
    preemptor_budget: str | None
    requeue: bool
    message: str


class RecentPreemptions(Answer):
    as_of: str
    preemptions: list[RecentPreemption]


class BudgetUsageSeries(Answer):
    """One leaf budget in one pool, hour by hour (GPU-hours)."""

    pool: str
    budget: str
    allocated_gpu_h: list[float]
    unallocated_gpu_h: list[float]
    entitlement_gpu_h: list[float]


class PoolOccupancySeries(Answer):
    """One pool, hour by hour; occupancy is None for an hour with no capacity or no time."""

    pool: str
    capacity_gpus: int
    allocated_gpu_h: list[float]
    unallocated_gpu_h: list[float]
    occupancy: list[float | None]


class UsageSeries(Answer):
    as_of: str
    hours: list[str]
    source: str
    budgets: list[BudgetUsageSeries]
    pools: list[PoolOccupancySeries]
