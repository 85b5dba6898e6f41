"""``fairshare up`` owns its data directory and everything it starts, for real (Apache Kafka,
the default broker): a second run on the directory is refused, naming the live one; SIGTERM
while a request is in flight (a client that never finishes its body) ends everything within
15 s; a ``kill -9`` leaves no process using the directory 10 s later, and the next run starts.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from services.launcher.data_dir import exclusive_data_dir, processes_using
from tests.processes import FAIRSHARE, free_port, run_fairshare
from tests.real_kafka import kafka_runtime_or_skip

# kill -9 and SIGTERM scenarios of a whole stack: among the slow ones (.ci/run runs them)
pytestmark = [pytest.mark.broker, pytest.mark.slow]


def _until(what: str, check: Callable[[], object], timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for: {what}"
        time.sleep(0.2)


class Up:
    def __init__(self, data_dir: Path, port: int) -> None:
        self.out = data_dir.parent / f"up-{time.monotonic_ns()}.out"
        env = {**os.environ, "COLUMNS": "400"}
        env.pop("FAIRSHARE_KAFKA_BOOTSTRAP", None)
        args = ["up", "--data-dir", str(data_dir), "--api-port", str(port)]
        with self.out.open("wb") as handle:
            self.process = subprocess.Popen(
                [*FAIRSHARE, *args, "--submit-every", "0", "--nodes", "1", "--schedulers", "1"],
                stdout=handle,
                stderr=subprocess.STDOUT,
                env=env,
            )

    def text(self) -> str:
        return self.out.read_text(errors="replace")

    def wait_started(self) -> None:
        _until("the stack", lambda: "pids " in self.text() or self.process.poll() is not None, 240)
        assert self.process.poll() is None, self.text()


def _kafka_or_skip() -> None:
    kafka_runtime_or_skip()


def _hanging_request(port: int) -> socket.socket:
    """A submission whose body never arrives: the server holds it open, waiting."""
    client = socket.create_connection(("127.0.0.1", port), timeout=5)
    client.sendall(
        b"POST /workloads HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ana-token\r\n"
        b'Content-Type: application/json\r\nContent-Length: 5000\r\n\r\n{"workload_id":'
    )
    return client


def test_up_owns_its_data_dir_and_leaves_nothing_behind(tmp_path: Path) -> None:
    _kafka_or_skip()
    data_dir = tmp_path / "data"
    port = free_port()
    first = Up(data_dir, port)
    try:
        first.wait_started()
        children = processes_using(data_dir)
        assert len(children) >= 5, children  # the broker and the services hold files there

        second = run_fairshare("up", "--data-dir", str(data_dir), "--api-port", str(free_port()),
                               timeout=60)  # fmt: skip
        assert second.returncode == 2, second.stdout + second.stderr
        said = " ".join((second.stdout + second.stderr).split())
        assert "in use by a running fairshare up" in said, said
        assert f"pid {first.process.pid}" in said, said

        hanging = _hanging_request(port)
        started = time.monotonic()
        first.process.send_signal(signal.SIGTERM)
        first.process.wait(timeout=30)
        took = time.monotonic() - started
        hanging.close()
        assert took <= 16, f"SIGTERM took {took:.1f} s with a request in flight:\n{first.text()}"
        left = processes_using(data_dir)
        assert not left, f"still using {data_dir} after SIGTERM: {left}"

        again = Up(data_dir, port)
        again.wait_started()
        assert not re.search(r"refused", again.text())
        again.process.kill()  # kill -9: it gets no chance to stop anything itself
        again.process.wait()
        time.sleep(10)
        left = processes_using(data_dir)
        assert not left, f"still using {data_dir} 10 s after kill -9: {left}"
    finally:
        for up in (first,):
            if up.process.poll() is None:
                up.process.kill()
        for user in processes_using(data_dir):  # only if the test failed
            os.kill(user.pid, signal.SIGKILL)


def test_a_directory_held_by_a_run_or_used_by_leftovers_is_refused(tmp_path: Path) -> None:
    """The two refusals in-process: the lock of a live run, and a leftover process (here a
    ``sleep`` whose working directory is inside) named by pid and command."""
    from services.launcher.data_dir import DataDirInUseError

    with (
        exclusive_data_dir(tmp_path),
        pytest.raises(DataDirInUseError, match="running"),
        exclusive_data_dir(tmp_path),
    ):
        pass
    leftover = subprocess.Popen(["sleep", "60"], cwd=tmp_path)
    try:
        refused = pytest.raises(DataDirInUseError, match=rf"pid {leftover.pid} \(sleep 60\)")
        with refused, exclusive_data_dir(tmp_path):
            pass
    finally:
        leftover.kill()
        leftover.wait()
    with exclusive_data_dir(tmp_path):  # free again
        pass
