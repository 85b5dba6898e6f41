"""The FinOps Foundation's FOCUS validator, run as a separate program.

``focus-validator`` 1.0.0 (what Python 3.11 resolves to) pins pandas and numpy below what
Fairshare uses, so it lives in its own virtual environment, ``.venv-focus`` (``.ci/run`` makes
it: ``python3 -m venv .venv-focus && .venv-focus/bin/pip install focus-validator==1.0.0
'multimethod<2'``), or wherever ``$FAIRSHARE_FOCUS_VALIDATOR`` names its program. It reads its
currency list from a path relative to its working directory, so it runs from its own
site-packages. A test that needs it makes ``.venv-focus`` when it is missing; where that cannot
be done (no package index), it skips, visibly, or fails with ``FAIRSHARE_REQUIRE_FOCUS=1``
(CI)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
#: What ``.ci/run`` installs in ``.venv-focus``.
PACKAGES = ("focus-validator==1.0.0", "multimethod<2")


def validator() -> Path:
    named = os.environ.get("FAIRSHARE_FOCUS_VALIDATOR")
    program = Path(named) if named else REPO / ".venv-focus" / "bin" / "focus-validator"
    if not program.is_file() and not named:
        _install(program.parents[1])
    if not program.is_file():
        message = (
            f"FOCUS validator not installed at {program} (python3 -m venv .venv-focus && "
            ".venv-focus/bin/pip install focus-validator==1.0.0 'multimethod<2')"
        )
        if os.environ.get("FAIRSHARE_REQUIRE_FOCUS") == "1":
            pytest.fail(message)
        pytest.skip(message)
    return program


def _install(venv: Path) -> None:
    """Make ``.venv-focus`` once, as ``.ci/run`` does, so that the README's test command runs
    the validator on a fresh machine too (it needs the package index; without it, skipped)."""
    try:
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
        subprocess.run(
            [str(venv / "bin" / "pip"), "install", "-q", *PACKAGES],
            check=True,
            timeout=600,
            capture_output=True,
        )
    except (subprocess.SubprocessError, OSError):
        return


def validate(csv_file: Path) -> tuple[bool, str]:
    """(passed, what it printed) for a FOCUS 1.0 CSV."""
    program = validator()
    python = program.parent / "python"
    site = subprocess.run(
        [
            str(python),
            "-c",
            "import focus_validator, os; "
            "print(os.path.dirname(os.path.dirname(focus_validator.__file__)))",
        ],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout.strip()
    done = subprocess.run(
        [str(program), "--data-file", str(csv_file.resolve()), "--validate-version", "1.0"],
        capture_output=True,
        text=True,
        cwd=site,
        timeout=300,
    )
    output = done.stdout + done.stderr
    return done.returncode == 0 and "Validation succeeded" in output, output
