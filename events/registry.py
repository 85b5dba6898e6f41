"""From a CloudEvents ``type`` string to the model that validates it, with upcasting.

Old events stay in the log forever. When a payload changes shape, its type gets a new version
suffix and an *upcaster* turns the old JSON into the new one on read, so consumers only ever see
current models and the log is never rewritten.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from typing import Any

from events.envelope import EVENT_TYPE_PATTERN, Envelope, envelope_class
from events.models import ALL_EVENT_MODELS, COMMAND_UPCASTERS, EventData

#: Turns the JSON payload of an older type into (newer type, payload).
Upcaster = Callable[[dict[str, Any]], tuple[str, dict[str, Any]]]

_TYPE_RE = re.compile(EVENT_TYPE_PATTERN)
_MAX_UPCAST_STEPS = 32


class UnknownEventTypeError(LookupError):
    pass


class EventRegistry:
    def __init__(self, models: Iterable[type[EventData]] = ()) -> None:
        self._models: dict[str, type[EventData]] = {}
        self._upcasters: dict[str, Upcaster] = {}
        self._json_validators: dict[str, Callable[[bytes], Envelope[Any]]] = {}
        for model in models:
            self.register(model)

    def register(self, model: type[EventData]) -> None:
        event_type = model.event_type
        if not _TYPE_RE.match(event_type):
            raise ValueError(f"{model.__name__}.event_type {event_type!r} is not a versioned type")
        if event_type in self._models and self._models[event_type] is not model:
            raise ValueError(f"event type {event_type!r} is already registered")
        self._models[event_type] = model

    def register_upcaster(self, from_type: str, upcaster: Upcaster) -> None:
        if from_type in self._models:
            raise ValueError(f"{from_type!r} is a current type; only older types are upcast")
        self._upcasters[from_type] = upcaster

    def is_current(self, event_type: str) -> bool:
        return event_type in self._models

    def can_upcast(self, event_type: str) -> bool:
        return event_type in self._upcasters

    def model_for(self, event_type: str) -> type[EventData]:
        try:
            return self._models[event_type]
        except KeyError:
            raise UnknownEventTypeError(f"type: unknown event type {event_type!r}") from None

    def upcast(self, event_type: str, payload: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        """Apply upcasters until the type is current; bounded, so a cycle cannot hang a reader."""
        for _ in range(_MAX_UPCAST_STEPS):
            if event_type in self._models:
                return event_type, payload
            upcaster = self._upcasters.get(event_type)
            if upcaster is None:
                raise UnknownEventTypeError(f"type: unknown event type {event_type!r}")
            event_type, payload = upcaster(payload)
        raise UnknownEventTypeError(f"type: upcasting {event_type!r} did not reach a current type")

    def envelope_json_validator(self, event_type: str) -> Callable[[bytes], Envelope[Any]] | None:
        """The bound ``validate_json`` of ``Envelope[model]`` for a current type (None for
        others): a decoder reaches pydantic-core with one dict lookup per event, which matters
        when an audit decodes a million of them."""
        validator = self._json_validators.get(event_type)
        if validator is None:
            model = self._models.get(event_type)
            if model is None:
                return None
            validator = envelope_class(model).__pydantic_validator__.validate_json
            self._json_validators[event_type] = validator
        return validator

    def types(self) -> list[str]:
        return sorted(self._models)


def default_registry() -> EventRegistry:
    """Every current model, and the upcasters of every older type still in logs."""
    registry = EventRegistry(ALL_EVENT_MODELS)
    for old_type, upcaster in sorted(COMMAND_UPCASTERS.items()):
        registry.register_upcaster(old_type, upcaster)
    return registry
