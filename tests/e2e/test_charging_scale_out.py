"""Charging scaled out by partitions, as an operator runs it: two ``fairshare charging
--instance`` processes share the workloads topic; one is killed with -9 and the other takes its
partitions over after the group's session timeout; the killed one is started again and rejoins.
At every stage the ledger topic holds exactly the charges of one fold of the whole log (a
charge posted twice in a rebalance race is the same charge, with the same id)."""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from services.brokers import BrokerHandle
from tests.charging_facts import batch
from tests.integration.kafka_bus import KafkaBus
from tests.integration.test_charging_shards import _expected, _posts_exactly, _publish, _wait
from tests.processes import FAIRSHARE

pytestmark = [pytest.mark.slow, pytest.mark.broker, pytest.mark.timeout(300)]


@pytest.fixture
def bus(broker: BrokerHandle) -> Iterator[KafkaBus]:
    bus = KafkaBus(broker)  # three partitions, as `fairshare charging` sets the topics up
    yield bus
    bus.close()


def _start(bus: KafkaBus, name: str, logs: Path) -> subprocess.Popen[bytes]:
    with (logs / f"charging-{name}.log").open("ab") as log:
        return subprocess.Popen(
            [
                *FAIRSHARE, "charging", "--instance", name,
                "--kafka", bus.broker.bootstrap, "--topic-prefix", bus.topics.prefix,
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            env={**os.environ, "FAIRSHARE_LOG_LEVEL": "INFO"},
            start_new_session=True,
        )  # fmt: skip


def test_a_killed_shard_is_taken_over_and_rejoins(bus: KafkaBus, tmp_path: Path) -> None:
    facts = batch("w", 0)
    _publish(bus, facts)
    running = {name: _start(bus, name, tmp_path) for name in ("a", "b")}
    try:

        def charged(*alive: str) -> bool:
            for name in alive:  # a shard that exits is a failure, not something to wait out
                log = tmp_path / f"charging-{name}.log"
                assert running[name].poll() is None, log.read_text()
            return _posts_exactly(bus, _expected(facts))

        _wait("the first charges", lambda: charged("a", "b"), 120)
        b_log = tmp_path / "charging-b.log"
        _wait("b to hold partitions", lambda: "charging fold started" in b_log.read_text(), 60)

        os.killpg(running["b"].pid, signal.SIGKILL)
        running["b"].wait(timeout=10)
        later = batch("x", 4 * 3600)
        facts += later
        _publish(bus, later)
        _wait("a to charge b's partitions too", lambda: charged("a"), 120)

        running["b"] = _start(bus, "b", tmp_path)  # crash-only: the supervisor starts it again
        later = batch("y", 8 * 3600)
        facts += later
        _publish(bus, later)
        _wait("both again", lambda: charged("a", "b"), 120)
        for name, process in running.items():
            assert process.poll() is None, (tmp_path / f"charging-{name}.log").read_text()
    finally:
        for process in running.values():
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGTERM)
                try:
                    process.wait(timeout=20)
                except subprocess.TimeoutExpired:
                    os.killpg(process.pid, signal.SIGKILL)
