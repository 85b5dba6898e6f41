"""The chaos run kills the scheduler that holds the lease: a renewal left by a scheduler that
died earlier (a broker kill makes every scheduler exit) is not a holder to kill, and the run
waits for a live one instead of failing."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest

from events import Topics
from services.bench.chaos import faults
from services.launcher.children import Child
from services.scheduler.lease import LeaseRecord


@dataclass
class _Stack:
    children: list[Child]
    killed: list[str] = field(default_factory=list)
    config: Any = None

    def supervise(self, _report: object) -> None:
        pass

    def child(self, name: str) -> Child:
        return next(c for c in self.children if c.name == name)


@pytest.fixture
def sleeper() -> Iterator[subprocess.Popen[bytes]]:
    process = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    yield process
    process.kill()
    process.wait()


def test_a_stale_renewal_by_a_dead_scheduler_is_waited_out(
    monkeypatch: pytest.MonkeyPatch, sleeper: subprocess.Popen[bytes]
) -> None:
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    stack = _Stack(
        children=[Child("scheduler", [], log_path=None, process=sleeper)],  # type: ignore[arg-type]
        config=type("C", (), {"bootstrap": "unused"})(),
    )
    # the dead scheduler's renewal first, then the live one's, then a newer epoch after the kill
    answers = iter(
        [
            LeaseRecord("renew", f"vm:{dead.pid}:a", 3),
            LeaseRecord("renew", f"vm:{dead.pid}:a", 3),
            LeaseRecord("renew", f"vm:{sleeper.pid}:b", 4),
            LeaseRecord("renew", f"vm:{sleeper.pid}:b", 4),
            LeaseRecord("renew", f"vm:{sleeper.pid}:c", 5),
        ]
    )
    monkeypatch.setattr(faults, "lease_holder", lambda _b, _t: next(answers))
    monkeypatch.setattr(faults, "kill_service", lambda s, name: s.killed.append(name) or 0)
    failover = faults.kill_lease_holder(stack, Topics(), wait=0)  # type: ignore[arg-type]
    assert stack.killed == ["scheduler"]
    assert (failover.epoch_before, failover.epoch_after) == (4, 5)


def test_no_live_holder_within_the_timeout_says_whose_renewal_it_saw(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    stack = _Stack(children=[], config=type("C", (), {"bootstrap": "unused"})())
    monkeypatch.setattr(faults, "lease_holder", lambda _b, _t: LeaseRecord("renew", "vm:1:a", 3))
    with pytest.raises(RuntimeError, match="last renewed by vm:1:a"):
        faults.kill_lease_holder(stack, Topics(), timeout_s=0.05, wait=0)  # type: ignore[arg-type]
