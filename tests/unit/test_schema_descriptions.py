"""Every field of every event schema says what it is: units, who states it, how it is used.

An auditor reads ``schemas/`` and the spec, not our Python: a field without a description there
(the difference between ``amount`` and ``gpu_seconds`` on a burst charge, say) is one they
cannot interpret. The walk covers the envelope's attributes, the payload's fields and every
nested model under ``$defs``, and any inline object schema below them.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from events.schema_export import DEFAULT_SCHEMA_DIR, INDEX_FILE

#: Keywords whose value is one subschema, a list of them, or a mapping of names to them.
_ONE = ("items", "additionalProperties", "not", "if", "then", "else", "contains")
_MANY = ("anyOf", "oneOf", "allOf", "prefixItems")
_NAMED = ("$defs", "definitions", "patternProperties", "dependentSchemas")


def _schema_files() -> list[Path]:
    return sorted(p for p in DEFAULT_SCHEMA_DIR.glob("*.json") if p.name != INDEX_FILE)


def _subschemas(schema: dict[str, Any], path: str) -> Iterator[tuple[str, Any]]:
    for key in _ONE:
        if key in schema:
            yield f"{path}{key}", schema[key]
    for key in _MANY:
        for index, sub in enumerate(schema.get(key, ())):
            yield f"{path}{key}[{index}]", sub
    for key in _NAMED:
        for name, sub in schema.get(key, {}).items():
            yield f"{path}{key}.{name}", sub
    for name, sub in schema.get("properties", {}).items():
        yield f"{path}properties.{name}", sub


def undescribed(schema: Any, path: str = "") -> list[str]:
    """The path of every property of every object schema in ``schema`` (the top level, each
    ``$defs`` entry, and every object nested in them) without a non-empty description."""
    if not isinstance(schema, dict):
        return []
    missing = []
    for name, field in schema.get("properties", {}).items():
        text = field.get("description") if isinstance(field, dict) else None
        if not isinstance(text, str) or not text.strip():
            missing.append(f"{path}properties.{name}")
    for where, sub in _subschemas(schema, path):
        missing += undescribed(sub, f"{where}.")
    return missing


def test_there_are_schemas_to_check() -> None:
    assert len(_schema_files()) >= 30


@pytest.mark.parametrize("path", _schema_files(), ids=lambda p: p.name)
def test_every_property_has_a_description(path: Path) -> None:
    missing = undescribed(orjson.loads(path.read_bytes()))
    assert not missing, (
        f"{path.name}: {len(missing)} properties without a description (add "
        "Field(description=...) in events/, then `fairshare schemas generate`):\n"
        + "\n".join(f"  {path.name}: {where}" for where in missing)
    )


def test_a_removed_description_is_found_and_named() -> None:
    path = DEFAULT_SCHEMA_DIR / "fairshare.ledger.charge.v1.json"
    schema = orjson.loads(path.read_bytes())
    assert undescribed(schema) == []
    broken = copy.deepcopy(schema)
    del broken["properties"]["signer"]["description"]
    broken["$defs"]["LedgerCharge"]["properties"]["amount"]["description"] = "  "
    assert undescribed(broken) == [
        "properties.signer",
        "$defs.LedgerCharge.properties.amount",
    ]


def test_nested_object_schemas_are_walked() -> None:
    described = {"type": "integer", "description": "a count"}
    schema = {
        "type": "object",
        "properties": {
            "outer": {
                "description": "an inline object",
                "anyOf": [
                    {
                        "type": "array",
                        "items": {"type": "object", "properties": {"bare": {"type": "string"}}},
                    },
                    {"type": "null"},
                ],
            },
            "fine": described,
        },
        "$defs": {
            "Model": {
                "type": "object",
                "properties": {
                    "ok": described,
                    "deep": {
                        "type": "object",
                        "additionalProperties": {
                            "type": "object",
                            "properties": {"leaf": {"type": "number"}},
                        },
                        "description": "a mapping",
                    },
                },
            }
        },
    }
    assert sorted(undescribed(schema)) == [
        "$defs.Model.properties.deep.additionalProperties.properties.leaf",
        "properties.outer.anyOf[0].items.properties.bare",
    ]
