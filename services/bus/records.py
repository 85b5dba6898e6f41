"""Turning one raw log record into an event, or into the reason it is not one.

Every reader of the log checks records here (:func:`check`): the consumer-group subscribers
of both bus adapters, the group-less followers of the scheduler, the API's view and the agents,
the export, the audit's reading of Kafka and the charging host's reading of the ledger. When
readers disagreed, a valid event produced with another key or onto another topic was
dead-lettered by some and acted on by others (placed by the scheduler, run by an agent, absent
from the API's view, exported beside the original). A record is rejected when it does not
decode, when its type belongs on another topic, or when its key is not its subject (it would
be on the wrong partition, out of order with its siblings).

What a reader does with a rejected record depends on whether it owns dead-lettering (a
consumer-group member does: :func:`route`, ``services.bus.deadletters``) or only skips and
counts it (the group-less readers).
"""

from __future__ import annotations

import base64
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from events.envelope import Envelope, derived_event_id, new_event
from events.lean import BinaryDecoder
from events.models import DeadLetter
from events.positions import Delivery, Position
from events.registry import EventRegistry
from events.serde import EventDecodeError, decode_binary, encode_binary
from events.topics import Topics

if TYPE_CHECKING:
    from confluent_kafka import Message

log = logging.getLogger(__name__)


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


@dataclass(frozen=True)
class Rejected:
    """A record that is not a valid event where it lies, and why not."""

    record: RawRecord
    reason: str

    @property
    def position(self) -> Position:
        return self.record.position


def raw_record(message: Message) -> RawRecord:
    """A confluent-kafka message as bytes and position (headers in order, values as bytes)."""
    headers = message.headers() or []
    pairs = list(headers.items()) if isinstance(headers, dict) else headers
    return RawRecord(
        topic=message.topic() or "",
        partition=message.partition() or 0,
        offset=message.offset() or 0,
        key=message.key(),
        value=message.value(),
        headers=[(name, v.encode() if isinstance(v, str) else v) for name, v in pairs],
    )


def check(
    record: RawRecord,
    topics: Topics,
    registry: EventRegistry | None = None,
    decode: BinaryDecoder | None = None,
) -> Delivery | Rejected:
    """The one check of every reader: the record decodes (strictly, upcast by ``registry``;
    the audit may pass the lean decoder of ``events.lean``), lies on its type's topic, and is
    keyed by its subject."""
    try:
        envelope: Envelope[Any] = (
            decode(record.value, record.headers)
            if decode is not None
            else decode_binary(record.value, record.headers, registry)
        )
    except EventDecodeError as error:
        return Rejected(record, str(error))
    expected_topic = topics.name(type(envelope.data).topic)
    if record.topic != expected_topic:
        reason = f"type: {envelope.type} belongs on topic {expected_topic!r}, not {record.topic!r}"
        return Rejected(record, reason)
    if record.key != envelope.key:
        return Rejected(record, f"key: {record.key!r} is not the subject {envelope.subject!r}")
    return Delivery(envelope=envelope, position=record.position)


def record_of(delivery: Delivery) -> RawRecord:
    """A delivered event as the record it was read from, for a dead letter of a record that
    decoded but is not believed (``services.bus.trust``): encoding is deterministic, so the
    bytes are those the producer wrote, but for the order of headers other than ours."""
    encoded = encode_binary(delivery.envelope)
    position = delivery.position
    return RawRecord(
        position.topic,
        position.partition,
        position.offset,
        encoded.key,
        encoded.value,
        list(encoded.headers),
    )


def skip(rejected: Rejected, reader: str) -> Position:
    """What a group-less reader does with a rejected record: log it and move past it. It does
    not dead-letter: its consumers do, once each (``services.bus.deadletters``), where a
    follower would add a dead letter per reader and per start."""
    log.warning(
        "skipped an invalid record",
        extra={
            "reader": reader,
            "topic": rejected.record.topic,
            "partition": rejected.record.partition,
            "offset": rejected.record.offset,
            "reason": rejected.reason,
        },
    )
    return rejected.position


def _b64(raw: bytes | None) -> str | None:
    return None if raw is None else base64.b64encode(raw).decode()


def source_position(position: Position) -> str:
    return f"{position.topic}/{position.partition}/{position.offset}"


def dead_letter_id(consumer: str, position: str) -> str:
    """Derived from the consumer's stable name and the source position only (not from a
    consumer group, nor the time): however often a consumer restarts, under whatever group,
    one poison record yields one dead letter id per consumer name."""
    return derived_event_id("deadletter", consumer, position)


def dead_letter_for(
    record: RawRecord, reason: str, consumer: str, now: datetime
) -> Envelope[DeadLetter]:
    """A dead letter keeping the record's bytes whole, with its derived id
    (:func:`dead_letter_id`)."""
    position = source_position(record.position)
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
        event_id=dead_letter_id(consumer, position),
    )


def route(
    record: RawRecord,
    *,
    topics: Topics,
    registry: EventRegistry,
    consumer: str,
    now: datetime,
) -> Delivery | Envelope[DeadLetter]:
    """:func:`check`, with a rejected record turned into ``consumer``'s dead letter."""
    checked = check(record, topics, registry)
    if isinstance(checked, Rejected):
        return dead_letter_for(record, checked.reason, consumer, now)
    return checked
