"""The layering contracts of pyproject.toml hold, and they name every package.

A forbidden-imports contract lists what it forbids; a package added later and not listed would
be allowed silently. These tests keep the lists complete, and run import-linter itself so the
README's test command checks the layering too (CI also runs ``lint-imports``)."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]


def contract(contract_id: str) -> dict[str, Any]:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    contracts = config["tool"]["importlinter"]["contracts"]
    (found,) = [c for c in contracts if c.get("id") == contract_id]
    return dict(found)


def children(package: str) -> set[str]:
    """The direct subpackages and modules of ``package`` (dotted)."""
    folder = ROOT / package.replace(".", "/")
    names = {p.stem for p in folder.glob("*.py") if p.stem != "__init__"}
    names |= {p.name for p in folder.iterdir() if (p / "__init__.py").exists()}
    return {f"{package}.{name}" for name in names}


def test_the_core_packages_are_layered_below_services() -> None:
    layers = contract("layers")["layers"]
    assert layers == ["services", "scheduling", "projections", "events"]
    assert set(contract("core-acyclic")["ancestors"]) == {"events", "projections", "scheduling"}


def test_every_runtime_package_is_kept_from_the_development_tools() -> None:
    sources = set(contract("devtools-not-at-runtime")["source_modules"])
    runtime = children("services") - {"services.devtools"} | {"events", "projections", "scheduling"}
    assert runtime - sources == set()


def test_import_linter_finds_every_contract_kept() -> None:
    linter = Path(sys.executable).with_name("lint-imports")
    done = subprocess.run(
        [str(linter), "--no-cache"], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "0 broken" in done.stdout
