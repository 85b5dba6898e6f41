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

    workload_id: Identifier = Field(
        description=(
            "The client's id for the workload: a second submission with the same id changes "
            "nothing (idempotent submit). The record's subject; every later fact of the workload, "
            "its commands and its charges name it. Stated by the api from the request (or an "
            "admin); by the agent for native work."
        )
    )
    budget: BudgetPath = Field(
        description=(
            "The open leaf budget that funds it: its allocated runs are charged to this budget "
            "and ranked in fair share by its usage; its unallocated runs are recorded against it "
            "at no charge (spec 8.2, 8.3). Stated by the api (or an admin), which checks the "
            "submitter may use the budget; by the agent for native work, from the group's "
            "binding."
        )
    )
    pools: tuple[PoolName, ...] = Field(
        min_length=1,
        max_length=64,
        description=(
            "The pools the workload may run in, in order of preference, each once; the scheduler "
            "places each run in one of them. Stated by the api from the request (or an admin); by "
            "the agent for native work."
        ),
    )
    gpus: GpuCount = Field(
        description=(
            "GPUs per run: the gang's total, on one or more nodes. Stated by the api from the "
            "request (or an admin); by the agent for native work."
        )
    )
    gang: GangShape = Field(
        default="single-node",
        description=(
            "How the gang lays its GPUs over nodes: single-node, on one node when it fits one; "
            "whole-nodes, on fully free nodes only. A gang bigger than a node takes whole free "
            "nodes either way, in the fewest blocks that hold it (design 2.5). Stated by the api "
            "from the request (or an admin); by the agent for native work."
        ),
    )
    min_runtime_s: MinRuntimeSeconds = Field(
        description=(
            "The contract, in seconds from each run's start: 0 = unallocated (burst: free, "
            "preemptible at any time, recorded at zero charge); > 0 = allocated (charged to the "
            "budget, counted in fair-share usage, not preempted by the policy for this long; "
            "design 2.3). At most 8 h (28800 s); a pool may set a lower cap. Stated by the api "
            "from the request (or an admin); by the agent for native work."
        )
    )
    resumable: bool = Field(
        default=True,
        description=(
            "Whether a preempted or lost run is requeued (pending again, keeping its submit time) "
            "rather than ending the workload; the scheduler states the requeue. Stated by the api "
            "from the request (or an admin); by the agent for native work."
        ),
    )
    priority: int = Field(
        default=0,
        ge=-1_000_000,
        le=1_000_000,
        description=(
            "Orders the pending workloads of one budget only (higher first, then submit time); "
            "never weighed across budgets. Stated by the api from the request (or an admin); by "
            "the agent for native work."
        ),
    )
    submitter: Identifier = Field(
        description=(
            "Who submitted it: the api caller's user id (stated by the api, or an admin), or for "
            "native work its group (k8s:<cluster>/<namespace>) or Slurm user (stated by the "
            "agent). Start estimates expect its runs to last as its submitter's recent ones."
        )
    )
    spec: Spec = Field(
        default_factory=dict,
        description=(
            "What to run, as JSON (at most 64 KiB): the executing agent's business (command, "
            "image, env, ...), checked at submit against what each pool's executor runs. The "
            "scheduler reads only checkpoint_every_s and restart_overhead_s (what a stop wastes); "
            "spec.native names native work's origin cluster (trust, spec 7.4). Stated by the api "
            "from the request (or an admin); by the agent for native work."
        ),
    )
    time_limit_s: TimeLimitSeconds | None = Field(
        default=None,
        description=(
            "How long one run may last, in seconds from its start, before its agent stops it; "
            "None: the pool's default. The scheduler caps it at the pool's maximum and never "
            "below min_runtime_s (scheduling/time_limits.py) and states it on the place command. "
            "Stated by the api from the request (or an admin); by the agent for native work."
        ),
    )

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

    workload_id: Identifier = Field(
        description=(
            "The workload cancelled; the record's subject. Pending, or stopped awaiting its "
            "requeue: it ends cancelled here. Placed or running: the scheduler preempts its run "
            "with reason cancel, and it ends when the agent reports the stop. Stated by the api "
            "(or an admin), or by the agent when a user deletes native work."
        )
    )
    cancelled_by: Identifier = Field(
        description=(
            "Who cancelled it: a user through the api (its submitter, a manager, an admin; stated "
            "by the api, or an admin), or the group whose user deleted native work (stated by the "
            "agent). Informational."
        )
    )
    reason: ShortText = Field(
        default="", description="Free text: why; informational. Stated as cancelled_by."
    )


