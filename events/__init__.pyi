"""The language of Fairshare: envelopes, event models, topics, serde and schemas.

Everything here is pure (no I/O): every other part, and every auditor, speaks through it.
"""

from .envelope import (
    Envelope as Envelope,
    derived_event_id as derived_event_id,
    new_event as new_event,
)
from .registry import (
    EventRegistry as EventRegistry,
    UnknownEventTypeError as UnknownEventTypeError,
    default_registry as default_registry,
)
from .serde import (
    EventDecodeError as EventDecodeError,
    KafkaRecord as KafkaRecord,
    decode_binary as decode_binary,
    decode_structured as decode_structured,
    encode_binary as encode_binary,
    encode_structured as encode_structured,
)
from .topics import (
    TopicKind as TopicKind,
    Topics as Topics,
)
