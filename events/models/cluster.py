"""Nodes of the clusters (topic: cluster, keyed by node)."""

from __future__ import annotations

from typing import Annotated, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints

from events.models.base import EventData
from events.topics import TopicKind
from events.types import (
    TEXT_PATTERN,
    GpuCount,
    Identifier,
    PoolName,
    ShortText,
    TopologyName,
    UtcDateTime,
)

#: Holders a ``node.foreign_gpus`` lists at most (the count covers the rest).
MAX_FOREIGN_HOLDERS = 32


class NodeRegistered(EventData):
    event_type: ClassVar[str] = "fairshare.node.registered.v1"
    topic: ClassVar[TopicKind] = TopicKind.CLUSTER
    subject_field: ClassVar[str] = "node"

    node: Identifier
    cluster: Identifier
    pool: PoolName
    gpus: GpuCount
    gpu_type: Identifier
    #: What runs the work placed there (``kubernetes``, ``slurm``, ``local``, ``simulated``;
    #: "" when the agent did not say): the API checks a workload's spec against what each of
    #: its pools can run, at submit.
    executor: Literal["", "simulated", "local", "slurm", "kubernetes"] = ""
    #: Where the node sits in the network, coarse to fine: the *block* (the nodes under one
    #: leaf switch, or one NVLink/InfiniBand island) and the *rack* within it; "" when unknown.
    #: A gang that spans nodes goes to the fewest blocks that fit it (design 2.5). Agents read
    #: them from their cluster (a nodes file, Slurm's topology, Kubernetes node labels).
    block: TopologyName = ""
    rack: TopologyName = ""


class NodeCordoned(EventData):
    """No new placements; running work drains as contracts expire."""

    event_type: ClassVar[str] = "fairshare.node.cordoned.v1"
    topic: ClassVar[TopicKind] = TopicKind.CLUSTER
    subject_field: ClassVar[str] = "node"

    node: Identifier
    cordoned_by: Identifier
    reason: ShortText = ""


class NodeUncordoned(EventData):
    event_type: ClassVar[str] = "fairshare.node.uncordoned.v1"
    topic: ClassVar[TopicKind] = TopicKind.CLUSTER
    subject_field: ClassVar[str] = "node"

    node: Identifier
    uncordoned_by: Identifier


class NodeDrained(EventData):
    """A cordoned node became empty: ready for maintenance."""

    event_type: ClassVar[str] = "fairshare.node.drained.v1"
    topic: ClassVar[TopicKind] = TopicKind.CLUSTER
    subject_field: ClassVar[str] = "node"

    node: Identifier


class NodeDown(EventData):
    """Heartbeats stopped for the timeout; its workloads are lost."""

    event_type: ClassVar[str] = "fairshare.node.down.v1"
    topic: ClassVar[TopicKind] = TopicKind.CLUSTER
    subject_field: ClassVar[str] = "node"

    node: Identifier
    last_heartbeat: UtcDateTime | None = None


class NodeUp(EventData):
    event_type: ClassVar[str] = "fairshare.node.up.v1"
    topic: ClassVar[TopicKind] = TopicKind.CLUSTER
    subject_field: ClassVar[str] = "node"

    node: Identifier


class ForeignHolder(BaseModel):
    """One piece of work Fairshare did not place that holds GPUs of the node, as its cluster
    names it: a Kubernetes pod (``namespace/pod``, its scheduler), a Slurm job (its id, and
    its partition and user when the agent knows them)."""

    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)

    name: Annotated[str, StringConstraints(min_length=1, max_length=300, pattern=TEXT_PATTERN)]
    gpus: GpuCount
    #: Kubernetes: the pod's ``schedulerName``.
    scheduler: Annotated[str, StringConstraints(max_length=200, pattern=TEXT_PATTERN)] = ""
    #: Slurm: the job's partition and user.
    partition: Annotated[str, StringConstraints(max_length=200, pattern=TEXT_PATTERN)] = ""
    user: Annotated[str, StringConstraints(max_length=200, pattern=TEXT_PATTERN)] = ""


class NodeForeignGpus(EventData):
    """GPUs of the node held by work Fairshare did not place (pods of other schedulers, jobs
    of other partitions), stated by the node's agent when that changes (0: none any more).

    The scheduler counts them as unavailable: a node's free GPUs for placement exclude them
    (design 2.8). A count, not indices: Fairshare's GPU indices are its own bookkeeping, and
    the cluster picks the devices."""

    event_type: ClassVar[str] = "fairshare.node.foreign_gpus.v1"
    topic: ClassVar[TopicKind] = TopicKind.CLUSTER
    subject_field: ClassVar[str] = "node"

    node: Identifier
    cluster: Identifier
    gpus: int = Field(ge=0, le=1_000_000)
    #: What holds them, in the cluster's order of names; at most ``MAX_FOREIGN_HOLDERS``.
    holders: tuple[ForeignHolder, ...] = Field(default=(), max_length=MAX_FOREIGN_HOLDERS)
