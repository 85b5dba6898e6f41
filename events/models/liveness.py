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

    node: Identifier
    cluster: Identifier
    #: Monotonic per node agent, shared with its heartbeats (one reading, one sequence).
    sequence: int = Field(ge=0)
    gpus: tuple[GpuReading, ...]

    @model_validator(mode="after")
    def _consistent(self) -> NodeAlive:
        check_readings(self.gpus)
        return self