class WorkloadPlaced(EventData):
    """The scheduler assigned GPUs (the place command with the same ``command_id`` says why)."""

    event_type: ClassVar[str] = "fairshare.workload.placed.v1"
    topic: ClassVar[TopicKind] = TopicKind.WORKLOADS
    subject_field: ClassVar[str] = "workload_id"

    workload_id: Identifier = Field(
        description="The workload placed; the record's subject. Stated by the scheduler."
    )
    attempt: Attempt = Field(
        ge=1,
        description=(
            "The run placed: 1 for the first placement, +1 after each requeue. Stated by the "
            "scheduler."
        ),
    )
    pool: PoolName = Field(
        description=(
            "The pool the run is placed in, one of the workload's. Stated by the scheduler."
        )
    )
    placement: Placement = Field(
        description=(
            "The GPUs assigned, node by node: from this fact the fold counts them held, and no "
            "other work is placed on them until the run ends. Stated by the scheduler."
        )
    )
    allocated: bool = Field(
        description=(
            "Whether the run is allocated work (the workload's min_runtime_s > 0) rather than "
            "unallocated burst work. Stated by the scheduler."
        )
    )
    command_id: DerivedId = Field(
        description=(
            "The id of the place command issued with it (place:<workload>:<attempt>), whose "
            "decision record says why. A placement whose command was fenced (a deposed leader's) "
            "applies only once a current leader's command of that id is read. Stated by the "
            "scheduler."
        )
    )


class WorkloadStarted(EventData):
    """The agent started the workload on its GPUs; occupancy (and charging) starts here."""

    event_type: ClassVar[str] = "fairshare.workload.started.v1"
    topic: ClassVar[TopicKind] = TopicKind.WORKLOADS
    subject_field: ClassVar[str] = "workload_id"

    workload_id: Identifier = Field(
        description=(
            "The workload started; the record's subject. The event time is the run's start: "
            "occupancy, charging (at its whole second, spec 8.2) and the contract count from it. "
            "Stated by the agent that started it."
        )
    )
    attempt: Attempt = Field(ge=1, description="The run started, as placed. Stated by the agent.")
    pool: PoolName = Field(
        description=(
            "The run's pool, as placed: charging credits capacity:<pool> for it. Stated by the "
            "agent."
        )
    )
    placement: Placement = Field(
        description=(
            "The GPUs the run holds, as placed: charging counts them (all nodes) per second of "
            "the run (spec 8.2). Stated by the agent."
        )
    )
    allocated: bool = Field(
        description=(
            "As placed: true charges the run to its budget (kind allocated); false records it at "
            "zero charge, from free:<pool> (kind unallocated; spec 8.3). Stated by the agent."
        )
    )
    budget: BudgetPath | None = Field(
        default=None,
        description=(
            "The workload's budget, as its agent read it: the charging fold of this partition "
            "then needs no fact of another one (an array element's submission lies on its array's "
            "partition, which a charging shard may not hold). None in logs written before arrays, "
            "where the submission, on this partition, names it. Stated by the agent."
        ),
    )


