"""Where a workload runs: shared by placed/started events and place commands."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, model_validator

from events.types import GpuIndex, Identifier


class NodeGpus(BaseModel):
    """The GPUs a workload holds on one node."""

    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)

    node: Identifier = Field(
        description="A node of the placement's pool, each once; chosen by the scheduler."
    )
    gpus: tuple[GpuIndex, ...] = Field(
        min_length=1,
        description=(
            "The indices of the GPUs the run holds on that node, distinct; a GPU is never "
            "assigned to two runs at once (the fold refuses it). Chosen by the scheduler."
        ),
    )

    @model_validator(mode="after")
    def _distinct_gpus(self) -> NodeGpus:
        if len(set(self.gpus)) != len(self.gpus):
            raise ValueError(f"gpus: GPU indices on node {self.node} must be distinct")
        return self


class Placement(BaseModel):
    """A gang's GPUs across one or more nodes of one pool."""

    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)

    nodes: tuple[NodeGpus, ...] = Field(
        min_length=1,
        description=(
            "The nodes and GPUs of the gang, chosen by the scheduler (its place command and "
            "fairshare.workload.placed.v1 state them; the agent repeats them on the run's start). "
            "Their GPU count is the run's GPUs, which charging multiplies by its seconds (spec "
            "8.2)."
        ),
    )

    @model_validator(mode="after")
    def _distinct_nodes(self) -> Placement:
        names = [part.node for part in self.nodes]
        if len(set(names)) != len(names):
            raise ValueError("nodes: each node may appear only once in a placement")
        return self

    @property
    def gpu_count(self) -> int:
        return sum(len(part.gpus) for part in self.nodes)
