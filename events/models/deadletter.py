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

    #: ``topic/partition/offset`` of the rejected record.
    source_position: str = Field(min_length=1)
    source_topic: str = Field(min_length=1)
    source_partition: int = Field(ge=0)
    source_offset: int = Field(ge=0)
    #: The consumer (group) that rejected it.
    consumer: Identifier
    reason: ShortText
    key_b64: str | None = None
    value_b64: str | None = None
    #: Header (name, base64 value) pairs, in order.
    headers_b64: tuple[tuple[str, str], ...] = ()
