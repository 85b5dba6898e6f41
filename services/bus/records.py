"""Turning one raw log record into an event, or into a dead letter saying why not.

Both bus adapters (Kafka and in-memory) route through here, so "what is a valid event on this
topic" is decided in exactly one place. A record is dead-lettered when it does not decode, when
its type belongs on another topic, or when its key is not its subject (it would be on the wrong
partition, out of order with its siblings).
"""

from __future__ import annotations

import base64
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from events.envelope import Envelope, derived_event_id, new_event
from events.models import DeadLetter
from events.positions import Delivery, Position
from events.registry import EventRegistry
from events.serde import EventDecodeError, decode_binary
from events.topics import Topics


@dataclass(frozen=True)
class RawRecord:
    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: Sequence[tuple[str, bytes | None]]

    @property
    def position(self) -> Position:
        return Position(self.topic, self.partition, self.offset)


def _b64(raw: bytes | None) -> str | None:
    return None if raw is None else base64.b64encode(raw).decode()


def dead_letter_for(
    record: RawRecord, reason: str, consumer: str, now: datetime
) -> Envelope[DeadLetter]:
    """A dead letter keeping the record's bytes whole; its id is derived from the source
    position, so a redelivered poison record yields the same dead letter, not a second one."""
    position = f"{record.topic}/{record.partition}/{record.offset}"
    letter = DeadLetter(
        source_position=position,
        source_topic=record.topic,
        source_partition=record.partition,
        source_offset=record.offset,
        consumer=consumer,
        reason=reason[:2000],
        key_b64=_b64(record.key),
        value_b64=_b64(record.value),
        headers_b64=tuple((name, _b64(value) or "") for name, value in record.headers),
    )
    return new_event(
        letter,
        source=f"fairshare/consumer/{consumer}",
        time=now,
        event_id=derived_event_id("deadletter", consumer, position),
    )


def route(
    record: RawRecord,
    *,
    topics: Topics,
    registry: EventRegistry,
    consumer: str,
    now: datetime,
) -> Delivery | Envelope[DeadLetter]:
    try:
        envelope: Envelope[Any] = decode_binary(record.value, record.headers, registry)
    except EventDecodeError as error:
        return dead_letter_for(record, str(error), consumer, now)
    expected_topic = topics.name(type(envelope.data).topic)
    if record.topic != expected_topic:
        reason = f"type: {envelope.type} belongs on topic {expected_topic!r}, not {record.topic!r}"
        return dead_letter_for(record, reason, consumer, now)
    if record.key != envelope.key:
        reason = f"key: {record.key!r} is not the subject {envelope.subject!r}"
        return dead_letter_for(record, reason, consumer, now)
    return Delivery(envelope=envelope, position=record.position)
