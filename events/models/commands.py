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

    topic: str = Field(
        min_length=1,
        description=(
            "The topic's full name, deployment prefix included (fairshare.workloads). Stated by "
            "whoever states the position: the scheduler (decision records) or charging (usage "
            "snapshots, period seals)."
        ),
    )
    partition: int = Field(ge=0, description="The partition's number; stated as topic.")
    offset: int = Field(
        ge=0,
        description=(
            "The first offset past the position: every record of the partition before it is "
            "covered (read, folded), none from it on. Stated as topic."
        ),
    )


class BudgetStanding(_Record):
    """One budget's place in the fair-share order at decision time."""

    budget: BudgetPath = Field(
        description=(
            "A leaf budget the decision involved (the workload's, a preemptor's). Stated by the "
            "scheduler."
        )
    )
    rank: int = Field(
        ge=1,
        description=(
            "Its place in the pool's fair-share order of leaf budgets as the pass first ranked "
            "them: 1 is served first (design 2.5). Stated by the scheduler."
        ),
    )
    share: float = Field(
        ge=0,
        le=1,
        allow_inf_nan=False,
        description=(
            "Its share of the pool, 0 to 1: its weight over its open siblings' times its parent's "
            "share, at the pass's instant (design 2.1). Stated by the scheduler."
        ),
    )
    usage_gpu_s: GpuSeconds = Field(
        description=(
            "The allocated GPU-seconds in the usage window it was ranked on (truncated): the "
            "latest usage snapshot's, plus running allocated work since the hour it reached, plus "
            "gpus x min_runtime_s of its placements earlier in the pass (design 2.5, 3.3). Stated "
            "by the scheduler."
        )
    )
    usage_ratio: float = Field(
        ge=0,
        allow_inf_nan=False,
        description=(
            "usage / (share x capacity x window), capacity the pool's GPUs and window in seconds: "
            "lower is more under-served and ranks first within its group (design 2.5); 1e18 for a "
            "budget without a share. Stated by the scheduler."
        ),
    )


class DecisionRecord(_Record):
    pass_id: int = Field(
        ge=0,
        description=(
            "The number of the scheduling pass that decided it, increasing (the live scheduler's "
            "is the pass's instant in epoch milliseconds, or one more than the last); the read "
            "models keep decisions by it. Stated by the scheduler."
        ),
    )
    input_position: tuple[InputPosition, ...] = Field(
        description=(
            "Per input partition the scheduler reads, the first offset it had not read when it "
            "decided: the facts the decision saw, so an auditor can re-run the pass on them "
            "(fairshare audit decisions). Stated by the scheduler."
        )
    )
    reason: ReasonCode = Field(
        description=(
            "Why: fairshare (placed in fair-share order), burst (unallocated work onto idle "
            "GPUs), preempt-for (preempted to make room for preemptor), drain (its node is "
            "cordoned and its contract is over), node-lost (its node stopped sending heartbeats), "
            "cancel (its workload was cancelled). Only fairshare and burst place. Stated by the "
            "scheduler."
        )
    )
    budgets: tuple[BudgetStanding, ...] = Field(
        default=(),
        description=(
            "The standing of each budget the decision involved in its pool's fair-share order at "
            "the pass; empty where nothing was ranked (a cancel, a drain). Stated by the "
            "scheduler."
        ),
    )
    preemptor: Identifier | None = Field(
        default=None,
        description=(
            "For a preemption made to fit another workload (reason preempt-for, and only then): "
            "that workload. Stated by the scheduler."
        ),
    )
    detail: ShortText = Field(
        default="",
        description=(
            "One sentence for people explaining the decision; not interpreted. Stated by the "
            "scheduler."
        ),
    )
    usage_as_of: UtcDateTime | None = Field(
        default=None,
        description=(
            "The window_end of the usage snapshot the budgets' usage starts from (the rest is "
            "running work since the hour it reached): which fact of the log the ranks were "
            "computed on, so an auditor can check them against it. None: no snapshot yet, or a "
            "decision that ranks nothing (a cancel, a drain). Stated by the scheduler."
        ),
    )

    @model_validator(mode="after")
    def _preemptor_iff_preempt_for(self) -> DecisionRecord:
        if (self.reason == "preempt-for") != (self.preemptor is not None):
            raise ValueError("preemptor: required exactly when reason is 'preempt-for'")
        return self


#: The descriptions of the fields every command has (place and preempt alike).
_EPOCH = (
    "The issuing scheduler's lease epoch, a fencing token: agents and the cluster fold ignore a "
    "command whose epoch is below one already seen on a command for the same cluster and pool, "
    "so a deposed leader cannot act (0: no lease, or a v1 record upcast). Stated by the "
    "scheduler."
)
_COMMAND_CLUSTER = (
    "The cluster whose agent carries the command out (its nodes'); the record's subject and "
    "Kafka key, so every reader sees one cluster's commands in one order. Stated by the "
    "scheduler."
)


