"""The facts of one synthetic workload as each service states them, and the log positions
they are stated at (for ``services.bench.history.gen``).

Ids and sources are the services' own: the API's submission (``fairshare-api``), the
scheduler's place command and placement (``SchedulingPass.place``: ``place:<workload>:<attempt>``,
ids derived from it and the lease epoch, as ``SchedulerService._envelope`` derives them), the
agent's start and finish (``services.agents.agent.fact_id``).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

from events import TopicKind, Topics
from events.envelope import derived_event_id
from events.models import (
    BudgetStanding,
    DecisionRecord,
    EventData,
    InputPosition,
    NodeGpus,
    PlaceCommand,
    Placement,
    SchedulerSettings,
    WorkloadFinished,
    WorkloadPlaced,
    WorkloadStarted,
    WorkloadSubmitted,
)
from events.times import DEFAULT_WINDOW_S
from projections.usage_window import UsageWindow
from services.bus.partitioning import partition_for_key
from services.scheduler.host import INPUTS as SCHEDULER_INPUTS

#: The lease epoch the history's scheduler led in (its commands' fencing token).
EPOCH = 1
#: The lab's leaves and their fair shares (``services.launcher.lab``: weights 2, 1, 1).
SHARES = {"lab/vision": 0.5, "lab/robotics": 0.25, "lab/nlp": 0.25}
#: What (data, time, source, event id) a fact is written as.
Fact = tuple[EventData, float, str, str]
#: The charging host's inputs (the scheduler's are its own INPUTS).
_CHARGING_INPUTS = (TopicKind.WORKLOADS, TopicKind.HEARTBEATS)


@dataclass(frozen=True)
class Job:
    workload_id: str
    node: str
    gpus: tuple[int, ...]
    budget: str
    submitter: str
    runtime_s: int
    min_runtime_s: int

    @property
    def placement(self) -> Placement:
        return Placement(nodes=(NodeGpus(node=self.node, gpus=self.gpus),))


class Positions:
    """The next offset of every partition, counted as records are written (a fresh topic's
    offsets are 0, 1, 2, ...: the producer is idempotent, not transactional), with the
    partition the producers' murmur2 partitioner picks for each key."""

    def __init__(self, topics: Topics, partitions: dict[str, int]) -> None:
        self.topics = topics
        self.partitions = {kind: partitions.get(topics.name(kind), 3) for kind in TopicKind}
        self.next: dict[tuple[TopicKind, int], int] = {}
        self._partition_of: dict[tuple[TopicKind, str], int] = {}

    def count(self, kind: TopicKind, subject: str) -> None:
        partition = self._partition_of.get((kind, subject))
        if partition is None:
            partition = partition_for_key(subject.encode(), self.partitions[kind])
            self._partition_of[(kind, subject)] = partition
        self.next[(kind, partition)] = self.next.get((kind, partition), 0) + 1

    def ends(self, kind: TopicKind) -> dict[int, int]:
        return {p: self.next.get((kind, p), 0) for p in range(self.partitions[kind])}

    def _positions(self, kinds: tuple[TopicKind, ...], all_partitions: bool) -> list[InputPosition]:
        positions = [
            InputPosition(topic=self.topics.name(kind), partition=p, offset=offset)
            for kind in kinds
            for p, offset in self.ends(kind).items()
            if all_partitions or offset
        ]
        return sorted(positions, key=lambda p: (p.topic, p.partition))

    def of_scheduler(self) -> tuple[InputPosition, ...]:
        """What a pass's decision record names: every partition of the scheduler's inputs."""
        return tuple(self._positions(SCHEDULER_INPUTS, all_partitions=True))

    def of_charging(self) -> tuple[InputPosition, ...]:
        """What a usage snapshot names: the charging host's inputs it has read from."""
        return tuple(self._positions(_CHARGING_INPUTS, all_partitions=False))


