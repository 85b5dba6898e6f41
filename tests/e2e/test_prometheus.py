"""A real Prometheus (Debian's package) scrapes a running ``fairshare up`` through the targets
file it writes, and its HTTP API answers for the series an operator watches: every service up,
the submit-to-placed histogram, pass durations, consumer lag, the lease and API requests. Every
service's ``/metrics`` passes ``promtool check metrics`` on the way.

Skipped (visibly) where Debian's ``prometheus`` package is not installed; CI installs it and sets
``FAIRSHARE_REQUIRE_PROMETHEUS=1``, so there it fails instead.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from services.launcher.data_dir import processes_using
from tests.processes import FAIRSHARE, free_port
from tests.real_kafka import kafka_runtime_or_skip

# a whole stack and a Prometheus for a minute or two: among the slow scenarios (.ci/run)
pytestmark = [pytest.mark.broker, pytest.mark.slow]

#: The services of the stack below, by their ``service`` label.
SERVICES = {"api", "scheduler", "scheduler-2", "agent", "charging", "projector"}


def _binaries() -> tuple[str, str]:
    found = shutil.which("prometheus"), shutil.which("promtool")
    if found[0] is None or found[1] is None:
        if os.environ.get("FAIRSHARE_REQUIRE_PROMETHEUS") == "1":
            pytest.fail("Prometheus required: apt-get install prometheus (prometheus, promtool)")
        pytest.skip("Prometheus not installed (Debian's prometheus package)")
    return found[0], found[1]


def _kafka_or_skip() -> None:
    kafka_runtime_or_skip()


def _until(what: str, check: Callable[[], object], timeout_s: float) -> object:
    deadline = time.monotonic() + timeout_s
    while True:
        found = check()
        if found:
            return found
        assert time.monotonic() < deadline, f"timed out waiting for: {what}"
        time.sleep(1)


def _get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=10) as answer:
        return str(answer.read().decode())


@pytest.fixture
def stack(tmp_path: Path) -> Iterator[Path]:
    """A running ``fairshare up`` (its data dir), stopped with SIGTERM after the test."""
    _kafka_or_skip()
    data_dir = tmp_path / "data"
    out = tmp_path / "up.out"
    env = {**os.environ, "COLUMNS": "400"}
    env.pop("FAIRSHARE_KAFKA_BOOTSTRAP", None)
    args = ["up", "--data-dir", str(data_dir), "--api-port", str(free_port())]
    with out.open("wb") as handle:
        up = subprocess.Popen(
            [*FAIRSHARE, *args, "--submit-every", "1", "--nodes", "2"],
            stdout=handle,
            stderr=subprocess.STDOUT,
            env=env,
        )
    try:
        _until(
            "the stack",
            lambda: "pids " in out.read_text(errors="replace") or up.poll() is not None,
            240,
        )
        assert up.poll() is None, out.read_text(errors="replace")
        yield data_dir
    finally:
        up.send_signal(signal.SIGTERM)
        try:
            up.wait(timeout=60)
        except subprocess.TimeoutExpired:
            up.kill()
            up.wait()
        for user in processes_using(data_dir):  # only if stopping failed
            os.kill(user.pid, signal.SIGKILL)


def _targets(data_dir: Path) -> dict[str, str]:
    groups = json.loads((data_dir / "prometheus" / "targets.json").read_text())
    return {group["labels"]["service"]: group["targets"][0] for group in groups}


def _start_prometheus(
    binary: str, data_dir: Path, work: Path, port: int
) -> subprocess.Popen[bytes]:
    """Prometheus on the configuration ``fairshare up`` wrote, scraping every second (a test
    cannot wait out the 15 s default), with its own storage and port."""
    config = json.loads((data_dir / "prometheus" / "prometheus.yml").read_text())
    config["global"] = {"scrape_interval": "1s", "evaluation_interval": "1s"}
    (work / "prometheus.yml").write_text(json.dumps(config))
    log = (work / "prometheus.log").open("wb")
    return subprocess.Popen(
        [
            binary,
            f"--config.file={work / 'prometheus.yml'}",
            f"--storage.tsdb.path={work / 'tsdb'}",
            f"--web.listen-address=127.0.0.1:{port}",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )


def _query(port: int, expression: str) -> list[dict[str, object]]:
    url = f"http://127.0.0.1:{port}/api/v1/query?" + urllib.parse.urlencode({"query": expression})
    answer = json.loads(_get(url))
    assert answer["status"] == "success", answer
    result: list[dict[str, object]] = answer["data"]["result"]
    return result


def _value(port: int, expression: str) -> float | None:
    """The first value of ``expression`` now; None while there is none (or Prometheus is not
    listening yet)."""
    try:
        result = _query(port, expression)
    except OSError:
        return None
    if not result:
        return None
    value = result[0]["value"]
    assert isinstance(value, list)
    return float(value[1])


def test_prometheus_scrapes_every_service_of_up_and_answers_for_its_series(
    stack: Path, tmp_path: Path
) -> None:
    prometheus, promtool = _binaries()
    targets = _targets(stack)
    assert set(targets) == SERVICES

    for service, address in sorted(targets.items()):
        text = _until(f"{service}'s /metrics", lambda a=address: _metrics_or_none(a), 60)
        assert isinstance(text, str)
        checked = subprocess.run(
            [promtool, "check", "metrics"], input=text, capture_output=True, text=True
        )
        assert checked.returncode == 0, f"{service}: {checked.stdout}{checked.stderr}"

    port = free_port()
    work = tmp_path / "prometheus"
    work.mkdir()
    server = _start_prometheus(prometheus, stack, work, port)
    try:
        expectations = {
            # every target scraped, and up, at every scrape for 15 s: a scrape must not wait on
            # the service's Kafka client (the projector's once waited out whole polls)
            (
                'count(min_over_time(up{job="fairshare"}[15s]) == 1 '
                'and count_over_time(up{job="fairshare"}[15s]) >= 12)'
            ): lambda v: v == len(SERVICES),
            # the demo stream's work was placed, and timed from its submission
            "sum(fairshare_submit_to_placed_seconds_count)": lambda v: v > 0,
            "sum(fairshare_scheduler_pass_duration_seconds_count)": lambda v: v > 0,
            # exactly one scheduler leads the whole-cluster lease, in an epoch from 1 on
            'sum(fairshare_scheduler_leader{pool="*"})': lambda v: v == 1,
            'max(fairshare_scheduler_lease_epoch{pool="*"})': lambda v: v >= 1,
            # the scheduler's, the agent's and the API's readers report a lag per topic
            'count(count by (service) (fairshare_consumer_lag_records{topic=~".*workloads"}))': (
                lambda v: v >= 4
            ),
            # the projector's consumer group and charging's ledger tail too
            'count(fairshare_consumer_lag_records{service="projector"})': lambda v: v >= 4,
            'count(fairshare_consumer_lag_records{service="charging",topic=~".*ledger"})': (
                lambda v: v == 1
            ),
            'sum(fairshare_api_request_duration_seconds_count{route="/workloads",method="POST"})': (
                lambda v: v > 0
            ),
            'sum(fairshare_workloads{state="running"})': lambda v: v > 0,
            "max(fairshare_charging_lag_seconds)": lambda v: 0 <= v < 120,
        }
        for expression, holds in expectations.items():
            _until(
                f"{expression} to hold (when the wait began: {_value(port, expression)}; "
                f"log: {work / 'prometheus.log'})",
                lambda e=expression, h=holds: (v := _value(port, e)) is not None and h(v),
                120,
            )
        for service in SERVICES:
            assert _query(port, f'process_start_time_seconds{{service="{service}"}}'), service
    finally:
        server.terminate()
        server.wait(timeout=30)


def _metrics_or_none(address: str) -> str | None:
    try:
        return _get(f"http://{address}/metrics")
    except OSError:
        return None