class PlaceCommand(EventData):
    event_type: ClassVar[str] = "fairshare.command.place.v2"
    topic: ClassVar[TopicKind] = TopicKind.COMMANDS
    subject_field: ClassVar[str] = "cluster"

    command_id: DerivedId = Field(
        description=(
            "place:<workload>:<attempt>: one per run, deterministic, so a re-published pass "
            "issues the same command; the matching fairshare.workload.placed.v1 names it. Stated "
            "by the scheduler."
        )
    )
    epoch: int = Field(default=0, ge=0, description=_EPOCH)
    cluster: Identifier = Field(description=_COMMAND_CLUSTER)
    pool: PoolName = Field(
        description=(
            "The pool the run is placed in; the epoch fence is per cluster and pool. Stated by "
            "the scheduler."
        )
    )
    workload_id: Identifier = Field(description="The workload to run. Stated by the scheduler.")
    attempt: int = Field(
        ge=1,
        description=(
            "The run to start: 1 for the first placement, +1 after each requeue. Stated by the "
            "scheduler."
        ),
    )
    budget: BudgetPath = Field(
        description=(
            "The workload's budget: the agent gives it to the run and states it on the run's "
            "start, which charging reads (spec 8.2). Stated by the scheduler."
        )
    )
    placement: Placement = Field(
        description=(
            "The GPUs assigned, node by node: the agent starts the run on exactly these once "
            "earlier holders (preempted victims) have exited. Stated by the scheduler."
        )
    )
    allocated: bool = Field(
        description=(
            "true exactly when min_runtime_s > 0: the run is charged to its budget; false: "
            "unallocated burst work, free and preemptible at any time. Stated by the scheduler."
        )
    )
    min_runtime_s: MinRuntimeSeconds = Field(
        description=(
            "The workload's contract, in seconds from the run's start, during which the policy "
            "does not preempt it (0: unallocated). Stated by the scheduler."
        )
    )
    spec: Spec = Field(
        default_factory=dict,
        description=(
            "The workload's spec, copied for the agent, which runs what it says. Stated by the "
            "scheduler."
        ),
    )
    decision: DecisionRecord = Field(
        description=(
            "Why the run was placed, and on which facts (design 3.3). Stated by the scheduler."
        )
    )
    time_limit_s: TimeLimitSeconds | None = Field(
        default=None,
        description=(
            "Seconds the run may last from its start before the agent stops it (finished, failed, "
            "\"time limit\"): the workload's own limit or its pool's default, capped at the pool's "
            "maximum, never below min_runtime_s. None: no limit (a command of a scheduler that "
            "knew none). Stated by the scheduler."
        ),
    )

    @model_validator(mode="after")
    def _allocated_matches_contract(self) -> PlaceCommand:
        if self.allocated != (self.min_runtime_s > 0):
            raise ValueError("allocated: must be true exactly when min_runtime_s > 0")
        return self


