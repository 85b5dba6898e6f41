"""Commands from the scheduler to cluster agents (topic: commands, keyed by cluster).

Every command carries its decision record, so an auditor can check why it was issued against the
input position it was decided at, and a researcher can be told why a job was placed or preempted.

Every command also carries the issuing leader's lease ``epoch`` (a fencing token): agents and the
cluster fold ignore a command whose epoch is lower than one they have already seen on a command
for the same cluster, so a deposed scheduler that wakes up from a stall cannot act. Commands of
one cluster share one partition (the key), so every reader sees them in the same order and
fences the same ones. v1 had no epoch; its records are read as v2 with epoch 0 (the upcasters
below), which is also the epoch of a scheduler that runs alone without a lease.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from events.models.base import EventData
from events.models.placement import Placement
from events.topics import TopicKind
from events.types import (
    DEFAULT_MAX_TIME_LIMIT_S,
    DEFAULT_TIME_LIMIT_S,
    BudgetPath,
    DerivedId,
    GpuSeconds,
    Identifier,
    MinRuntimeSeconds,
    PoolName,
    Seconds,
    ShortText,
    Spec,
    TimeLimitSeconds,
    UtcDateTime,
)

ReasonCode = Literal[
    "fairshare",  # placed in fair-share order
    "burst",  # unallocated work filling idle GPUs
    "preempt-for",  # preempted to make room for the ``preemptor``
    "drain",  # preempted because its node is cordoned and its contract is over
    "node-lost",  # its node stopped sending heartbeats
    "cancel",  # its submitter cancelled it
]


class _Record(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)


class InputPosition(_Record):
    """A consumed offset: the decision saw every record of this partition before ``offset``."""

    topic: str = Field(min_length=1)
    partition: int = Field(ge=0)
    offset: int = Field(ge=0)


class BudgetStanding(_Record):
    """One budget's place in the fair-share order at decision time."""

    budget: BudgetPath
    rank: int = Field(ge=1)
    share: float = Field(ge=0, le=1, allow_inf_nan=False)
    usage_gpu_s: GpuSeconds
    #: ``usage / (share x capacity x window)``; lower is more under-served.
    usage_ratio: float = Field(ge=0, allow_inf_nan=False)


class DecisionRecord(_Record):
    pass_id: int = Field(ge=0)
    input_position: tuple[InputPosition, ...]
    reason: ReasonCode
    budgets: tuple[BudgetStanding, ...] = ()
    #: For preemptions made to fit another workload: that workload.
    preemptor: Identifier | None = None
    detail: ShortText = ""
    #: The end of the usage snapshot the ``budgets``' usage starts from (the rest is running
    #: work since the hour it reached): which fact of the log the ranks were computed on, so an
    #: auditor can check them against it. None: no snapshot yet, or a decision that ranks
    #: nothing (a cancel, a drain).
    usage_as_of: UtcDateTime | None = None

    @model_validator(mode="after")
    def _preemptor_iff_preempt_for(self) -> DecisionRecord:
        if (self.reason == "preempt-for") != (self.preemptor is not None):
            raise ValueError("preemptor: required exactly when reason is 'preempt-for'")
        return self


class PlaceCommand(EventData):
    event_type: ClassVar[str] = "fairshare.command.place.v2"
    topic: ClassVar[TopicKind] = TopicKind.COMMANDS
    subject_field: ClassVar[str] = "cluster"

    command_id: DerivedId
    #: The issuing scheduler's lease epoch (0: no lease, or a v1 record).
    epoch: int = Field(default=0, ge=0)
    cluster: Identifier
    pool: PoolName
    workload_id: Identifier
    attempt: int = Field(ge=1)
    budget: BudgetPath
    placement: Placement
    allocated: bool
    min_runtime_s: MinRuntimeSeconds
    spec: Spec = Field(default_factory=dict)
    decision: DecisionRecord
    #: Seconds the run may last from its start before the agent stops it (finished, "time
    #: limit"): the workload's own limit or its pool's default, capped at the pool's maximum.
    #: None: no limit (a command of a scheduler that knew none).
    time_limit_s: TimeLimitSeconds | None = None

    @model_validator(mode="after")
    def _allocated_matches_contract(self) -> PlaceCommand:
        if self.allocated != (self.min_runtime_s > 0):
            raise ValueError("allocated: must be true exactly when min_runtime_s > 0")
        return self


class PreemptCommand(EventData):
    event_type: ClassVar[str] = "fairshare.command.preempt.v2"
    topic: ClassVar[TopicKind] = TopicKind.COMMANDS
    subject_field: ClassVar[str] = "cluster"

    command_id: DerivedId
    #: The issuing scheduler's lease epoch (0: no lease, or a v1 record).
    epoch: int = Field(default=0, ge=0)
    cluster: Identifier
    pool: PoolName
    workload_id: Identifier
    attempt: int = Field(ge=1)
    #: SIGTERM, then SIGKILL after this long.
    grace_period_s: Seconds = Field(default=30, le=3600)
    #: Whether the workload goes back to pending (it is resumable).
    requeue: bool
    decision: DecisionRecord

    @model_validator(mode="after")
    def _preempt_reason(self) -> PreemptCommand:
        if self.decision.reason in ("fairshare", "burst"):
            raise ValueError(
                f"decision.reason: {self.decision.reason!r} is a placement reason, not a preemption"
            )
        return self


