"""``fairshare up`` as a supervisor: the restart backoff, what a death looks like in the status,
a bounded stop that names what it had to kill, and children that die with the launcher."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from events import Topics
from services.launcher.children import (
    Child,
    describe_exit,
    last_log_line,
    spawn_child,
    stop_children,
)
from services.launcher.config import RestartPolicy, UpConfig
from services.launcher.stack import Stack
from services.launcher.status import services_line


def test_backoff_doubles_from_one_second_up_to_thirty() -> None:
    policy = RestartPolicy()
    assert [policy.delay_s(n) for n in range(1, 8)] == [1, 2, 4, 8, 16, 30, 30]
    assert policy.delay_s(10_000) == 30  # no overflow after a long night of crashes


class FakeProcess:
    _next_pid = 1000

    def __init__(self) -> None:
        FakeProcess._next_pid += 1
        self.pid = FakeProcess._next_pid
        self.returncode: int | None = None

    def poll(self) -> int | None:
        return self.returncode


class FakeStack(Stack):
    """Children are fake processes: the supervision logic without subprocesses."""

    def spawn(self, child: Child) -> None:
        child.process = FakeProcess()  # type: ignore[assignment]
        child.started_at = self.now
        child.restart_at = None

    now = 0.0


def _stack(tmp_path: Path) -> FakeStack:
    config = UpConfig("nowhere:1", Topics(), tmp_path, "sqlite://")
    stack = FakeStack(config)
    for name in ("projector", "scheduler"):
        child = Child(name, ["x"], tmp_path / f"{name}.log")
        child.log_path.write_text("info starting\nerror service exiting reason='fatal'\n")
        stack.spawn(child)
        stack.children.append(child)
    return stack


def _die(stack: FakeStack, name: str, code: int) -> None:
    process = stack.child(name).process
    assert isinstance(process, FakeProcess)
    process.returncode = code


def test_a_dead_child_is_restarted_after_a_growing_delay_and_the_reason_is_reported(
    tmp_path: Path,
) -> None:
    stack, said = _stack(tmp_path), []
    scheduler = stack.child("scheduler")
    first_pid = scheduler.process.pid  # type: ignore[union-attr]
    _die(stack, "scheduler", -signal.SIGKILL)
    stack.supervise(said.append, now=10.0)
    assert said == ["scheduler died (killed by SIGKILL: error service exiting reason='fatal'); "
                    "restarting in 1 s"]  # fmt: skip
    assert "scheduler down, restart in 1 s" in services_line(stack.children, 10.0)
    stack.supervise(said.append, now=10.5)  # not yet
    assert scheduler.restarts == 0
    stack.now = 11.0
    stack.supervise(said.append, now=11.0)
    assert scheduler.restarts == 1
    assert scheduler.process.pid != first_pid  # type: ignore[union-attr]
    assert said[-1].startswith("restarted scheduler")
    # dies again at once: the wait doubles
    _die(stack, "scheduler", 70)
    stack.supervise(said.append, now=12.0)
    assert said[-1].endswith("restarting in 2 s")
    assert scheduler.last_exit is not None
    assert scheduler.last_exit.startswith("exit 70")
    stack.now = 14.0
    stack.supervise(said.append, now=14.0)
    line = services_line(stack.children, 14.0)
    assert line.startswith("2 of 2 up")
    assert "scheduler restarted 2x (last: exit 70" in line
    assert stack.child("projector").restarts == 0


def test_the_backoff_starts_over_after_a_child_stayed_up_a_minute(tmp_path: Path) -> None:
    stack, said = _stack(tmp_path), []
    for now in (1.0, 3.0, 7.0):  # three quick deaths: 1, 2, 4 s
        _die(stack, "projector", 1)
        stack.supervise(said.append, now=now)
        stack.now = now + 10
        stack.supervise(said.append, now=now + 10)
    assert said[-2].endswith("restarting in 4 s")
    stack.now = 100.0
    _die(stack, "projector", 1)
    stack.supervise(said.append, now=100.0 + 61)
    assert said[-1].endswith("restarting in 1 s")


def test_a_child_that_keeps_dying_is_still_restarted_but_reported_loudly(tmp_path: Path) -> None:
    stack, said = _stack(tmp_path), []
    policy = stack.config.restart
    for death in range(policy.loud_deaths):
        now = death * 40.0
        _die(stack, "projector", 1)
        stack.supervise(said.append, now=now)
        stack.now = now + 35
        stack.supervise(said.append, now=now + 35)
    assert "died 5 times in 300 s" in said[-2]
    assert said[-2].startswith("[bold red]")
    assert said[-1].startswith("restarted projector")
    assert not any("times in" in line for line in said[:-2])


def test_describe_exit_and_the_last_log_line(tmp_path: Path) -> None:
    assert describe_exit(-9) == "killed by SIGKILL"
    assert describe_exit(70) == "exit 70"
    log = tmp_path / "x.log"
    log.write_text("a\n" * 10_000 + "the end\n\n")
    assert last_log_line(log) == "the end"
    assert last_log_line(tmp_path / "missing.log") == ""


def _real_child(tmp_path: Path, name: str, code: str) -> Child:
    child = Child(name, [sys.executable, "-c", code], tmp_path / f"{name}.log")
    spawn_child(child)
    return child


def _wait_for(check: object, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():  # type: ignore[operator]
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def test_stop_is_bounded_and_kills_what_ignores_sigterm(tmp_path: Path) -> None:
    stubborn = _real_child(
        tmp_path,
        "stubborn",
        "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
        "print('ready', flush=True); time.sleep(60)",
    )
    polite = _real_child(tmp_path, "polite", "import time; print('ready', flush=True); "
                         "time.sleep(60)")  # fmt: skip
    _wait_for(lambda: all(last_log_line(c.log_path) == "ready" for c in (stubborn, polite)))
    started = time.monotonic()
    killed = stop_children([stubborn, polite], timeout_s=1.0)
    assert [c.name for c in killed] == ["stubborn"]
    assert time.monotonic() - started < 5
    assert stubborn.process is not None
    assert stubborn.process.returncode == -signal.SIGKILL
    assert polite.process is not None
    assert polite.process.returncode == -signal.SIGTERM


def _alive(pid: int) -> bool:
    """Running, not a zombie waiting to be reaped by whoever adopted it."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, IndexError):
        return False
    return state != "Z"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
