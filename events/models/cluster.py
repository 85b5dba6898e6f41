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

    node: Identifier = Field(
        description=(
            "The node's name, unique in the deployment; the record's subject. Its first believed "
            "registration tells readers whose node it is (spec 7.6). Stated by the node's agent."
        )
    )
    cluster: Identifier = Field(
        description=(
            "The cluster the node belongs to; an agent may register only its own cluster's nodes "
            "(spec 7.6), and commands for work on the node go to this cluster's agent. Stated by "
            "the node's agent."
        )
    )
    pool: PoolName = Field(
        description=(
            "The pool the node's GPUs count in (the cluster, or a GPU type within it): capacity, "
            "shares, usage and placement are per pool. Fixed: a re-registration with another pool "
            "or GPU count is refused by the fold. Stated by the node's agent."
        )
    )
    gpus: GpuCount = Field(
        description=(
            "The node's GPU count: placements name its GPUs by index 0..gpus-1, and it adds to "
            "its pool's capacity. Fixed, as pool. Stated by the node's agent."
        )
    )
    gpu_type: Identifier = Field(
        description=(
            "The GPU model as the agent reports it (e.g. h100); shown by the api and the read "
            "models, not used to place work (a pool per GPU type separates types). Stated by the "
            "node's agent."
        )
    )
    executor: Literal["", "simulated", "local", "slurm", "kubernetes"] = Field(
        default="",
        description=(
            'What runs the work placed there (kubernetes, slurm, local, simulated; "" when the '
            "agent did not say): the api checks a workload's spec against what each of its pools "
            "can run, at submit. Stated by the node's agent."
        ),
    )
    block: TopologyName = Field(
        default="",
        description=(
            "The node's block: the nodes under one leaf switch, or one NVLink/InfiniBand island; "
            '"" when unknown (the node is then a block of its own). A gang that spans nodes goes '
            "to the fewest blocks that fit it (design 2.5). Agents read it from their cluster (a "
            "nodes file, Slurm's topology, Kubernetes node labels); the latest registration "
            "holds. Stated by the node's agent."
        ),
    )
    rack: TopologyName = Field(
        default="",
        description=(
            'The node\'s rack within its block; "" when unknown. Placement fills racks within the '
            "one block a gang only partly fills (design 2.5); read and updated as block. Stated "
            "by the node's agent."
        ),
    )


class NodeCordoned(EventData):
    """No new placements; running work drains as contracts expire."""

    event_type: ClassVar[str] = "fairshare.node.cordoned.v1"
    topic: ClassVar[TopicKind] = TopicKind.CLUSTER
    subject_field: ClassVar[str] = "node"

    node: Identifier = Field(
        description=(
            "The node cordoned; the record's subject. From the event time it takes no new "
            "placements, and each run on it is preempted (reason drain) once past its contract "
            "(design 2.8). Stated by the api for an admin (or an admin's tool), or by the node's "
            "agent when its cluster took the node out of service."
        )
    )
    cordoned_by: Identifier = Field(
        description=(
            "Who cordoned it: the admin's user id (api), or the agent's actor (slurm, kubernetes) "
            "when the cluster took the node out of service. Stated as node; informational."
        )
    )
    reason: ShortText = Field(
        default="",
        description=(
            "Free text: why (the cluster's reason, for an agent's cordon). Stated as node; "
            "informational."
        ),
    )


class NodeUncordoned(EventData):
    event_type: ClassVar[str] = "fairshare.node.uncordoned.v1"
    topic: ClassVar[TopicKind] = TopicKind.CLUSTER
    subject_field: ClassVar[str] = "node"

    node: Identifier = Field(
        description=(
            "The node returned to service (it takes placements again); the record's subject. "
            "Stated by the api for an admin (or an admin's tool), or by the agent lifting its own "
            "cordon."
        )
    )
    uncordoned_by: Identifier = Field(
        description=(
            "Who uncordoned it: the admin's user id (api), or the agent's actor lifting its own "
            "cordon when the cluster put the node back. Informational."
        )
    )


class NodeDrained(EventData):
    """A cordoned node became empty: ready for maintenance."""

    event_type: ClassVar[str] = "fairshare.node.drained.v1"
    topic: ClassVar[TopicKind] = TopicKind.CLUSTER
    subject_field: ClassVar[str] = "node"

    node: Identifier = Field(
        description=(
            "The cordoned node that became empty, as the scheduler observed it: ready for "
            "maintenance. The record's subject. Stated by the scheduler."
        )
    )


