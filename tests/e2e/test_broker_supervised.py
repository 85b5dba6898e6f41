"""The broker is supervised like every other part, for real (Apache Kafka): under ``fairshare
up`` a ``kill -9`` of the broker brings it back on the same data and ports, the API answers and
every service is up within 30 s, and nothing acknowledged is lost; ``fairshare broker run
--brokers 3`` starts a killed node again, and SIGTERM stops every JVM it started."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest

from services.brokers import wait_until_ready
from services.brokers.kafka_node import PID_FILE
from services.brokers.security import admin_settings_file
from services.bus.connection import read_properties
from tests.processes import FAIRSHARE, free_port
from tests.real_kafka import kafka_runtime_or_skip

# kill -9 of a broker under a whole stack: among the slow scenarios (.ci/run runs them)
pytestmark = [pytest.mark.broker, pytest.mark.slow]

#: The issue's promise: within 30 s of the kill, the API answers and every service is up.
RECOVERY_S = 30.0


def _until(what: str, check: Callable[[], object], timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, f"timed out after {timeout_s:g} s waiting for: {what}"
        time.sleep(0.2)


def _kafka_or_skip() -> None:
    kafka_runtime_or_skip()


def _pid(path: Path) -> int:
    return int(path.read_text().strip())


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


class Up:
    """A ``fairshare up`` (Apache Kafka, two schedulers, the demo stream) in the background."""

    def __init__(self, data_dir: Path) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.out = data_dir.parent / "up.out"
        env = {**os.environ, "COLUMNS": "400"}
        env.pop("FAIRSHARE_KAFKA_BOOTSTRAP", None)
        args = ["up", "--data-dir", str(data_dir), "--api-port", str(self.port)]
        with self.out.open("wb") as handle:
            self.process = subprocess.Popen(
                [*FAIRSHARE, *args, "--submit-every", "2", "--nodes", "2"],
                stdout=handle,
                stderr=subprocess.STDOUT,
                env=env,
            )

    def text(self) -> str:
        return self.out.read_text(errors="replace")

    def healthy(self) -> bool:
        try:
            answer = httpx.get(f"{self.url}/health", timeout=2)
        except httpx.HTTPError:
            return False
        return answer.status_code == 200 and bool(answer.json().get("caught_up"))

    def submit(self, workload_id: str) -> bool:
        """True when the API acknowledged it (then it must never be lost)."""
        body = {"workload_id": workload_id, "budget": "lab/vision", "pools": ["demo"],
                "gpus": 1, "min_runtime_s": 60, "spec": {"duration_s": 60}}  # fmt: skip
        try:
            answer = httpx.post(
                f"{self.url}/workloads",
                json=body,
                headers={"Authorization": "Bearer ana-token"},
                timeout=10,
            )
        except httpx.HTTPError:
            return False
        assert answer.status_code in (200, 201, 202, 503), (answer.status_code, answer.text)
        return answer.status_code < 300

    def known(self, workload_id: str) -> bool:
        answer = httpx.get(
            f"{self.url}/workloads/{workload_id}",
            headers={"Authorization": "Bearer admin-token"},
            timeout=10,
        )
        return answer.status_code == 200


def test_up_starts_a_killed_broker_again_and_the_stack_recovers(tmp_path: Path) -> None:
    _kafka_or_skip()
    data_dir = tmp_path / "data"
    up = Up(data_dir)
    try:
        _until("the stack", lambda: "pids " in up.text() or up.process.poll() is not None, 240)
        assert up.process.poll() is None, up.text()
        _until("the API caught up", up.healthy, 120)
        acked = [f"before-{n}" for n in range(20) if up.submit(f"before-{n}")]
        assert len(acked) == 20, up.text()

        pid_file = data_dir / "broker" / PID_FILE
        broker_pid = _pid(pid_file)
        os.kill(broker_pid, signal.SIGKILL)
        killed_at = time.monotonic()
        # an outage the caller can wait out, said as one: never a 500 that reads as a bug
        during_outage = httpx.get(f"{up.url}/health", timeout=15)
        assert during_outage.status_code in (200, 503), during_outage.text
        # submissions go on while the broker is down: the ones the API acknowledges count
        during = [f"during-{n}" for n in range(10) if up.submit(f"during-{n}")]
        _until("the API answering, caught up", up.healthy, RECOVERY_S)
        new_pid = _pid(pid_file)
        assert new_pid != broker_pid, up.text()
        assert _alive(new_pid), up.text()
        assert "Apache Kafka started again" in up.text(), up.text()
        recovered_s = time.monotonic() - killed_at
        assert recovered_s <= RECOVERY_S

        # every service up: the supervisor's next status line after the restart says so
        def all_up_after_restart() -> bool:
            after = up.text().split("Apache Kafka started again", 1)[1]
            lines = re.findall(r"^services: (\d+) of (\d+) up(.*)$", after, re.MULTILINE)
            return any(a == b and "down" not in rest for a, b, rest in lines)

        _until("every service up after the broker came back", all_up_after_restart, 25)
        assert time.monotonic() - killed_at <= RECOVERY_S + 12  # a status line every 10 s

        acked += [f"after-{n}" for n in range(5) if up.submit(f"after-{n}")]
        for workload_id in acked + during:
            _until(f"{workload_id} in the API's view", lambda w=workload_id: up.known(w), 30)
        up.process.send_signal(signal.SIGTERM)
        up.process.wait(timeout=60)
        assert not _alive(new_pid), "the restarted broker outlived fairshare up"
    finally:
        if up.process.poll() is None:
            up.process.kill()
            up.process.wait()


def test_broker_run_restarts_a_killed_node_and_stops_every_jvm_on_sigterm(
    tmp_path: Path,
) -> None:
    _kafka_or_skip()
    out = tmp_path / "broker-run.out"
    with out.open("wb") as handle:
        run = subprocess.Popen(
            [*FAIRSHARE, "broker", "run", "--brokers", "3", "--data-dir", str(tmp_path)],
            stdout=handle,
            stderr=subprocess.STDOUT,
            # a grace far shorter than the nodes' own: their stop (up to 30 s each when the
            # quorum goes first) must not run under the process's stop timer
            env={**os.environ, "COLUMNS": "400", "FAIRSHARE_STOP_GRACE_S": "3"},
        )
    pid_files = [tmp_path / f"node-{n}" / PID_FILE for n in (1, 2, 3)]
    try:
        # its own line: librdkafka's warnings while the nodes come up say ".../bootstrap: ..."
        ready = re.compile(r"^bootstrap: (\S+)", re.MULTILINE)
        _until("the cluster", lambda: ready.search(out.read_text()) or run.poll() is not None,
               300)  # fmt: skip
        assert run.poll() is None, out.read_text()
        text = out.read_text()
        found = ready.search(text)
        assert found is not None, text
        bootstrap = found.group(1)
        first = [_pid(path) for path in pid_files]

        os.kill(first[1], signal.SIGKILL)
        _until("node 2 started again", lambda: "started again" in out.read_text(), 120)
        restarted = _pid(pid_files[1])
        assert restarted != first[1], out.read_text()
        assert _alive(restarted), out.read_text()
        # secured, as every broker `broker run` starts in a new data dir: reached as its admin
        admin = read_properties(admin_settings_file(tmp_path / "security"))
        wait_until_ready(bootstrap, 60, min_brokers=3, identity=admin)

        run.send_signal(signal.SIGTERM)
        assert run.wait(timeout=90) == 0, out.read_text()
        jvms = [first[0], restarted, first[2]]
        _until("every JVM gone", lambda: not any(_alive(pid) for pid in jvms), 30)
    finally:
        if run.poll() is None:
            run.kill()
            run.wait()
        for path in pid_files:  # only if the test failed: no JVM may outlive it
            if path.exists() and _alive(_pid(path)):
                os.kill(_pid(path), signal.SIGKILL)
