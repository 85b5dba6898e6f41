"""Bytes <-> envelopes, in the two CloudEvents modes Fairshare uses.

* Binary mode (on Kafka): attributes in ``ce_*`` headers, the payload JSON as the record value,
  the subject as the key.
* Structured mode (event export files, one JSON object per line): the whole envelope as JSON.

Encoding uses orjson with UTC ``Z`` times so equal events give equal bytes. Decoding validates
with pydantic's strict JSON mode in one pass; any failure is an :class:`EventDecodeError` whose
message names the offending field, for the dead-letter topic. (The audit's replay of the log,
whose events were all validated on their way in, may use the lean decode of ``events.lean``.)
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import orjson
from pydantic import ValidationError

from events.envelope import CONTENT_TYPE, Envelope, envelope_class
from events.models import EventData
from events.registry import EventRegistry, UnknownEventTypeError, default_registry

_ORJSON_OPTIONS = orjson.OPT_UTC_Z
_ATTRIBUTES = (
    "specversion",
    "id",
    "source",
    "type",
    "time",
    "subject",
    "correlationid",
    "causationid",
    "signer",
    "signature",
    "batchproof",
)
HEADER_PREFIX = "ce_"
CONTENT_TYPE_HEADER = "content-type"

Headers = Sequence[tuple[str, bytes | str | None]]


class EventDecodeError(ValueError):
    """A record that is not a valid Fairshare event; ``str(error)`` is the reason."""


@dataclass(frozen=True)
class KafkaRecord:
    key: bytes
    value: bytes
    headers: list[tuple[str, bytes]]


_DEFAULT_REGISTRY = default_registry()


def format_validation_error(error: ValidationError, prefix: str = "") -> str:
    """``field.path: message`` for each problem, so the reason names the field."""
    parts = []
    for problem in error.errors(include_url=False):
        location = ".".join(str(part) for part in problem["loc"])
        if prefix and location:
            location = f"{prefix}.{location}"
        elif prefix:
            location = prefix
        parts.append(f"{location or '<root>'}: {problem['msg']}")
    return "; ".join(parts)


def _decode_error(error: ValidationError, invalid_json_at: str) -> EventDecodeError:
    if any(problem["type"] == "json_invalid" for problem in error.errors()):
        return EventDecodeError(f"{invalid_json_at}: not valid JSON")
    return EventDecodeError(format_validation_error(error))


def _payload_bytes(data: EventData) -> bytes:
    return orjson.dumps(data.model_dump(mode="python"), option=_ORJSON_OPTIONS)


def _attribute_text(envelope: Envelope[Any], name: str) -> str | None:
    value = getattr(envelope, name)
    if value is None:
        return None
    if name == "time":
        # Same text as orjson's UTC_Z rendering, so both modes carry identical times.
        return orjson.dumps(value, option=_ORJSON_OPTIONS).decode()[1:-1]
    return str(value)


def encode_binary(envelope: Envelope[Any]) -> KafkaRecord:
    headers: list[tuple[str, bytes]] = []
    for name in _ATTRIBUTES:
        text = _attribute_text(envelope, name)
        if text is not None:
            headers.append((HEADER_PREFIX + name, text.encode()))
    headers.append((CONTENT_TYPE_HEADER, CONTENT_TYPE.encode()))
    return KafkaRecord(key=envelope.key, value=_payload_bytes(envelope.data), headers=headers)


def encode_structured(envelope: Envelope[Any]) -> bytes:
    """One line of an event export file (no trailing newline)."""
    document: dict[str, Any] = {}
    for name in _ATTRIBUTES:
        value = getattr(envelope, name)
        if value is not None:
            document[name] = value
    document["datacontenttype"] = envelope.datacontenttype
    document["data"] = envelope.data.model_dump(mode="python")
    return orjson.dumps(document, option=_ORJSON_OPTIONS)


def envelope_json(attributes: dict[str, Any], data_json: bytes) -> bytes:
    """The structured-mode document of binary-mode attributes and payload, validated in one
    pass (the payload is spliced in, never parsed and re-encoded)."""
    return orjson.dumps(attributes)[:-1] + b',"data":' + data_json + b"}"


def _validate(
    attributes: dict[str, Any], data_json: bytes, registry: EventRegistry
) -> Envelope[Any]:
    event_type = attributes.get("type")
    if not isinstance(event_type, str) or not event_type:
        raise EventDecodeError("type: missing CloudEvents type")
    if not registry.is_current(event_type):
        if not registry.can_upcast(event_type):
            raise EventDecodeError(f"type: unknown event type {event_type!r}")
        try:
            payload = orjson.loads(data_json)
        except orjson.JSONDecodeError as error:
            raise EventDecodeError(f"data: not JSON ({error})") from None
        if not isinstance(payload, dict):
            raise EventDecodeError("data: must be a JSON object")
        try:
            event_type, payload = registry.upcast(event_type, payload)
        except UnknownEventTypeError as error:
            raise EventDecodeError(str(error)) from None
        except Exception as error:  # an upcaster choking on bad input is bad input
            raise EventDecodeError(f"data: upcasting failed ({error!r})") from None
        attributes = {**attributes, "type": event_type}
        data_json = orjson.dumps(payload, option=_ORJSON_OPTIONS)
    model = registry.model_for(event_type)
    document = envelope_json(attributes, data_json)
    try:
        envelope: Envelope[Any] = envelope_class(model).model_validate_json(document)
        return envelope
    except ValidationError as error:
        # The attributes were serialised here, so invalid JSON can only be the payload.
        raise _decode_error(error, invalid_json_at="data") from None


def decode_binary(
    value: bytes | None, headers: Headers | None, registry: EventRegistry | None = None
) -> Envelope[Any]:
    """Decode a Kafka record in CloudEvents binary mode."""
    attributes, payload = binary_parts(value, headers)
    return _validate(attributes, payload, registry or _DEFAULT_REGISTRY)


def binary_parts(value: bytes | None, headers: Headers | None) -> tuple[dict[str, Any], bytes]:
    """The CloudEvents attributes of a binary-mode record and its payload, or the reason it
    has none (the payload is only checked to be there)."""
    if value is None:
        raise EventDecodeError("value: empty record (tombstone)")
    attributes: dict[str, Any] = {}
    for name, raw in headers or ():
        if not name.startswith(HEADER_PREFIX):
            continue
        attribute = name[len(HEADER_PREFIX) :]
        if attribute not in _ATTRIBUTES:
            raise EventDecodeError(f"{name}: unknown CloudEvents attribute header")
        if attribute in attributes:
            raise EventDecodeError(f"{name}: header repeated")
        if raw is None:
            raise EventDecodeError(f"{name}: header has no value")
        try:
            attributes[attribute] = raw.decode() if isinstance(raw, bytes) else raw
        except UnicodeDecodeError:
            raise EventDecodeError(f"{name}: header is not UTF-8") from None
    if "specversion" not in attributes:
        raise EventDecodeError("ce_specversion: missing header (not a CloudEvents record)")
    return attributes, value


_TYPE_KEY = b'"type":"'


def peek_type(raw: bytes) -> str | None:
    """The value of the first ``"type":"..."`` in the line, without parsing it (our encoder
    writes the envelope's ``type`` first). It is only a guess: the envelope's own type check
    rejects a wrong one, and a line that fails the fast path is decoded again the slow way."""
    start = raw.find(_TYPE_KEY)
    if start < 0:
        return None
    start += len(_TYPE_KEY)
    end = raw.find(b'"', start)
    if end < 0:
        return None
    return raw[start:end].decode(errors="replace")


def decode_structured(line: bytes | str, registry: EventRegistry | None = None) -> Envelope[Any]:
    """Decode one line of an event export file."""
    raw = line.encode() if isinstance(line, str) else line
    registry = registry or _DEFAULT_REGISTRY
    event_type = peek_type(raw)
    validate = registry.envelope_json_validator(event_type) if event_type is not None else None
    if validate is not None:
        # Fast path: a current type validates the whole line in one pass (no re-encoding).
        try:
            return validate(raw)
        except ValidationError:
            pass  # the slow path below gives the precise reason (or finds the right type)
    try:
        document = orjson.loads(line)
    except orjson.JSONDecodeError as error:
        raise EventDecodeError(f"<root>: not JSON ({error})") from None
    if not isinstance(document, dict):
        raise EventDecodeError("<root>: an event must be a JSON object")
    if "data" not in document:
        raise EventDecodeError("data: missing")
    data = document.pop("data")
    if not isinstance(data, dict):
        raise EventDecodeError("data: must be a JSON object")
    return _validate(document, orjson.dumps(data), registry or _DEFAULT_REGISTRY)