class NodeDown(EventData):
    """Heartbeats stopped for the timeout; its workloads are lost."""

    event_type: ClassVar[str] = "fairshare.node.down.v1"
    topic: ClassVar[TopicKind] = TopicKind.CLUSTER
    subject_field: ClassVar[str] = "node"

    node: Identifier = Field(
        description=(
            "The node the scheduler declared down: silent (no liveness signal nor heartbeat) for "
            "its timeout (default 60 s). Its runs are then lost; the record's subject. Stated by "
            "the scheduler."
        )
    )
    last_heartbeat: UtcDateTime | None = Field(
        default=None,
        description=(
            "When the node was last heard from (its last liveness signal or heartbeat as the "
            "scheduler folded them), UTC; null where no signal dates its end (a node the "
            "simulator takes down once drained). Readers take it as the node's last-seen time, so "
            "a fold of the durable log alone re-derives its lost runs' ends. Stated by the "
            "scheduler."
        ),
    )


class NodeUp(EventData):
    event_type: ClassVar[str] = "fairshare.node.up.v1"
    topic: ClassVar[TopicKind] = TopicKind.CLUSTER
    subject_field: ClassVar[str] = "node"

    node: Identifier = Field(
        description=(
            "The down node heard from again within the timeout, declared up by the scheduler: "
            "placeable again (unless cordoned). The record's subject. Stated by the scheduler."
        )
    )


#: A foreign holder's name, and the other texts its cluster gives of it.
_HolderName = Annotated[str, StringConstraints(min_length=1, max_length=300, pattern=TEXT_PATTERN)]
_HolderText = Annotated[str, StringConstraints(max_length=200, pattern=TEXT_PATTERN)]


class ForeignHolder(BaseModel):
    """One piece of work Fairshare did not place that holds GPUs of the node, as its cluster
    names it: a Kubernetes pod (``namespace/pod``, its scheduler), a Slurm job (its id, and
    its partition and user when the agent knows them)."""

    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)

    name: _HolderName = Field(
        description=(
            "The holder as its cluster names it: a Kubernetes pod's namespace/pod, a Slurm job's "
            "id. Shown to people; not interpreted. Stated by the node's agent."
        )
    )
    gpus: GpuCount = Field(
        description="How many of the node's GPUs it holds. Stated by the node's agent."
    )
    scheduler: _HolderText = Field(
        default="",
        description=(
            "Kubernetes: the pod's schedulerName (\"\" otherwise). Stated by the node's agent."
        ),
    )
    partition: _HolderText = Field(
        default="",
        description=(
            'Slurm: the job\'s partition, when the agent knows it ("" otherwise). Stated by the '
            "node's agent."
        ),
    )
    user: _HolderText = Field(
        default="",
        description=(
            "Slurm: the job's user, when the agent knows it (\"\" otherwise). Stated by the node's "
            "agent."
        ),
    )


class NodeForeignGpus(EventData):
    """GPUs of the node held by work Fairshare did not place (pods of other schedulers, jobs
    of other partitions), stated by the node's agent when that changes (0: none any more).

    The scheduler counts them as unavailable: a node's free GPUs for placement exclude them
    (design 2.8). A count, not indices: Fairshare's GPU indices are its own bookkeeping, and
    the cluster picks the devices."""

    event_type: ClassVar[str] = "fairshare.node.foreign_gpus.v1"
    topic: ClassVar[TopicKind] = TopicKind.CLUSTER
    subject_field: ClassVar[str] = "node"

    node: Identifier = Field(
        description=(
            "The node whose GPUs are held; the record's subject. Stated by the node's agent."
        )
    )
    cluster: Identifier = Field(
        description=(
            "The node's cluster: must be the stating agent's own (spec 7.6). Stated by the node's "
            "agent."
        )
    )
    gpus: int = Field(
        ge=0,
        le=1_000_000,
        description=(
            "How many of the node's GPUs work Fairshare did not place holds now (0: none any "
            "more), replacing the previous statement. The scheduler's fold takes them off the "
            "node's free GPUs (at most its GPU count) for every later placement; the pool's "
            "capacity, and so its shares, still counts them (design 2.8). Stated by the node's "
            "agent."
        ),
    )
    holders: tuple[ForeignHolder, ...] = Field(
        default=(),
        max_length=MAX_FOREIGN_HOLDERS,
        description=(
            "What holds them, in the cluster's order of names; at most 32 listed (gpus counts the "
            "rest). Shown to people; placement reads only gpus. Stated by the node's agent."
        ),
    )
