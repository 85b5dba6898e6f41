"""Records a consumer could not use (topic: deadletter, keyed by source position).

The original bytes are kept whole (base64), so nothing is ever lost: an operator can fix the
producer, or upcast, and re-publish.
"""

from __future__ import annotations

from typing import ClassVar

from pydantic import Field

from events.models.base import EventData
from events.topics import TopicKind
from events.types import Identifier, ShortText


class DeadLetter(EventData):
    event_type: ClassVar[str] = "fairshare.deadletter.v1"
    topic: ClassVar[TopicKind] = TopicKind.DEADLETTER
    subject_field: ClassVar[str] = "source_position"

    source_position: str = Field(
        min_length=1,
        description=(
            "topic/partition/offset of the rejected record; the record's subject and key. With "
            "consumer it derives the envelope's id, so one bad record yields one dead letter per "
            "consumer however often it is redelivered. Stated by the consumer that rejected the "
            "record."
        ),
    )
    source_topic: str = Field(
        min_length=1,
        description=(
            "The Kafka topic the rejected record lies on (full name). Stated by the rejecting "
            "consumer."
        ),
    )
    source_partition: int = Field(
        ge=0, description="Its partition. Stated by the rejecting consumer."
    )
    source_offset: int = Field(
        ge=0, description="Its offset in that partition. Stated by the rejecting consumer."
    )
    consumer: Identifier = Field(
        description=(
            "The name of the consumer that rejected it (the envelope's source is "
            "fairshare/consumer/<consumer>). Stated by that consumer (any service, signed or not: "
            "7.4)."
        )
    )
    reason: ShortText = Field(
        description=(
            "Why it was rejected (it does not decode, lies on another topic, is keyed by "
            "something other than its subject, or is not believed; spec 2.6, 7.4), for operators. "
            "Stated by the rejecting consumer."
        )
    )
    key_b64: str | None = Field(
        default=None,
        description=(
            "The record's Kafka key, its bytes in standard base64; None if it had none. Stated by "
            "the rejecting consumer."
        ),
    )
    value_b64: str | None = Field(
        default=None,
        description=(
            "The record's value, its bytes in standard base64, kept whole so that an operator can "
            "fix the producer or upcast and re-publish it; None if it had none. Stated by the "
            "rejecting consumer."
        ),
    )
    headers_b64: tuple[tuple[str, str], ...] = Field(
        default=(),
        description=(
            'The record\'s headers in order, as [name, base64 of the value] pairs ("" for a header '
            "without value). Stated by the rejecting consumer."
        ),
    )
