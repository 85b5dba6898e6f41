"""A node's 10-s liveness signal (topic: liveness, keyed by node; kept for days, not forever).

What the running services need every 10 s and the durable log does not: that the node's agent
is alive (the scheduler's down detection, a lost run's last-seen time) and the readings the
API shows. The durable facts stay what a charge or an audited decision depends on: a
:class:`~events.models.heartbeats.GpuHeartbeat` every few minutes confirms occupancy for the
ledger, and a ``node.down`` states the last time its node was seen, as does a lost run's
``WorkloadLost.last_heartbeat`` (docs/design.md, "What the log keeps").
"""

from __future__ import annotations

from typing import ClassVar

from pydantic import Field, model_validator

from events.models.base import EventData
from events.models.heartbeats import GpuReading, check_readings
from events.topics import TopicKind
from events.types import Identifier


class NodeAlive(EventData):
    """One node's agent is alive, with its GPUs' readings at the event time."""

    event_type: ClassVar[str] = "fairshare.node.alive.v1"
    topic: ClassVar[TopicKind] = TopicKind.LIVENESS
    subject_field: ClassVar[str] = "node"

    node: Identifier = Field(
        description=(
            "The node whose agent is alive; the record's subject. The scheduler and the api take "
            "the event time as its last-seen time (down detection, a lost run's end). Stated by "
            "the node's agent."
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
            "heartbeats (one reading, one number); it also derives the envelope's id. Stated by "
            "the node's agent."
        ),
    )
    gpus: tuple[GpuReading, ...] = Field(
        description=(
            "The node's GPU readings at the event time, as a heartbeat's; they confirm no "
            "occupancy: the ledger never reads a liveness signal (spec 8.1, 9.3). Stated by the "
            "node's agent."
        )
    )

    @model_validator(mode="after")
    def _consistent(self) -> NodeAlive:
        check_readings(self.gpus)
        return self
