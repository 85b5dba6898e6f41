"""The CloudEvents 1.0 envelope around every event payload.

One envelope for all events and commands: ``type`` says which payload model ``data`` holds,
``subject`` is the workload/node/budget/cluster it is about (and the Kafka key), and
``correlationid``/``causationid`` chain a decision back to the facts that caused it.
"""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Annotated, Any, Generic, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, StringConstraints, model_validator

from events.models.base import EventData
from events.types import UtcDateTime, utc_epoch_seconds

DataT = TypeVar("DataT", bound=EventData)

#: ``fairshare.<noun>[.<noun>...].<verb>.v<N>``: the version suffix is what upcasting keys on.
EVENT_TYPE_PATTERN = r"^fairshare(\.[a-z][a-z_]*)+\.v[1-9][0-9]*$"

EventType = Annotated[str, StringConstraints(pattern=EVENT_TYPE_PATTERN)]
EventId = Annotated[
    str,
    StringConstraints(pattern=r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$"),
]
Source = Annotated[str, StringConstraints(min_length=1, max_length=512, pattern=r"^\S+$")]
#: The id of the key that signed the record (``events.models.keys.KeyId``).
Signer = Annotated[str, StringConstraints(pattern=r"^[0-9a-f]{32}$")]
#: An Ed25519 signature (64 bytes) in standard base64.
Signature = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9+/]{86}==$")]
#: Where a record sits in a batch signed at once: ``<index>/<count>/<sibling hashes>``, the
#: hashes of its Merkle path (SHA-256 each) in standard base64 (``events.signing``).
BatchProof = Annotated[
    str, StringConstraints(max_length=1024, pattern=r"^[0-9]{1,5}/[0-9]{1,5}/[A-Za-z0-9+/]*={0,2}$")
]

SPECVERSION = "1.0"
CONTENT_TYPE = "application/json"


class Envelope(BaseModel, Generic[DataT]):
    """A CloudEvents 1.0 event whose ``data`` is a Fairshare payload model."""

    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)

    specversion: Literal["1.0"] = "1.0"
    id: EventId
    source: Source
    type: EventType
    time: UtcDateTime
    subject: str
    correlationid: EventId | None = None
    causationid: EventId | None = None
    #: CloudEvents extensions: the key that signed the record and its signature over the
    #: canonical form of everything else (``events.signing``); None on unsigned records. A
    #: record signed with others in one batch carries its ``batchproof`` too, and its signature
    #: is then over the batch's Merkle root, which the proof and the record's own canonical
    #: form give back.
    signer: Signer | None = None
    signature: Signature | None = None
    batchproof: BatchProof | None = None
    datacontenttype: Literal["application/json"] = "application/json"
    data: DataT

    @model_validator(mode="after")
    def _matches_payload(self) -> Envelope[DataT]:
        expected_type = type(self.data).event_type
        if self.type != expected_type:
            raise ValueError(f"type: {self.type!r} does not match its data ({expected_type!r})")
        expected_subject = self.data.subject()
        if self.subject != expected_subject:
            raise ValueError(
                f"subject: {self.subject!r} must be the payload's "
                f"{type(self.data).subject_field} ({expected_subject!r})"
            )
        if (self.signer is None) != (self.signature is None):
            raise ValueError("signature: signer and signature come together or not at all")
        if self.batchproof is not None and self.signature is None:
            raise ValueError("batchproof: only a signed record has a place in a signed batch")
        return self

    @property
    def epoch_seconds(self) -> int:
        """The event's time in whole seconds since the epoch: the one way every fold is told
        when a fact happened (charges, windows and read models all count whole seconds)."""
        return utc_epoch_seconds(self.time)

    @property
    def key(self) -> bytes:
        """The Kafka key: the subject, so one subject's events stay ordered on one partition."""
        return self.subject.encode()


_PARAMETRISED: dict[type[EventData], Any] = {}


def envelope_class(model: type[EventData]) -> Any:
    """``Envelope[model]``, cached: parametrising a generic model costs far more than
    validating one event, and every decode needs it."""
    cls = _PARAMETRISED.get(model)
    if cls is None:
        cls = _PARAMETRISED[model] = Envelope[model]  # type: ignore[valid-type]
    return cls


def new_event(
    data: DataT,
    *,
    source: str,
    time: datetime,
    event_id: str | None = None,
    correlationid: str | None = None,
    causationid: str | None = None,
) -> Envelope[DataT]:
    """Wrap ``data`` in an envelope; pass ``event_id`` for ids derived deterministically."""
    envelope: Envelope[DataT] = envelope_class(type(data))(
        id=event_id or str(uuid.uuid4()),
        source=source,
        type=type(data).event_type,
        time=time,
        subject=data.subject(),
        correlationid=correlationid,
        causationid=causationid,
        data=data,
    )
    return envelope


def derived_event_id(*parts: str) -> str:
    """A deterministic event id from its causes, so a replay re-derives the same id."""
    return str(uuid.uuid5(uuid.NAMESPACE_URL, "fairshare:" + "|".join(parts)))
