"""Nodes of the clusters (topic: cluster, keyed by node)."""

from __future__ import annotations

from typing import ClassVar, Literal

from events.models.base import EventData
from events.topics import TopicKind
from events.types import GpuCount, Identifier, PoolName, ShortText, TopologyName, UtcDateTime


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