class JobFacts:
    """Builds each fact of a workload's life, validated (they are a few percent of a
    history; the heartbeats are the rest)."""

    def __init__(self, cluster: str, capacity_gpus: int) -> None:
        self.cluster = cluster
        self.capacity_gpus = capacity_gpus
        #: The end of the latest usage snapshot (what decision records name).
        self.usage_as_of: float | None = None

    def submitted(self, job: Job, t: float) -> Fact:
        data = WorkloadSubmitted(
            workload_id=job.workload_id,
            budget=job.budget,
            pools=(self.cluster,),
            gpus=len(job.gpus),
            min_runtime_s=job.min_runtime_s,
            submitter=job.submitter,
            spec={"command": "python train.py", "image": "registry/train:1"},
        )
        event_id = derived_event_id("bench-history", "submitted", job.workload_id)
        return data, t, "fairshare-api", event_id

    def placed(
        self, job: Job, t: float, usage: UsageWindow, position: tuple[InputPosition, ...]
    ) -> list[Fact]:
        command_id = f"place:{job.workload_id}:1"
        allocated = job.min_runtime_s > 0
        decision = DecisionRecord(
            pass_id=int(t * 1000),
            input_position=position,
            reason="fairshare" if allocated else "burst",
            budgets=self._standing(job.budget, usage, t) if allocated else (),
            usage_as_of=None if self.usage_as_of is None else _utc(self.usage_as_of),
        )
        command = PlaceCommand(
            command_id=command_id,
            epoch=EPOCH,
            cluster=self.cluster,
            pool=self.cluster,
            workload_id=job.workload_id,
            attempt=1,
            budget=job.budget,
            placement=job.placement,
            allocated=allocated,
            min_runtime_s=job.min_runtime_s,
            spec={"command": "python train.py", "image": "registry/train:1"},
            decision=decision,
        )
        placed = WorkloadPlaced(
            workload_id=job.workload_id,
            attempt=1,
            pool=self.cluster,
            placement=job.placement,
            allocated=allocated,
            command_id=command_id,
        )
        return [(data, t, "fairshare/scheduler", _scheduler_id(data)) for data in (command, placed)]

    def _standing(self, leaf: str, usage: UsageWindow, t: float) -> tuple[BudgetStanding, ...]:
        """The leaf's place in the order, as a pass computes it from the window's usage."""
        window = self.capacity_gpus * DEFAULT_WINDOW_S
        ratios = {
            budget: usage.allocated(self.cluster, budget, t) / (share * window)
            for budget, share in SHARES.items()
        }
        ranked = sorted(ratios, key=lambda budget: (ratios[budget], budget))
        return (
            BudgetStanding(
                budget=leaf,
                rank=ranked.index(leaf) + 1,
                share=SHARES[leaf],
                usage_gpu_s=int(usage.allocated(self.cluster, leaf, t)),
                usage_ratio=ratios[leaf],
            ),
        )

    def started(self, job: Job, t: float) -> Fact:
        data = WorkloadStarted(
            workload_id=job.workload_id,
            attempt=1,
            pool=self.cluster,
            placement=job.placement,
            allocated=job.min_runtime_s > 0,
        )
        return data, t, self._agent, derived_event_id("agent", "started", job.workload_id, "1")

    def finished(self, job: Job, t: float, failed: bool) -> Fact:
        data = WorkloadFinished(
            workload_id=job.workload_id,
            attempt=1,
            outcome="failed" if failed else "succeeded",
            exit_code=1 if failed else 0,
        )
        return data, t, self._agent, derived_event_id("agent", "finished", job.workload_id, "1")

    @property
    def _agent(self) -> str:
        return f"fairshare/agent/{self.cluster}"


def settings_fact() -> SchedulerSettings:
    """The settings a leader of ``fairshare up`` states (its grace period is 10 s)."""
    from scheduling.scheduling_pass import PassContext
    from scheduling.settings import settings_of

    return settings_of(PassContext(now=0.0, grace_period_s=10, epoch=EPOCH))


def _scheduler_id(data: PlaceCommand | WorkloadPlaced) -> str:
    """``SchedulerService._envelope``'s id: the command id and the epoch."""
    return derived_event_id("scheduler", data.event_type, f"{data.command_id}@{EPOCH}")


def _utc(seconds: float) -> datetime:
    return datetime.fromtimestamp(seconds, UTC)
