"""The base every event payload derives from.

Payloads are frozen (an event is a fact; it never changes after it is written), reject unknown
fields (a typo in a producer must not silently drop information) and are strict (``"3"`` is not
a GPU count). Each concrete model declares its versioned CloudEvents ``type``, the topic family
it travels on, and which field is its subject (the Kafka key, so that all events of one workload,
node or budget stay ordered on one partition).
"""

from __future__ import annotations

from typing import ClassVar

from pydantic import BaseModel, ConfigDict

from events.topics import TopicKind


class EventData(BaseModel):
    """Payload of one event (the CloudEvents ``data``)."""

    # defer_build: each model's validator is built when it first validates, not on import (a
    # client of the API reads a few of these types and paid for all fifty)
    model_config = ConfigDict(frozen=True, extra="forbid", strict=True, defer_build=True)

    #: Versioned CloudEvents type, e.g. ``fairshare.workload.submitted.v1``.
    event_type: ClassVar[str]
    #: The topic family the event is published to.
    topic: ClassVar[TopicKind]
    #: Name of the field whose value is the CloudEvents subject and the Kafka key.
    subject_field: ClassVar[str]

    def subject(self) -> str:
        """The workload, node, budget or cluster this event is about."""
        value = getattr(self, self.subject_field)
        return str(value)