def test_a_child_dies_with_a_launcher_killed_by_sigkill(tmp_path: Path) -> None:
    launcher = textwrap.dedent(
        f"""
        import sys, time
        from pathlib import Path
        from services.launcher.children import Child, spawn_child
        child = Child("c", [sys.executable, "-c", "import time; time.sleep(60)"],
                      Path({str(tmp_path / "c.log")!r}))
        spawn_child(child)
        print(child.process.pid, flush=True)
        time.sleep(60)
        """
    )
    process = subprocess.Popen([sys.executable, "-c", launcher], stdout=subprocess.PIPE, text=True)
    assert process.stdout is not None
    pid = int(process.stdout.readline())
    assert _alive(pid)
    assert f"FAIRSHARE_UP_PID={process.pid}" in Path(f"/proc/{pid}/environ").read_text("latin-1")
    os.kill(process.pid, signal.SIGKILL)
    process.wait()
    _wait_for(lambda: not _alive(pid), timeout_s=10)


def test_services_that_died_while_the_broker_was_down_start_at_once_when_it_is_back(
    tmp_path: Path,
) -> None:
    from services.brokers import BrokerHandle, BrokerWatch

    dead = [True]

    def revive() -> str:
        dead[0] = False
        return "Apache Kafka started again (node 1 pid 7)"

    handle = BrokerHandle(
        kind="apache-kafka",
        bootstrap="nowhere:1",
        description="fake",
        stop=lambda: None,
        exited=lambda: "Kafka node 1 was killed by SIGKILL" if dead[0] else None,
        revive=revive,
    )
    stack, said = _stack(tmp_path), []
    stack.broker = BrokerWatch(handle)
    scheduler = stack.child("scheduler")
    scheduler.failures = 4  # it had died over and over while the broker was down
    _die(stack, "scheduler", 1)
    stack.supervise(said.append, now=50.0)
    assert said[0].startswith("broker died (Kafka node 1 was killed by SIGKILL)")
    assert "started again" in said[1]
    assert said[2] == "starting again now that the broker is back: scheduler"
    assert scheduler.restarts == 1
    assert scheduler.failures == 0
    assert stack.child("projector").restarts == 0
    assert stack.broker.status().startswith("broker restarted 1x")
