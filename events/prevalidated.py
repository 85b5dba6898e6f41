"""Building event models from values already validated (computed by the code itself from
validated state), without validating them again.

A full scheduling pass emits tens of thousands of decisions; pydantic validation (or even
``model_construct``) would dominate its time. :func:`prevalidated` builds the same frozen model
instance in about a microsecond. It is for hot paths whose inputs come from already-validated
state only, and every such path is covered by tests that decode its output through the strict
serde (``events.serde``), so an invalid value cannot slip through unnoticed.
"""

from __future__ import annotations

from typing import Any, TypeVar

from pydantic import BaseModel
from pydantic_core import PydanticUndefined

M = TypeVar("M", bound=BaseModel)

_SET = object.__setattr__


class _Shape:
    """What :func:`prevalidated` needs to know about a model, learned once per class."""

    __slots__ = ("factories", "names", "plain_defaults", "required")

    def __init__(self, cls: type[BaseModel]) -> None:
        self.names = frozenset(cls.model_fields)
        self.plain_defaults: dict[str, Any] = {}
        self.factories: dict[str, Any] = {}
        required = set()
        for name, info in cls.model_fields.items():
            if info.default_factory is not None:
                self.factories[name] = info.default_factory
            elif info.default is PydanticUndefined:
                required.add(name)
            else:
                self.plain_defaults[name] = info.default
        self.required = frozenset(required)


_SHAPES: dict[type[BaseModel], _Shape] = {}


def prevalidated(cls: type[M], **values: Any) -> M:
    """``cls(**values)`` without validation; missing required fields still raise."""
    shape = _SHAPES.get(cls)
    if shape is None:
        shape = _SHAPES[cls] = _Shape(cls)
    if values.keys() == shape.names:  # every field given (the hot paths): nothing to merge
        return _instance(cls, values, set(values))
    if not shape.required <= values.keys():
        missing = shape.required - values.keys()
        raise TypeError(f"{cls.__name__}: missing {', '.join(sorted(missing))}")
    fields = {**shape.plain_defaults, **values}
    for name, factory in shape.factories.items():
        if name not in values:
            fields[name] = factory()
    return _instance(cls, fields, set(values))


def _instance(cls: type[M], fields: dict[str, Any], fields_set: set[str]) -> M:
    instance = cls.__new__(cls)
    _SET(instance, "__dict__", fields)
    _SET(instance, "__pydantic_fields_set__", fields_set)
    _SET(instance, "__pydantic_extra__", None)
    _SET(instance, "__pydantic_private__", None)
    return instance