class WorkloadPreempted(EventData):
    """The run was stopped by a preempt command; occupancy ends at the event time."""

    event_type: ClassVar[str] = "fairshare.workload.preempted.v1"
    topic: ClassVar[TopicKind] = TopicKind.WORKLOADS
    subject_field: ClassVar[str] = "workload_id"

    workload_id: Identifier = Field(
        description=(
            "The workload whose run stopped; the record's subject. The event time ends the run's "
            "occupancy and its charges (spec 8.4) and frees its GPUs. Stated by the agent that "
            "stopped it."
        )
    )
    attempt: Attempt = Field(ge=1, description="The run stopped. Stated by the agent.")
    command_id: DerivedId = Field(
        description=(
            "The preempt command carried out (preempt:<workload>:<attempt>). Stated by the agent."
        )
    )
    ran_s: Seconds = Field(
        description=(
            "Whole seconds the run held its GPUs, from its start (0 if it never started), for the "
            "contract check (>= min_runtime_s unless unallocated). Informational: charging ends "
            "the run at the event time and does not read it (spec 8.4). Stated by the agent."
        )
    )


class WorkloadRequeued(EventData):
    """A resumable workload is pending again, keeping its original submit time."""

    event_type: ClassVar[str] = "fairshare.workload.requeued.v1"
    topic: ClassVar[TopicKind] = TopicKind.WORKLOADS
    subject_field: ClassVar[str] = "workload_id"

    workload_id: Identifier = Field(
        description=("The workload pending again; the record's subject. Stated by the scheduler.")
    )
    attempt: Attempt = Field(
        ge=1,
        description=(
            "The attempt that ended; the next placement is attempt + 1. Stated by the scheduler."
        ),
    )
    original_submit_time: UtcDateTime = Field(
        description=(
            "The workload's submit time, UTC, which it keeps: its place in its budget's queue "
            "does not move (readers keep the time their fold took from the submission). Stated by "
            "the scheduler."
        )
    )
    reason: Literal["preempted", "lost"] = Field(
        description=(
            "How the attempt ended: preempted, or lost with its node. Stated by the scheduler."
        )
    )


class WorkloadFinished(EventData):
    event_type: ClassVar[str] = "fairshare.workload.finished.v1"
    topic: ClassVar[TopicKind] = TopicKind.WORKLOADS
    subject_field: ClassVar[str] = "workload_id"

    workload_id: Identifier = Field(
        description=(
            "The workload that ended; the record's subject. The event time ends the run's "
            "occupancy and its charges (spec 8.4); the workload is not requeued. Stated by the "
            "agent that ran it."
        )
    )
    attempt: Attempt = Field(ge=1, description="The run that ended. Stated by the agent.")
    outcome: Literal["succeeded", "failed"] = Field(
        description=(
            "How the run ended, and so the workload: succeeded, or failed (a run its agent "
            "stopped at its time limit is failed). Stated by the agent."
        )
    )
    exit_code: int | None = Field(
        default=None,
        description=(
            "The run's exit code, when the executor reports one. Stated by the agent; "
            "informational."
        ),
    )
    message: ShortText = Field(
        default="",
        description=(
            'Free text from the agent ("time limit" for a run it stopped there). Informational.'
        ),
    )


class WorkloadLost(EventData):
    """The node died under the run; it is charged up to ``last_heartbeat``."""

    event_type: ClassVar[str] = "fairshare.workload.lost.v1"
    topic: ClassVar[TopicKind] = TopicKind.WORKLOADS
    subject_field: ClassVar[str] = "workload_id"

    workload_id: Identifier = Field(
        description=(
            "The workload lost; the record's subject. Stated by the scheduler (its node is down) "
            "or by the agent (it cannot recover the run)."
        )
    )
    attempt: Attempt = Field(
        ge=1, description="The run lost. Stated by the scheduler or the agent."
    )
    node: Identifier = Field(
        description=(
            "The node under the run that died (the scheduler: the node it declared down; the "
            "agent: the first node of the placement)."
        )
    )
    last_heartbeat: UtcDateTime = Field(
        description=(
            "When the run was last known to hold its GPUs, UTC, at most the event time: the "
            "scheduler states the later of the run's and its node's last liveness signal or "
            "heartbeat; the agent, the run's last-seen time or when it found the run gone. The "
            "run ends there: charging charges it up to floor(last_heartbeat), not to the event "
            "time (spec 4.3, 8.4)."
        )
    )
