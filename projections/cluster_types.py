"""The cluster's value types: a node, a workload, a job array, and the keys the queues sort by.

Plain slotted dataclasses rather than pydantic models: the simulator folds millions of these
transitions, and the events at the boundary are already validated. The fold that changes them
is ``projections/cluster_state.py``; the lookups derived from them, ``cluster_indexes.py``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from events.models import (
    ForeignHolder,
    WorkloadArraySubmitted,
)
from projections.contract import inside_contract

Status = Literal[
    "pending", "placed", "running", "succeeded", "failed", "cancelled", "preempted", "lost"
]
ACTIVE: frozenset[str] = frozenset({"placed", "running"})
TERMINAL: frozenset[str] = frozenset({"succeeded", "failed", "cancelled"})

#: A pending workload's place in its budget's queue: (-priority, submitted_at, array index,
#: workload_id). The index (-1 for a workload of no array) puts an array's elements in index
#: order, ``A_2`` before ``A_10``; workloads of no array keep the order of their ids.
QueueKey = tuple[int, float, int, str]

#: Pending work is queued per kind: (allocated, GPUs, gang shape). Work of one kind is
#: interchangeable for fitting, so the scheduler can give up on a whole kind at once.
QueueKind = tuple[bool, int, str]

#: GPU indices per node: ((node, (gpu, ...)), ...)
PlacementSpec = tuple[tuple[str, tuple[int, ...]], ...]


@dataclass(slots=True)
class NodeState:
    name: str
    cluster: str
    pool: str
    gpus: int
    gpu_type: str
    assigned: dict[int, str] = field(default_factory=dict)
    holders: dict[str, tuple[int, ...]] = field(default_factory=dict)
    cordoned: bool = False
    down: bool = False
    drained: bool = False
    #: When its agent was last heard from: a liveness signal or a heartbeat, whichever came
    #: later (the scheduler's down detection; a ``node.down`` states it).
    last_heartbeat: float | None = None
    #: Why, by whom and when the node was cordoned (``NodeCordoned``); cleared by an uncordon.
    cordon_reason: str = ""
    cordoned_by: str | None = None
    cordoned_at: float | None = None
    #: What runs the work placed there (``NodeRegistered.executor``; "" when unsaid).
    executor: str = ""
    #: Where it sits in the network (``NodeRegistered.block``/``rack``; "" when unknown): a
    #: gang that spans nodes goes to the fewest blocks that fit it (``placement.py``).
    block: str = ""
    rack: str = ""
    #: GPUs held by work Fairshare did not place (``NodeForeignGpus``, at most ``gpus``), what
    #: holds them (``ForeignHolder``s), and since when the node has had any (None: none).
    #: A count, not indices: Fairshare's indices are its own bookkeeping (the cluster picks
    #: the devices), so they come off the count of free GPUs, not off particular indices.
    foreign: int = 0
    foreign_holders: tuple[ForeignHolder, ...] = ()
    foreign_since: float | None = None
    #: How many foreign-GPU facts changed it so far (its agent derives the next fact's id).
    foreign_changes: int = 0

    @property
    def room(self) -> int:
        """GPUs neither assigned nor held by foreign work: below 0 when a foreign hold came
        onto GPUs Fairshare had already assigned (it stands; only later placements shrink)."""
        return self.gpus - len(self.assigned) - self.foreign

    @property
    def free(self) -> int:
        """GPUs a placement may take: not assigned, and not held by foreign work."""
        return max(0, self.gpus - len(self.assigned) - self.foreign)

    @property
    def schedulable(self) -> bool:
        return not (self.cordoned or self.down)

    def free_indices(self) -> list[int]:
        """The lowest :attr:`free` indices not assigned (foreign work is counted on the
        highest ones, as the agents' readings mark them)."""
        found = [i for i in range(self.gpus) if i not in self.assigned]
        return found[: self.free] if self.foreign else found


@dataclass(slots=True)
class WorkloadState:
    workload_id: str
    budget: str
    pools: tuple[str, ...]
    gpus: int
    gang: str
    min_runtime_s: int
    resumable: bool
    priority: int
    submitter: str
    spec: dict[str, object]
    #: Original submit time (kept across requeues): orders the queue.
    submitted_at: float
    status: Status = "pending"
    attempt: int = 1
    pool: str | None = None
    placement: PlacementSpec = ()
    placed_at: float | None = None
    started_at: float | None = None
    #: A preempt command is out for the current attempt; its GPUs are released.
    preempting: bool = False
    cancel_requested: bool = False
    #: When its node was last heard from while it held GPUs there (see ``NodeState``).
    last_heartbeat: float | None = None
    #: The attempt whose place command was admitted (not fenced): its placement stands even
    #: when a deposed leader's place command with the same derived id is refused later.
    admitted_place_attempt: int = 0
    #: When the current attempt ended (a lost run: its last heartbeat, as it is charged), and
    #: how a finished run ended; cleared by a requeue.
    ended_at: float | None = None
    exit_code: int | None = None
    end_message: str = ""
    #: Preempt commands against it so far, every attempt, cancellations not counted: the
    #: churn rules stop choosing it as a victim at ``churn.MAX_PREEMPTIONS``.
    preemptions: int = 0
    #: The time limit it declared (``WorkloadSubmitted.time_limit_s``); None: its pool's default
    #: (``scheduling/time_limits.py`` resolves it).
    time_limit_s: int | None = None
    #: The job array it is an element of, and its index there (None: of no array).
    array_id: str | None = None
    array_index: int | None = None

    @property
    def allocated(self) -> bool:
        return self.min_runtime_s > 0

    def queue_key(self) -> QueueKey:
        """Within one budget: higher priority first, then earlier submission, then an array's
        elements by index, then id."""
        index = -1 if self.array_index is None else self.array_index
        return (-self.priority, self.submitted_at, index, self.workload_id)

    def ran_s(self, now: float) -> float:
        """How long the current attempt has run: the contract counts from the start, not from
        the placement (a placed workload may still be waiting for its GPUs to be vacated)."""
        return 0.0 if self.started_at is None else max(0.0, now - self.started_at)

    def contract_over(self, now: float) -> bool:
        """Whether it has started and is past its contract at ``now`` (always, once started,
        without one): the one rule, ``projections/contract.py``."""
        return self.started_at is not None and not inside_contract(
            self.started_at, self.min_runtime_s, now
        )


@dataclass(slots=True)
class ArrayState:
    """A job array as its fact states it; its elements are workloads like any other."""

    submitted: WorkloadArraySubmitted
    submitted_at: float
    #: Its elements' ids, in index order (an id already taken when the array came is not one).
    elements: list[str] = field(default_factory=list)
    #: Elements still in memory: the array leaves it with the last (``forget_ended_before``).
    remaining: int = 0

    @property
    def array_id(self) -> str:
        return self.submitted.array_id
