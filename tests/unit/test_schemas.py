"""The checked-in JSON Schemas are exactly what the models generate, and they accept real events."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import jsonschema
import orjson
import pytest

from events import encode_structured
from events.schema_export import DEFAULT_SCHEMA_DIR, render_schemas, schema_drift, write_schemas
from tests.factories import sample_events


def test_checked_in_schemas_match_the_models() -> None:
    problems = schema_drift(DEFAULT_SCHEMA_DIR)
    assert problems == [], "run `fairshare schemas generate` and commit schemas/"


def test_drift_is_detected_for_changed_missing_and_stale_files(tmp_path: Path) -> None:
    write_schemas(tmp_path)
    assert schema_drift(tmp_path) == []
    changed = tmp_path / "fairshare.workload.submitted.v1.json"
    changed.write_bytes(changed.read_bytes().replace(b'"gpus"', b'"gpu_count"'))
    (tmp_path / "fairshare.node.up.v1.json").unlink()
    (tmp_path / "fairshare.node.retired.v1.json").write_text("{}")
    assert schema_drift(tmp_path) == [
        "fairshare.node.up.v1.json: missing (a new or renamed event type)",
        "fairshare.workload.submitted.v1.json: differs from the model",
        "fairshare.node.retired.v1.json: no model produces it any more",
    ]


def test_generation_is_deterministic() -> None:
    assert render_schemas() == render_schemas()


@pytest.mark.parametrize("envelope", sample_events(), ids=lambda e: e.type)
def test_sample_events_validate_against_their_schema(envelope: Any) -> None:
    schema = orjson.loads((DEFAULT_SCHEMA_DIR / f"{envelope.type}.json").read_bytes())
    document = orjson.loads(encode_structured(envelope))
    jsonschema.validate(document, schema, cls=jsonschema.Draft202012Validator)
    wrong = {**document, "type": "fairshare.something.else.v1"}
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(wrong, schema, cls=jsonschema.Draft202012Validator)
