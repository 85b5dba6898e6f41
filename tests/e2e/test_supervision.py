"""``fairshare up`` supervises its services, for real (embedded noida-db broker): a service
killed with SIGKILL is restarted and the status says so and why; a ``fairshare up`` killed
with SIGKILL leaves no service behind."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from services.brokers.noida import find_noida_binary
from services.launcher.children import UP_PID_ENV
from tests.processes import FAIRSHARE, free_port


def _marked(launcher_pid: int) -> set[int]:
    """Live processes started by that ``fairshare up`` (their environment names it)."""
    marker = f"{UP_PID_ENV}={launcher_pid}\0".encode()
    found = set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if marker in (entry / "environ").read_bytes() and _alive(int(entry.name)):
                found.add(int(entry.name))
        except OSError:
            continue
    return found


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def _until(what: str, check: Callable[[], object], timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for: {what}"
        time.sleep(0.2)


class Up:
    """A ``fairshare up`` in the background, its output in a file."""

    def __init__(self, data_dir: Path) -> None:
        self.out = data_dir / "up.out"
        env = {**os.environ, "COLUMNS": "400"}
        env.pop("FAIRSHARE_KAFKA_BOOTSTRAP", None)
        args = ["up", "--data-dir", str(data_dir), "--api-port", str(free_port())]
        with self.out.open("wb") as handle:
            self.process = subprocess.Popen(
                [*FAIRSHARE, *args, "--broker", "noida", "--submit-every", "2", "--nodes", "2"],
                stdout=handle,
                stderr=subprocess.STDOUT,
                env=env,
            )

    def text(self) -> str:
        return self.out.read_text(errors="replace")

    def pids(self) -> dict[str, int]:
        found = re.search(r"^pids\s+(.+)$", self.text(), re.MULTILINE)
        assert found is not None, self.text()
        return {name: int(pid) for name, pid in (p.split() for p in found.group(1).split(", "))}


@pytest.fixture
def up(tmp_path: Path) -> Iterator[Up]:
    running = Up(tmp_path)
    try:
        yield running
    finally:
        launcher = running.process.pid
        if running.process.poll() is None:
            running.process.kill()
            running.process.wait()
        for pid in _marked(launcher):  # only if the test failed: nothing should be left
            os.kill(pid, signal.SIGKILL)
        subprocess.run(
            [str(find_noida_binary()), "down", "--data-dir", str(tmp_path / "broker")],
            capture_output=True,
            timeout=60,
            check=False,
        )


@pytest.mark.broker_fast
@pytest.mark.slow  # kill -9 of a service and of the launcher: a chaos scenario
def test_a_killed_service_is_restarted_and_a_killed_launcher_leaves_no_service(up: Up) -> None:
    _until("the API", lambda: "pids " in up.text() or up.process.poll() is not None, 180)
    assert up.process.poll() is None, up.text()
    pids = up.pids()
    assert set(pids) == {"charging", "projector", "scheduler", "scheduler-2", "agent", "api"}
    assert set(pids.values()) <= _marked(up.process.pid)

    for name in ("projector", "scheduler"):
        os.kill(pids[name], signal.SIGKILL)
        _until(f"{name} restarted", lambda n=name: f"restarted {n} (pid" in up.text(), 30)
        assert f"{name} died (killed by SIGKILL" in up.text()
    _until(
        "a status line naming both restarts",
        lambda: re.search(r"^services: 6 of 6 up; .*projector restarted 1x .*scheduler "
                          r"restarted 1x \(last: killed by SIGKILL", up.text(), re.MULTILINE),
        30,
    )  # fmt: skip
    children = _marked(up.process.pid)
    assert len(children) >= 6, children
    assert pids["projector"] not in children
    assert pids["scheduler"] not in children

    up.process.kill()  # kill -9: no chance to stop anything itself
    up.process.wait()
    time.sleep(10)
    left = {pid for pid in children if _alive(pid)}
    assert not left, f"still running 10 s after fairshare up was killed: {left}"
