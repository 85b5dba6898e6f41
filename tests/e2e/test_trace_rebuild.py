"""The Helios Earth trace in data/traces is what its rebuild gives from the raw series kept
beside it (data/traces/README.md): the committed data can be reproduced, byte for byte."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_committed_helios_earth_trace_is_what_the_rebuild_gives() -> None:
    script = ROOT / "data" / "traces" / "helios-earth" / "rebuild.py"
    done = subprocess.run(
        [sys.executable, str(script), "--check"], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "unexplained GPU-minutes: 0" in done.stdout
    assert done.stdout.count("as the rebuild gives it") == 2
