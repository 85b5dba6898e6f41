"""The durable occupancy confirmation of a node (topic: heartbeats, keyed by node, kept forever).

Charges follow these: the ledger posts a running run's closed hour buckets once a heartbeat
naming it confirms it ran past them. Agents publish one per node every few minutes (and at
once when a node's occupants change, and at a node's start), not every 10 s: the 10-s liveness
signal is :class:`events.models.liveness.NodeAlive`, on a topic that is not kept forever
(docs/design.md, "What the log keeps"). Older logs hold a heartbeat every 10 s; they fold and
audit the same.
"""

from __future__ import annotations

from typing import ClassVar

from pydantic import BaseModel, ConfigDict, Field, model_validator

from events.models.base import EventData
from events.topics import TopicKind
from events.types import GpuIndex, Identifier


class GpuReading(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)

    index: GpuIndex
    #: The workload holding this GPU, or None when idle.
    occupant: Identifier | None = None
    #: The occupant's attempt number, so a heartbeat is never charged to another run.
    attempt: int | None = Field(default=None, ge=1)
    utilisation_pct: float = Field(ge=0, le=100, allow_inf_nan=False)
    memory_used_bytes: int = Field(ge=0)
    memory_total_bytes: int | None = Field(default=None, ge=0)

    def problem(self) -> str | None:
        """Checked by the heartbeat for all its readings in one pass (one Python call per
        heartbeat rather than one per GPU: heartbeats dominate the log)."""
        if self.attempt is not None and self.occupant is None:
            return f"gpus.{self.index}.attempt: given without an occupant"
        if self.memory_total_bytes is not None and self.memory_used_bytes > self.memory_total_bytes:
            return f"gpus.{self.index}.memory_used_bytes: exceeds memory_total_bytes"
        return None


class GpuHeartbeat(EventData):
    """One node's GPUs at the event time."""

    event_type: ClassVar[str] = "fairshare.node.heartbeat.v1"
    topic: ClassVar[TopicKind] = TopicKind.HEARTBEATS
    subject_field: ClassVar[str] = "node"

    node: Identifier
    cluster: Identifier
    #: Monotonic per node agent; lets consumers spot gaps and duplicates.
    sequence: int = Field(ge=0)
    gpus: tuple[GpuReading, ...]

    @model_validator(mode="after")
    def _consistent(self) -> GpuHeartbeat:
        check_readings(self.gpus)
        return self


def check_readings(gpus: tuple[GpuReading, ...]) -> None:
    """The cross-field rules of a node's readings (a heartbeat's and a liveness signal's):
    distinct indices, and each reading's own (:meth:`GpuReading.problem`)."""
    indices = {gpu.index for gpu in gpus}
    if len(indices) != len(gpus):
        raise ValueError("gpus: GPU indices must be distinct")
    for gpu in gpus:
        problem = gpu.problem()
        if problem is not None:
            raise ValueError(problem)
