"""Generates the JSON Schemas in ``schemas/`` from the models, and detects drift.

Consumers in other languages and auditors read the schemas, not our Python, so the checked-in
files must always equal what the models say: CI runs ``--check`` and fails on any difference.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import orjson

from events.envelope import Envelope
from events.models import ALL_EVENT_MODELS

DEFAULT_SCHEMA_DIR = Path(__file__).resolve().parent.parent / "schemas"
INDEX_FILE = "index.json"


def _dump(document: Any) -> bytes:
    return orjson.dumps(document, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS) + b"\n"


def render_schemas() -> dict[str, bytes]:
    """File name -> content, for every event type plus an index."""
    files: dict[str, bytes] = {}
    index: dict[str, dict[str, str]] = {}
    for model in ALL_EVENT_MODELS:
        schema = Envelope[model].model_json_schema()  # type: ignore[valid-type]
        schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
        schema["$id"] = f"https://fairshare.dev/schemas/{model.event_type}.json"
        schema["title"] = model.event_type
        schema["properties"]["type"]["const"] = model.event_type
        schema["description"] = (model.__doc__ or model.__name__).strip().splitlines()[0]
        name = f"{model.event_type}.json"
        files[name] = _dump(schema)
        index[model.event_type] = {
            "file": name,
            "model": model.__name__,
            "topic": model.topic.value,
            "subject": model.subject_field,
        }
    files[INDEX_FILE] = _dump(index)
    return files


def write_schemas(directory: Path = DEFAULT_SCHEMA_DIR) -> list[str]:
    """Writes the schemas, removing stale ``*.json`` files; returns the names written."""
    directory.mkdir(parents=True, exist_ok=True)
    files = render_schemas()
    for stale in directory.glob("*.json"):
        if stale.name not in files:
            stale.unlink()
    for name, content in files.items():
        (directory / name).write_bytes(content)
    return sorted(files)


def schema_drift(directory: Path = DEFAULT_SCHEMA_DIR) -> list[str]:
    """Human-readable differences between the checked-in schemas and the models (empty = none)."""
    files = render_schemas()
    problems = []
    present = {path.name for path in directory.glob("*.json")} if directory.is_dir() else set()
    for name, content in sorted(files.items()):
        path = directory / name
        if name not in present:
            problems.append(f"{name}: missing (a new or renamed event type)")
        elif path.read_bytes() != content:
            problems.append(f"{name}: differs from the model")
    for name in sorted(present - set(files)):
        problems.append(f"{name}: no model produces it any more")
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m events.schema_export", description=__doc__)
    parser.add_argument("--dir", type=Path, default=DEFAULT_SCHEMA_DIR)
    parser.add_argument("--check", action="store_true", help="fail if schemas are out of date")
    args = parser.parse_args(argv)
    if args.check:
        problems = schema_drift(args.dir)
        for problem in problems:
            print(f"schema drift: {problem}", file=sys.stderr)
        if problems:
            print("regenerate with: fairshare schemas generate", file=sys.stderr)
            return 1
        print(f"schemas up to date ({len(render_schemas())} files in {args.dir})")
        return 0
    names = write_schemas(args.dir)
    print(f"wrote {len(names)} schema files to {args.dir}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