class PreemptCommand(EventData):
    event_type: ClassVar[str] = "fairshare.command.preempt.v2"
    topic: ClassVar[TopicKind] = TopicKind.COMMANDS
    subject_field: ClassVar[str] = "cluster"

    command_id: DerivedId = Field(
        description=(
            "preempt:<workload>:<attempt>: at most one per run, deterministic; the agent's "
            "fairshare.workload.preempted.v1 names it. Stated by the scheduler."
        )
    )
    epoch: int = Field(default=0, ge=0, description=_EPOCH)
    cluster: Identifier = Field(description=_COMMAND_CLUSTER)
    pool: PoolName = Field(
        description=(
            "The pool the run is in; the epoch fence is per cluster and pool. Stated by the "
            "scheduler."
        )
    )
    workload_id: Identifier = Field(
        description="The workload whose run to stop. Stated by the scheduler."
    )
    attempt: int = Field(
        ge=1,
        description=(
            "The run to stop; a command for an earlier attempt does nothing. Stated by the "
            "scheduler."
        ),
    )
    grace_period_s: Seconds = Field(
        default=30,
        le=3600,
        description=(
            "Seconds between SIGTERM and SIGKILL that the agent gives the run. Stated by the "
            "scheduler."
        ),
    )
    requeue: bool = Field(
        description=(
            "Whether the workload goes back to pending once stopped (it is resumable and not "
            "cancelled). Informational: the scheduler states the requeue itself "
            "(fairshare.workload.requeued.v1). Stated by the scheduler."
        )
    )
    decision: DecisionRecord = Field(
        description=(
            "Why the run is stopped, and on which facts (design 3.3). Stated by the scheduler."
        )
    )

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

    margin: _NonNegative | None = Field(
        description=(
            "Base relative margin of the catch-up rule: by it, a run of a budget that keeps its "
            "entitlement may be stopped for another budget only if the victim budget's usage "
            "ratio exceeds the preemptor's by this much, relative (0.5: 50%; design 2.6). None: "
            "catch-up is off. Stated by the scheduler."
        )
    )
    margin_per_wasted_gpu_hour: _NonNegative = Field(
        description=(
            "Added to the catch-up margin per GPU-hour a stop would waste (0.1: 10 points). "
            "Stated by the scheduler."
        )
    )
    owed_tolerance: Annotated[float, Field(ge=0, lt=1, allow_inf_nan=False)] = Field(
        description=(
            "A budget is owed GPUs (may take them by entitlement) while it holds less than its "
            "entitlement by more than this fraction of it, in [0, 1) (0.1: 10%). Stated by the "
            "scheduler."
        )
    )
    hold_horizon_s: _NonNegative = Field(
        description=(
            "Seconds ahead an owed gang may hold the nodes that will be free for it soonest by "
            "contracts (scheduling/reservation.py; 900: 15 minutes): no later work is placed "
            "there. Stated by the scheduler."
        )
    )
    starving_after_s: _NonNegative = Field(
        description=(
            "Seconds after its submission an owed gang that needs a whole node or more starves: "
            "it may then catch up where the victim's budget does not keep its entitlement, and "
            "hold nodes turn_hold_horizon_s ahead when due its turn. Stated by the scheduler."
        )
    )
    #: Settings stated before these were switchable read as the rules of their time: at most 8
    #: preemptions per job, a drain waiting on a job preempted that often (``drain_bound``
    #: None: the same as ``max_preemptions``), holds by time limits of 15 minutes, the gang's
    #: turn on, victims weighed by their waste alone, and a starving gang due its turn holding
    #: nodes no further ahead than any other (``turn_hold_horizon_s`` 0).
    max_preemptions: int = Field(
        default=8,
        ge=1,
        description=(
            "The most times the policy preempts one job (fair share, the debug lane, unallocated "
            "bumps; cancellations not counted): a job preempted that often is no victim of any "
            "rule again. Stated by the scheduler."
        ),
    )
    drain_bound: int | None = Field(
        default=None,
        ge=1,
        description=(
            "A drain stops a run only while it has been stopped fewer times than this, drains "
            "included (the policy's default: 10). None, as settings stated before drains went "
            "past the policy's bound read: the same as max_preemptions. Stated by the scheduler."
        ),
    )
    earlier_stop_cost_s: _NonNegative = Field(
        default=0.0,
        description=(
            "What each earlier stop of a run counts as, in GPU-seconds per GPU of the run, when "
            "the victim search weighs what a stop wastes (the policy's default: 3600). 0, as "
            "settings stated before it existed read: the waste alone. Stated by the scheduler."
        ),
    )
    limit_hold_horizon_s: _NonNegative = Field(
        default=900.0,
        description=(
            "Seconds ahead a gang over several nodes may hold nodes whose runs end by their time "
            "limits (scheduling/reservation.py); 0, the policy's default since 2026-12-07, turns "
            "such holds off. Settings stated before it existed read 900. Stated by the scheduler."
        ),
    )
    turn_hold_horizon_s: _NonNegative = Field(
        default=0.0,
        description=(
            "Seconds ahead a starving gang whose budget is due its turn (gang_turn.py) may hold "
            "nodes by contracts, where longer than hold_horizon_s (the policy's default: 3600). "
            "0, as settings stated before it existed read: no further than any other gang. Stated "
            "by the scheduler."
        ),
    )
    gang_turn: bool = Field(
        default=True,
        description=(
            "Whether a budget whose smallest pending allocated gang does not fit in what it is "
            "owed now is due its turn (scheduling/gang_turn.py); off, it waits in the plain "
            "order. Stated by the scheduler."
        ),
    )


