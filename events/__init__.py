"""The language of Fairshare: envelopes, event models, topics, serde and schemas.

Everything here is pure (no I/O): every other part, and every auditor, speaks through it.
"""

from events.envelope import Envelope, derived_event_id, new_event
from events.registry import EventRegistry, UnknownEventTypeError, default_registry
from events.serde import (
    EventDecodeError,
    KafkaRecord,
    decode_binary,
    decode_structured,
    encode_binary,
    encode_structured,
)
from events.topics import TopicKind, Topics

__all__ = [
    "Envelope",
    "EventDecodeError",
    "EventRegistry",
    "KafkaRecord",
    "TopicKind",
    "Topics",
    "UnknownEventTypeError",
    "decode_binary",
    "decode_structured",
    "default_registry",
    "derived_event_id",
    "encode_binary",
    "encode_structured",
    "new_event",
]
