"""The CloudEvents 1.0 envelope around every event payload.

One envelope for all events and commands: ``type`` says which payload model ``data`` holds,
``subject`` is the workload/node/budget/cluster it is about (and the Kafka key), and
``correlationid``/``causationid`` chain a decision back to the facts that caused it.
"""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Annotated, Any, Generic, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, model_validator

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

    specversion: Literal["1.0"] = Field(
        default="1.0",
        description=(
            'CloudEvents specification version, always "1.0" (spec 2.1). Written by every '
            "producer; part of the signed canonical form (spec 5.2)."
        ),
    )
    id: EventId = Field(
        description=(
            "The record's id, a lowercase UUID, set by the producer. Random where a fact is "
            "stated once (the api's facts); derived from its causes (UUIDv5, spec 2.8) wherever "
            "it could be emitted twice (scheduler decisions, agent facts, charges from their "
            "charge_id, usage snapshots, period seals, dead letters), so a re-emission has the "
            "same id. Readers drop duplicates by it, refuse a signed record re-stated under the "
            "same id with other content (spec 7.7), and break ties of the ledger's canonical "
            "order by it (spec 8.9). Signed."
        )
    )
    source: Source = Field(
        description=(
            "The component that emitted the record, set by its producer: 1 to 512 characters "
            "without whitespace, e.g. fairshare-api, fairshare/scheduler, fairshare/charging, "
            "fairshare/agent/<cluster>, fairshare/consumer/<consumer> (dead letters). "
            "Informational: who may state a fact is decided by its signer (spec 7), not by its "
            "source; the decision audit tells the scheduler's outputs by fairshare/scheduler. "
            "Signed."
        )
    )
    type: EventType = Field(
        description=(
            "The payload's versioned type, fairshare.<noun>[.<noun>...].<verb>.v<N>, set by the "
            "producer: must be the type of the data model (spec 2.2). Selects the payload's "
            "schema, its topic, its subject field and the roles that may state it (spec 3.3) and, "
            "for an older version, the upcaster that reads it as the current one (spec 2.7). "
            "Signed."
        )
    )
    time: UtcDateTime = Field(
        description=(
            "Event time: when the fact happened or was decided, as its producer states it. RFC "
            "3339 with an offset, normalised to UTC and kept to the microsecond, written with Z "
            "(spec 4.1, 4.2). Folds count it in whole epoch seconds, floored (spec 4.3): it dates "
            "a run's start and end, and so its charges' hour buckets, a weight change, a usage "
            "window's end. Key revocations, required_from and the ledger's canonical order "
            "compare it to the microsecond (spec 4.4, 8.9); live readers merge partitions by it. "
            "Signed."
        )
    )
    subject: str = Field(
        description=(
            "What the record is about, set by the producer: the value of the payload's subject "
            "field as text (a workload id, node, budget path, pool, cluster, key id, period or a "
            "dead letter's source position; spec 3.3), which it must equal (spec 2.2). Also the "
            "Kafka key, so one subject's records stay in order on one partition. Signed."
        )
    )
    correlationid: EventId | None = Field(
        default=None,
        description=(
            "Optional UUID tying the record to a chain of related records (CloudEvents "
            "correlation). No Fairshare producer sets it today and no reader acts on it; signed "
            "when present, absent (never null) otherwise."
        ),
    )
    causationid: EventId | None = Field(
        default=None,
        description=(
            "Optional UUID: the id of the record that caused this one. Charging sets it on every "
            "ledger charge to the id of the fact whose folding posted it (spec 8.6); "
            "informational, no fold reads it. Signed when present, absent (never null) otherwise."
        ),
    )
    #: CloudEvents extensions: the key that signed the record and its signature over the
    #: canonical form of everything else (``events.signing``); None on unsigned records. A
    #: record signed with others in one batch carries its ``batchproof`` too, and its signature
    #: is then over the batch's Merkle root, which the proof and the record's own canonical
    #: form give back.
    signer: Signer | None = Field(
        default=None,
        description=(
            "Extension: the id of the key that signed the record, 32 hex characters (the first 16 "
            "bytes of SHA-256 of the raw Ed25519 public key, spec 7.1), as a "
            "fairshare.signing_key.registered.v1 fact registered it. Set by whichever role signs "
            "(api, scheduler, charging, agent, admin); present exactly when signature is, absent "
            "on unsigned records. Readers look it up in the key book to decide whether the record "
            "is believed (spec 7.4). Covered by the signature."
        ),
    )
    signature: Signature | None = Field(
        default=None,
        description=(
            "Extension, set by the signing producer: the Ed25519 signature (64 bytes, standard "
            "base64, its one spelling) by the signer's key over the record's canonical form (spec "
            "5.3), or, for a record with batchproof, over the batch message of its batch's Merkle "
            "root (spec 6.4). Not itself signed. Every reader verifies it before folding the "
            "record (spec 5.5, 6.6); absent on unsigned records."
        ),
    )
    batchproof: BatchProof | None = Field(
        default=None,
        description=(
            "Extension, set by the producer that signed the record in one batch with others (a "
            "pass, an agent's round, a batch of charges): <index>/<count>/<path>, its index in "
            "the batch (from 0), the number of records, and the base64 of its Merkle path's "
            "sibling SHA-256 hashes (spec 6.3). With the record's canonical form it gives back "
            "the root the signature covers. Not signed; absent on lone and unsigned records."
        ),
    )
    datacontenttype: Literal["application/json"] = Field(
        default="application/json",
        description=(
            'Media type of data, always "application/json", set by every producer: implied in '
            "Kafka binary mode (never a header, spec 2.5), written in structured mode and in the "
            "signed canonical document (spec 5.2)."
        ),
    )
    data: DataT = Field(
        description=(
            "The payload, stated by a role that may state the type (spec 3.3): a JSON object "
            "valid against the type's model, validated strictly (no unknown member, no coercion; "
            "spec 2.3). Signed, every field included."
        )
    )

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
