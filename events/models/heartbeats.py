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

    index: GpuIndex = Field(
        description=(
            "The GPU's index on its node (0 .. the node's GPU count - 1), as placements name "
            "GPUs; each index once per statement. Stated by the node's agent, as every field of a "
            "reading."
        )
    )
    occupant: Identifier | None = Field(
        default=None,
        description=(
            "The workload the agent sees holding this GPU; None when idle; the cluster's foreign "
            "occupant (e.g. slurm:foreign, kubernetes:foreign) for work Fairshare did not place. "
            "In a heartbeat, a reading with occupant and attempt confirms that run's occupancy up "
            "to the event time, for charging (spec 8.4); a liveness signal's confirms nothing. "
            "Stated by the node's agent."
        ),
    )
    attempt: int | None = Field(
        default=None,
        ge=1,
        description=(
            "The occupant's attempt (run number), so a heartbeat is never charged to another run: "
            "only a reading with both occupant and attempt confirms (spec 8.4). Given only with "
            "an occupant. Stated by the node's agent."
        ),
    )
    utilisation_pct: float = Field(
        ge=0,
        le=100,
        allow_inf_nan=False,
        description=(
            "The GPU's utilisation in percent (0-100) as the agent measured it; informational: no "
            "charge or decision reads it. Stated by the node's agent."
        ),
    )
    memory_used_bytes: int = Field(
        ge=0,
        description=(
            "GPU memory in use, in bytes, at most memory_total_bytes; informational: no charge or "
            "decision reads it. Stated by the node's agent."
        ),
    )
    memory_total_bytes: int | None = Field(
        default=None,
        ge=0,
        description=(
            "The GPU's memory, in bytes; None when the agent does not know it. Stated by the "
            "node's agent; informational."
        ),
    )

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

    node: Identifier = Field(
        description=(
            "The node reporting; the record's subject. Readers take the event time as its "
            "last-seen time (down detection). Stated by the node's agent."
        )
    )
    cluster: Identifier = Field(
        description=(
            "The node's cluster: must be the stating agent's own (spec 7.6). Stated by the node's "
            "agent."
        )
    )
    sequence: int = Field(
        ge=0,
        description=(
            "Counter of the node's statements, increasing per node agent and shared with its "
            "liveness signals (one reading, one number): lets consumers spot gaps and duplicates; "
            "it also derives the envelope's id. Stated by the node's agent."
        ),
    )
    gpus: tuple[GpuReading, ...] = Field(
        description=(
            "One reading per GPU of the node, distinct indices. The ledger folds only these "
            "occupancy confirmations: each run named with its attempt is confirmed up to the "
            "event time, and its closed hour buckets are posted (spec 8.4, 8.5). Stated by the "
            "node's agent."
        )
    )

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
