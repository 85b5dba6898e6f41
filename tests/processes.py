"""Running the ``fairshare`` command as a user would (a subprocess), and a free port for the
services a test starts."""

from __future__ import annotations

import socket
import subprocess
import sys
from collections.abc import Mapping

FAIRSHARE = [sys.executable, "-m", "services.cli"]


def run_fairshare(
    *args: str, timeout: float = 300, env: Mapping[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*FAIRSHARE, *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=None if env is None else dict(env),
        check=False,
    )


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])
