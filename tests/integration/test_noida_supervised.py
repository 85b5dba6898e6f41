"""The fallback broker (noida-db, the real binary) is supervised too: it daemonizes, so it is
no child of the process that started it, yet a ``kill -9`` of it is seen through its pid and
the watch that ``fairshare up`` and ``broker run`` poll starts it again on the same data dir and
Kafka port."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

from services.brokers import BrokerWatch, wait_until_ready
from services.brokers.noida import find_noida_binary, server_pid, start_noida


def _noida_or_skip() -> None:
    try:
        find_noida_binary()
    except Exception as error:  # a dependency of fairshare: missing means a broken venv
        pytest.fail(f"noida-db is a dependency and should be installed: {error}")


def test_a_killed_noida_server_is_started_again_on_its_port(tmp_path: Path) -> None:
    _noida_or_skip()
    broker = start_noida(tmp_path / "noida")
    try:
        watch = BrokerWatch(broker)
        assert watch.supervised
        lines: list[str] = []
        assert not watch.check(lines.append)  # alive: nothing to do
        first = server_pid(tmp_path / "noida")
        assert first is not None
        assert broker.pid == first
        os.kill(first, signal.SIGKILL)
        deadline = time.monotonic() + 10
        while broker.exited() is None:
            assert time.monotonic() < deadline, "the kill was not seen"
            time.sleep(0.1)
        assert f"pid {first}" in (broker.exited() or "")
        assert watch.check(lines.append)
        assert broker.exited() is None
        second = server_pid(tmp_path / "noida")
        assert second is not None
        assert second != first
        assert any("started again" in line for line in lines), lines
        wait_until_ready(broker.bootstrap, 10)  # the same address serves again
        assert watch.restarts == 1
    finally:
        broker.stop()
    assert server_pid(tmp_path / "noida") is None or not _runs(second)
    assert broker.exited() is None  # stopped on purpose: no death for a supervisor to mend


def _runs(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return Path(f"/proc/{pid}").exists() and b"noida" in Path(f"/proc/{pid}/cmdline").read_bytes()
