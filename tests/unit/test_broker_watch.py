"""The broker watcher's rules, on a fake broker: a death is noticed and the broker started again
once; a failed start is retried after a growing delay; too many failures give up (the owner
then exits non-zero); a broker that is not ours is never touched."""

from __future__ import annotations

import pytest

from services.brokers import BrokerGaveUpError, BrokerHandle, BrokerStartError, BrokerWatch
from services.brokers.watch import MAX_FAILED_REVIVALS


class FakeBroker:
    def __init__(self, failures: int = 0) -> None:
        self.dead = False
        self.failures = failures
        self.revivals = 0

    def exited(self) -> str | None:
        return "Kafka node 1 was killed by SIGKILL (log: x)\nlast lines" if self.dead else None

    def revive(self) -> str:
        if self.failures:
            self.failures -= 1
            raise BrokerStartError("port taken\nmore")
        self.revivals += 1
        self.dead = False
        return "Apache Kafka started again (node 1 pid 2)"

    def handle(self, supervised: bool = True) -> BrokerHandle:
        return BrokerHandle(
            kind="apache-kafka",
            bootstrap="127.0.0.1:1",
            description="fake",
            stop=lambda: None,
            exited=self.exited,
            revive=self.revive if supervised else None,
        )


def test_a_dead_broker_is_started_again_once() -> None:
    fake = FakeBroker()
    watch = BrokerWatch(fake.handle())
    said: list[str] = []
    assert not watch.check(said.append, now=0.0)
    fake.dead = True
    assert watch.check(said.append, now=1.0)
    assert not watch.check(said.append, now=2.0)
    assert fake.revivals == 1
    assert watch.restarts == 1
    assert said[0].startswith("broker died (Kafka node 1 was killed by SIGKILL")
    assert "started again" in said[1]
    last = "Kafka node 1 was killed by SIGKILL (log: x)"
    assert watch.status() == f"broker restarted 1x (last: {last})"


def test_a_failed_start_is_retried_later_then_given_up() -> None:
    fake = FakeBroker(failures=1)
    watch = BrokerWatch(fake.handle())
    fake.dead = True
    said: list[str] = []
    assert not watch.check(said.append, now=0.0)
    assert "trying again in 2 s" in said[-1]
    retry_at = watch.retry_at
    assert retry_at is not None
    assert not watch.check(said.append, now=retry_at - 1.0)  # not before its time
    assert watch.check(said.append, now=retry_at)
    assert watch.failures == 0
    assert fake.revivals == 1

    hopeless = FakeBroker(failures=MAX_FAILED_REVIVALS)
    watch = BrokerWatch(hopeless.handle())
    hopeless.dead = True
    for _ in range(MAX_FAILED_REVIVALS - 1):
        assert not watch.check(said.append, now=1e9)
        watch.retry_at = None
    with pytest.raises(BrokerGaveUpError, match="did not start again"):
        watch.check(said.append, now=1e9)


def test_a_broker_that_is_not_ours_is_left_alone() -> None:
    fake = FakeBroker()
    watch = BrokerWatch(fake.handle(supervised=False))
    fake.dead = True
    assert not watch.check(lambda _line: None, now=0.0)
    assert fake.revivals == 0
    assert watch.status() == "broker not supervised here"
