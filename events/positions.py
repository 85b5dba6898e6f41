"""Where an event sits in the log, and an event handed out with that position.

These are the vocabulary of replay and of "decided at": decision records, stored projector
positions and the bus all speak it, so it lives with the event language rather than with any
bus adapter."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from events.envelope import Envelope

TopicPartition = tuple[str, int]
"""A topic and one of its partitions: the key of anything kept per partition (offsets, lag,
checkpoints, what has been read so far)."""


@dataclass(frozen=True, order=True)
class Position:
    """Where a record sits in the log: the unit of replay and of "decided at"."""

    topic: str
    partition: int
    offset: int


@dataclass(frozen=True)
class Delivery:
    envelope: Envelope[Any]
    position: Position
