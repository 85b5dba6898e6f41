"""Running the ``fairshare`` command as a user would (a subprocess), a free port for the
services a test starts, and the charge audit of a run's log once charging caught up."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

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


def audit_once_charging_caught_up(
    bootstrap: str, prefix: str, tmp_path: Path
) -> subprocess.CompletedProcess[str]:
    """The audit of the log once charging has read every fact on it. ``up`` stops its
    services together: an agent's last facts (a run ending as it stops) can reach the log after
    charging stopped reading, to be charged at charging's next start, as after any crash. So
    charging starts again here, and the audit is taken once the ledger holds every charge the
    facts call for (or after two minutes, the last audit telling what is missing)."""
    log = (tmp_path / "charging-again.log").open("wb")
    charging = subprocess.Popen(
        [*FAIRSHARE, "charging", "--kafka", bootstrap, "--topic-prefix", prefix],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        deadline = time.monotonic() + 120
        while True:
            audit = run_fairshare(
                "audit", "replay", "--kafka", bootstrap, "--topic-prefix", prefix, timeout=300
            )
            identical = audit.returncode == 0 and "identical" in audit.stdout.lower()
            if identical or time.monotonic() > deadline:
                return audit
            time.sleep(5)
    finally:
        stop(charging, 30)
        log.close()


def stop(process: subprocess.Popen[bytes], timeout_s: float) -> None:
    """SIGTERM, as a supervisor stops a service, and SIGKILL if it is not gone in time."""
    if process.poll() is not None:
        return
    process.send_signal(signal.SIGTERM)
    try:
        process.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def wait_while_up(
    condition: Callable[[], Any],
    what: str,
    timeout_s: float,
    up: subprocess.Popen[bytes],
    out: Path,
) -> Any:
    """The first truthy answer of ``condition`` (an HTTP error counts as not yet) while the
    ``fairshare up`` process ``up`` lives; its output (``out``) in the failure otherwise."""
    import httpx

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        assert up.poll() is None, out.read_text(errors="replace")[-3000:]
        try:
            value = condition()
        except (httpx.HTTPError, ValueError, KeyError):
            value = None
        if value:
            return value
        time.sleep(1)
    tail = out.read_text(errors="replace")[-3000:]
    raise AssertionError(f"timed out waiting for {what}: {tail}")
