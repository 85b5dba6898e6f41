"""No function of the shipped code is longer than :data:`LIMIT` lines.

A function that outgrows a screenful has usually grown a second job; this keeps the split from
waiting for a review to notice. Measured from the ``def`` line to the last line of the body
(decorators aside, the docstring and any nested function included), over every module of the
packages that ship (tests are stories told step by step and may run longer)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("events", "projections", "services")
LIMIT = 120


def too_long(source: str, where: str) -> list[str]:
    """``where:line name (N lines)`` for each function of ``source`` over the limit."""
    found = []
    for node in ast.walk(ast.parse(source, filename=where)):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            assert node.end_lineno is not None  # always set by ast.parse
            lines = node.end_lineno - node.lineno + 1
            if lines > LIMIT:
                found.append(f"{where}:{node.lineno} {node.name} ({lines} lines)")
    return found


def test_no_function_is_longer_than_the_limit() -> None:
    modules = sorted(p for package in PACKAGES for p in (ROOT / package).rglob("*.py"))
    assert len(modules) > 50, "the packages were not found"
    found = [
        offence
        for path in modules
        for offence in too_long(path.read_text(), str(path.relative_to(ROOT)))
    ]
    assert found == [], f"split these functions (at most {LIMIT} lines each): {found}"


def test_the_count_runs_from_def_to_the_last_line() -> None:
    body = "".join(f"    x = {i}\n" for i in range(LIMIT - 1))
    source = f"@decorated\ndef fits():\n{body}\n\nasync def over():\n{body}    x = 0\n"
    assert too_long(source, "m.py") == [f"m.py:{LIMIT + 4} over ({LIMIT + 1} lines)"]