_Fraction = Annotated[float, Field(ge=0, le=1, allow_inf_nan=False)]
_NonNegative = Annotated[float, Field(ge=0, allow_inf_nan=False)]


class ChurnSettings(_Record):
    """When a run past its contract is worth stopping (``scheduling/churn.py``)."""

    #: Base relative margin of the catch-up rule; None: catch-up is off.
    margin: _NonNegative | None
    margin_per_wasted_gpu_hour: _NonNegative
    owed_tolerance: Annotated[float, Field(ge=0, lt=1, allow_inf_nan=False)]
    hold_horizon_s: _NonNegative
    starving_after_s: _NonNegative
    #: Settings stated before these were switchable read as the rules of their time: at most 8
    #: preemptions per job, a drain waiting on a job preempted that often (``drain_bound``
    #: None: the same as ``max_preemptions``), holds by time limits of 15 minutes, the gang's
    #: turn on, victims weighed by their waste alone, and a starving gang due its turn holding
    #: nodes no further ahead than any other (``turn_hold_horizon_s`` 0).
    max_preemptions: int = Field(default=8, ge=1)
    drain_bound: int | None = Field(default=None, ge=1)
    earlier_stop_cost_s: _NonNegative = 0.0
    limit_hold_horizon_s: _NonNegative = 900.0
    turn_hold_horizon_s: _NonNegative = 0.0
    gang_turn: bool = True


class DebugLaneSettings(_Record):
    """One pool's debug lane (``scheduling/debug_lane.py``); ``pool`` None: the
    lane of every pool not named."""

    pool: PoolName | None = None
    enabled: bool
    max_gpus: int = Field(ge=1)
    max_min_runtime_s: int = Field(ge=1)
    lookback_s: int = Field(ge=1)
    service_level: Annotated[float, Field(ge=0, lt=1, allow_inf_nan=False)]
    max_reserve_fraction: _Fraction
    max_lane_fraction: _Fraction
    patience_s: _NonNegative


class TimeLimitSettings(_Record):
    """One pool's time limits (``scheduling/time_limits.py``); ``pool`` None: the
    limits of every pool not named."""

    pool: PoolName | None = None
    #: The limit of work that declares none.
    default_s: TimeLimitSeconds = DEFAULT_TIME_LIMIT_S
    #: The longest limit a workload may declare.
    max_s: TimeLimitSeconds = DEFAULT_MAX_TIME_LIMIT_S

    @model_validator(mode="after")
    def _default_within_max(self) -> TimeLimitSettings:
        if self.default_s > self.max_s:
            raise ValueError("default_s: must not exceed max_s")
        return self


class SchedulerSettings(EventData):
    """The policy's settings a leader decides with, stated before its first pass of an epoch
    (the simulator's before its first): what a pass depends on besides the facts, so an audit
    re-runs each pass with the settings it ran with rather than assuming the defaults."""

    event_type: ClassVar[str] = "fairshare.scheduler.settings.v1"
    topic: ClassVar[TopicKind] = TopicKind.COMMANDS
    subject_field: ClassVar[str] = "scheduler"

    scheduler: Identifier = "scheduler"
    window_s: int = Field(ge=1)
    grace_period_s: Seconds = Field(le=3600)
    max_preemption_searches: int = Field(ge=0)
    preemption: bool
    churn: ChurnSettings
    #: The default lane first (``pool`` None), then one per pool that has its own.
    debug_lanes: tuple[DebugLaneSettings, ...] = Field(min_length=1)
    #: The default limits first (``pool`` None), then one per pool that has its own (settings
    #: stated before time limits existed: the system defaults).
    time_limits: tuple[TimeLimitSettings, ...] = Field(default=(TimeLimitSettings(),), min_length=1)

    @model_validator(mode="after")
    def _one_default_lane_first(self) -> SchedulerSettings:
        pools = [lane.pool for lane in self.debug_lanes]
        if pools[0] is not None or None in pools[1:] or len(set(pools)) != len(pools):
            raise ValueError("debug_lanes: the default lane (no pool) first, then one per pool")
        limits = [limit.pool for limit in self.time_limits]
        if limits[0] is not None or None in limits[1:] or len(set(limits)) != len(limits):
            raise ValueError("time_limits: the default (no pool) first, then one per pool")
        return self


#: Turns an older type's JSON payload into (current type, payload); see ``events.registry``.
_Upcaster = Callable[[dict[str, Any]], tuple[str, dict[str, Any]]]


def _with_epoch_zero(to_type: str) -> _Upcaster:
    def upcast(payload: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        return to_type, {**payload, "epoch": 0}

    return upcast


#: Older command types and how to read them as the current ones: v1 was issued before leases
#: had epochs, so it carries the lowest one (fenced by any command of a leader that has one).
COMMAND_UPCASTERS: dict[str, _Upcaster] = {
    "fairshare.command.place.v1": _with_epoch_zero(PlaceCommand.event_type),
    "fairshare.command.preempt.v1": _with_epoch_zero(PreemptCommand.event_type),
}
