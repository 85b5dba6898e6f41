"""Building event models from values the code computed itself, without re-validating them.

A full scheduling pass emits tens of thousands of decisions; pydantic validation (or even
``model_construct``) would dominate its time. :func:`trusted` builds the same frozen model
instance in about a microsecond. It is for hot paths whose inputs come from already-validated
state only, and every such path is covered by tests that decode its output through the strict
serde (``events.serde``), so an invalid value cannot slip through unnoticed.
"""

from __future__ import annotations

from typing import Any, TypeVar

from pydantic import BaseModel
from pydantic_core import PydanticUndefined

M = TypeVar("M", bound=BaseModel)

_PLAIN_DEFAULTS: dict[type[BaseModel], dict[str, Any]] = {}
_FACTORIES: dict[type[BaseModel], dict[str, Any]] = {}
_REQUIRED: dict[type[BaseModel], frozenset[str]] = {}


def _learn(cls: type[BaseModel]) -> None:
    plain: dict[str, Any] = {}
    factories: dict[str, Any] = {}
    required = set()
    for name, info in cls.model_fields.items():
        if info.default_factory is not None:
            factories[name] = info.default_factory
        elif info.default is PydanticUndefined:
            required.add(name)
        else:
            plain[name] = info.default
    _PLAIN_DEFAULTS[cls], _FACTORIES[cls], _REQUIRED[cls] = plain, factories, frozenset(required)


def trusted(cls: type[M], **values: Any) -> M:
    """``cls(**values)`` without validation; missing required fields still raise."""
    if cls not in _PLAIN_DEFAULTS:
        _learn(cls)
    missing = _REQUIRED[cls] - values.keys()
    if missing:
        raise TypeError(f"{cls.__name__}: missing {', '.join(sorted(missing))}")
    fields = {**_PLAIN_DEFAULTS[cls], **values}
    for name, factory in _FACTORIES[cls].items():
        if name not in values:
            fields[name] = factory()
    instance = cls.__new__(cls)
    object.__setattr__(instance, "__dict__", fields)
    object.__setattr__(instance, "__pydantic_fields_set__", set(values))
    object.__setattr__(instance, "__pydantic_extra__", None)
    object.__setattr__(instance, "__pydantic_private__", None)
    return instance
