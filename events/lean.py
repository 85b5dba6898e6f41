"""The lean decode: the log's hot event types read without their cross-field Python rules.

Only for readers of the log (the audit replay): every event in it was validated in full where
it entered. The API validates requests; services build events from validated facts
(``events.prevalidated``); every reader, the export included, decodes records strictly through
``services.bus.records.check`` and leaves out (dead-letters) those that fail, so an export
file holds only events that passed the strict decode (tests/unit/test_routing_readers.py).
Re-running every rule of every model on a million such events is a large part of an audit.

The lean decode validates with the same pydantic-core schema as :mod:`events.serde`, minus
the payload's cross-field rules of the types in :data:`LEAN_RULES`: model validators, Python
called back from pydantic-core, which for a heartbeat calls a method per GPU reading. Every
field is still checked for its JSON type, presence, pattern and range, and converted as
strictly (times to UTC, arrays to tuples, nested models), so a valid record gives an equal
model. A record the lean schema refuses (a missing key, a wrong JSON type, a value out of
range, garbage) is decoded again strictly, and fails with the strict reason. Building the
models with ``prevalidated`` from orjson's dicts was measured too, and was no faster: a GPU reading
costs a model instance either way, and checking the JSON shape in Python costs more than in
pydantic-core.

Why skipping those rules cannot change an audit's charges:

* ``GpuHeartbeat``: distinct GPU indices, an attempt only with an occupant, memory used
  within the total. The ledger fold takes the set of (occupant, attempt) pairs where both are
  given, so a duplicate index or a lone attempt confirms nothing more, and memory is not read.
* ``LedgerCharge``: on the hour, amount and kind agree, distinct accounts. A recorded charge
  is only compared, field by field, with the one recomputed from the facts (which holds these
  rules by construction), so a recorded charge that breaks one is reported as a difference.

An auditor who does not trust the log asks for the strict decode (``--strict``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pydantic import ValidationError
from pydantic_core import SchemaValidator

from events.envelope import Envelope, envelope_class
from events.models import EventData, GpuHeartbeat, LedgerCharge
from events.registry import EventRegistry, default_registry
from events.serde import (
    Headers,
    binary_parts,
    decode_binary,
    decode_structured,
    envelope_json,
    peek_type,
)

#: The hot types of a log and the rules the lean decode skips for each (see above for why
#: none of them can change a charge).
LEAN_RULES: dict[type[EventData], tuple[object, ...]] = {
    GpuHeartbeat: (GpuHeartbeat._consistent,),
    LedgerCharge: (LedgerCharge._consistent,),
}

JsonValidator = Callable[[bytes], Envelope[Any]]
StructuredDecoder = Callable[[bytes], Envelope[Any]]
BinaryDecoder = Callable[[bytes | None, Headers | None], Envelope[Any]]

_VALIDATORS: dict[type[EventData], JsonValidator] = {}


def lean_validator(model: type[EventData]) -> JsonValidator:
    """``Envelope[model]``'s JSON validator without the rules :data:`LEAN_RULES` lists for
    ``model`` (built once: compiling a schema costs milliseconds)."""
    validator = _VALIDATORS.get(model)
    if validator is None:
        rules, found = frozenset(LEAN_RULES[model]), set[object]()
        lean = _without_rules(envelope_class(model).__pydantic_core_schema__, rules, found)
        if found != rules:  # pydantic laid the schema out otherwise: fail loudly, not slowly
            raise RuntimeError(f"{model.__name__}: rules not found in its schema: {rules - found}")
        validator = _VALIDATORS[model] = SchemaValidator(lean).validate_json
    return validator


def _without_rules(schema: Any, rules: frozenset[object], found: set[object]) -> Any:
    """A copy of a core schema whose ``function-after`` wrappers calling one of ``rules`` are
    replaced by the schema they wrap (each one stripped is added to ``found``). Only dicts and
    lists are copied: classes and functions are shared with the strict schema."""
    if isinstance(schema, list):
        return [_without_rules(item, rules, found) for item in schema]
    if not isinstance(schema, dict):
        return schema
    function = schema.get("function")
    if schema.get("type") == "function-after" and isinstance(function, dict):
        rule = function.get("function")
        if rule in rules:
            found.add(rule)
            return _without_rules(schema["schema"], rules, found)
    return {key: _without_rules(value, rules, found) for key, value in schema.items()}


def _lean_validators(registry: EventRegistry | None) -> dict[str, JsonValidator]:
    """Lean validators of the hot types ``registry`` decodes with the same model."""
    registry = registry or default_registry()
    return {
        model.event_type: lean_validator(model)
        for model in LEAN_RULES
        if registry.is_current(model.event_type) and registry.model_for(model.event_type) is model
    }


def structured_decoder(registry: EventRegistry | None = None) -> StructuredDecoder:
    """Decodes one export line leanly (hot types) or strictly (the rest, and any line the lean
    schema refuses, so a bad line gets the strict decode's reason)."""
    validators = _lean_validators(registry)

    def decode(line: bytes) -> Envelope[Any]:
        validate = validators.get(peek_type(line) or "")
        if validate is not None:
            try:
                return validate(line)
            except ValidationError:
                pass  # the strict decode gives the reason (or finds the right type)
        return decode_structured(line, registry)

    return decode


def binary_decoder(registry: EventRegistry | None = None) -> BinaryDecoder:
    """The binary-mode (Kafka record) twin of :func:`structured_decoder`."""
    validators = _lean_validators(registry)

    def decode(value: bytes | None, headers: Headers | None) -> Envelope[Any]:
        attributes, payload = binary_parts(value, headers)
        validate = validators.get(attributes.get("type") or "")
        if validate is not None:
            try:
                return validate(envelope_json(attributes, payload))
            except ValidationError:
                pass
        return decode_binary(value, headers, registry)

    return decode
