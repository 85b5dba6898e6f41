"""When an agent's durable heartbeat is due: the one rule the agents and the synthetic history
generator (``services.bench.history.gen``) both follow.

Every ``heartbeat_s`` (10 s) a node's liveness signal goes out; its durable heartbeat, the
ledger's confirmation that runs still hold their GPUs, only at the node's first round (its
start, or its agent's), at once when its occupants change, and otherwise every ``confirm_s``
(5 minutes by default). A running run's closed hour is thus posted at most ``confirm_s`` after
the hour ends, and the log keeps 288 heartbeats a node a day instead of 8,640
(docs/design.md, "What the log keeps").
"""

from __future__ import annotations

from collections.abc import Iterable

from events.models import GpuReading

#: The durable heartbeat's default cadence, in seconds.
DEFAULT_CONFIRM_S = 300.0
#: A node's occupancy as a heartbeat states it: (GPU, occupant, attempt) per GPU.
Occupancy = tuple[tuple[int, str | None, int | None], ...]
#: When a node's last durable heartbeat went out, and the occupancy it stated.
Confirmed = tuple[float, Occupancy]


def occupancy(readings: Iterable[GpuReading]) -> Occupancy:
    return tuple((g.index, g.occupant, g.attempt) for g in readings)


def confirmation_due(
    last: Confirmed | None, occupied: Occupancy, now: float, confirm_s: float
) -> bool:
    """Whether a node's durable heartbeat is due at ``now``, given its last one (None: none
    sent by this agent yet)."""
    return last is None or last[1] != occupied or now - last[0] >= confirm_s