class DebugLaneSettings(_Record):
    """One pool's debug lane (``scheduling/debug_lane.py``); ``pool`` None: the
    lane of every pool not named."""

    pool: PoolName | None = Field(
        default=None,
        description=(
            "The pool this lane is for; None: the default lane, for every pool not named. Stated "
            "by the scheduler."
        ),
    )
    enabled: bool = Field(
        description=("Whether the pool has a debug lane (design 2.7). Stated by the scheduler.")
    )
    max_gpus: int = Field(
        ge=1,
        description=(
            "Lane work is allocated work of at most this many GPUs (the policy's default: 1), "
            "with a contract of at most max_min_runtime_s. Stated by the scheduler."
        ),
    )
    max_min_runtime_s: int = Field(
        ge=1,
        description=(
            "Lane work has a contract (min_runtime_s > 0) of at most this many seconds (the "
            "policy's default: 900) and at most max_gpus GPUs; no job array's element is lane "
            "work. Stated by the scheduler."
        ),
    )
    lookback_s: int = Field(
        ge=1,
        description=(
            "Seconds of recent lane submissions that size the reserve: their GPU-seconds over "
            "this give the lane's mean concurrency lambda (the policy's default: 900). Stated by "
            "the scheduler."
        ),
    )
    service_level: Annotated[float, Field(ge=0, lt=1, allow_inf_nan=False)] = Field(
        description=(
            "Share of lane arrivals the reserve should find a free GPU for at once, in [0, 1): "
            "the reserve is the smallest r with P(Poisson(lambda) < r) >= it (the policy's "
            "default: 0.9). Stated by the scheduler."
        )
    )
    max_reserve_fraction: _Fraction = Field(
        description=(
            "The reserve is at most this fraction of the pool's GPUs, and at least 1 GPU while "
            "there is lane demand (the policy's default: 0.1). Stated by the scheduler."
        )
    )
    max_lane_fraction: _Fraction = Field(
        description=(
            "Lane work beyond this fraction of the pool's GPUs waits its turn like other work "
            "(the policy's default: 0.5). Stated by the scheduler."
        )
    )
    patience_s: _NonNegative = Field(
        description=(
            "Seconds lane work waits for a GPU to come free before it preempts regardless of rank "
            "(the policy's default: 15). Stated by the scheduler."
        )
    )


class TimeLimitSettings(_Record):
    """One pool's time limits (``scheduling/time_limits.py``); ``pool`` None: the
    limits of every pool not named."""

    pool: PoolName | None = Field(
        default=None,
        description=(
            "The pool these limits are for; None: the limits of every pool not named. Stated by "
            "the scheduler."
        ),
    )
    default_s: TimeLimitSeconds = Field(
        default=DEFAULT_TIME_LIMIT_S,
        description=(
            "The time limit, in seconds, of work that declares none (24 h by default). Stated by "
            "the scheduler."
        ),
    )
    max_s: TimeLimitSeconds = Field(
        default=DEFAULT_MAX_TIME_LIMIT_S,
        description=(
            "The longest limit a workload may declare, in seconds (7 days by default): the api "
            "refuses a longer one, and the scheduler caps limits at it. Stated by the scheduler."
        ),
    )

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

    scheduler: Identifier = Field(
        default="scheduler",
        description=(
            'Which scheduler states them (always "scheduler" today); the record\'s subject and '
            "key. Stated by the scheduler, before its first pass of an epoch."
        ),
    )
    window_s: int = Field(
        ge=1,
        description=(
            "The fair-share usage window, in seconds (604800, 7 days, by default): budgets are "
            "ranked on their allocated usage within it (design 2.4, 2.5). Stated by the "
            "scheduler."
        ),
    )
    grace_period_s: Seconds = Field(
        le=3600,
        description=(
            "Seconds between SIGTERM and SIGKILL on the preempt commands (30 by default). Stated "
            "by the scheduler."
        ),
    )
    max_preemption_searches: int = Field(
        ge=0,
        description=(
            "The most victim searches per pool and pass (each scans the pool's nodes). Stated by "
            "the scheduler."
        ),
    )
    preemption: bool = Field(
        description=(
            "Whether pending work may preempt for room; off, no victim search runs. Stated by the "
            "scheduler."
        )
    )
    churn: ChurnSettings = Field(
        description=(
            "How the policy weighs stops and holds: when a run past its contract is worth "
            "stopping, how far ahead gangs may hold nodes, how often one job may be stopped "
            "(scheduling/churn.py). Stated by the scheduler."
        )
    )
    debug_lanes: tuple[DebugLaneSettings, ...] = Field(
        min_length=1,
        description=(
            "The debug lanes: the default lane first (pool None), then one per pool that has its "
            "own. Stated by the scheduler."
        ),
    )
    time_limits: tuple[TimeLimitSettings, ...] = Field(
        default=(TimeLimitSettings(),),
        min_length=1,
        description=(
            "The default limits first (pool None), then one per pool that has its own (settings "
            "stated before time limits existed: the system defaults). The api checks submissions "
            "against them and the scheduler states each run's limit. Stated by the scheduler."
        ),
    )

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
