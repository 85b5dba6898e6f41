"""Pass pacing: under a burst of facts the scheduler runs at most one pass per
``min_pass_interval_s`` and decides everything that arrived meanwhile together; a lone fact
after a quiet spell is decided at once."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest

from events import Topics, new_event
from events.envelope import Envelope
from events.models import BudgetCreated, EventData, NodeRegistered, PlaceCommand
from events.positions import Delivery, Position
from services.scheduler.host import SchedulerConfig, SchedulerService
from tests.factories import T0, submitted

TOPICS = Topics()


class Clock:
    def __init__(self) -> None:
        self.now = T0.timestamp()

    def __call__(self) -> float:
        return self.now


class ScriptedFollower:
    """Hands out one prepared batch of facts per poll, and advances the clock by the poll's
    timeout (as a real poll that found nothing more would take)."""

    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self.batches: list[list[EventData]] = []
        self.offset = 0
        self.timeouts: list[float] = []
        self.positions: dict[tuple[str, int], int] = {}

    def poll(self, timeout_s: float = 0.5, max_records: int = 1000) -> list[Delivery]:
        self.timeouts.append(timeout_s)
        batch = self.batches.pop(0) if self.batches else []
        if not batch:
            self.clock.now += timeout_s
        deliveries = []
        for data in batch:
            at = datetime.fromtimestamp(self.clock.now, UTC)
            envelope: Envelope[Any] = new_event(data, source="tests", time=at)
            topic = TOPICS.name(type(data).topic)
            deliveries.append(Delivery(envelope, Position(topic, 0, self.offset)))
            self.offset += 1
            self.positions[(topic, 0)] = self.offset
        return deliveries

    def catch_up_in_batches(self, stall_timeout_s: float = 60.0) -> Iterator[list[Delivery]]:
        return iter(())

    def close(self) -> None:
        pass


class Published:
    def __init__(self) -> None:
        self.events: list[Envelope[Any]] = []

    def publish(self, envelope: Envelope[Any]) -> None:
        self.events.append(envelope)

    def flush(self, timeout_s: float = 30.0) -> None:
        pass

    def close(self) -> None:
        pass


def _service(interval: float) -> tuple[SchedulerService, ScriptedFollower, Clock, Published]:
    clock = Clock()
    follower = ScriptedFollower(clock)
    published = Published()
    service = SchedulerService(
        lambda: follower,
        published,
        config=SchedulerConfig(poll_s=0.2, min_pass_interval_s=interval),
        clock=clock,
        pace_clock=clock,
    )
    follower.batches.append(
        [
            BudgetCreated(budget="lab", created_by="admin"),
            BudgetCreated(budget="lab/a", created_by="admin"),
            NodeRegistered(node="n0", cluster="c", pool="p", gpus=64, gpu_type="x"),
        ]
    )
    return service, follower, clock, published


def _placed(published: Published) -> list[str]:
    return [e.data.workload_id for e in published.events if isinstance(e.data, PlaceCommand)]


def test_a_burst_is_decided_in_few_passes_and_nothing_waits_long() -> None:
    service, follower, clock, published = _service(interval=0.2)
    service.step()  # the lab
    for k in range(40):  # a fact every 10 ms for 0.4 s
        follower.batches.append([submitted(f"w{k}", budget="lab/a", pools=("p",))])
    passes = []
    while follower.batches:
        clock.now += 0.01
        before = service.passes
        service.step()
        if service.passes > before:
            passes.append(clock.now)
    for _ in range(5):  # the burst is over: what is left runs within one interval
        service.step()
    assert sorted(_placed(published)) == sorted(f"w{k}" for k in range(40))
    gaps = [b - a for a, b in itertools.pairwise(passes)]
    assert all(gap >= 0.2 - 1e-9 for gap in gaps), gaps
    assert len(passes) <= 4, passes  # 40 facts, not 40 passes


def test_without_pacing_every_fact_gets_its_own_pass() -> None:
    service, follower, clock, _published = _service(interval=0.0)
    service.step()
    for k in range(10):
        follower.batches.append([submitted(f"w{k}", budget="lab/a", pools=("p",))])
    while follower.batches:
        clock.now += 0.01
        service.step()
    assert service.passes >= 10


def test_a_lone_fact_after_a_quiet_spell_is_decided_at_once() -> None:
    service, follower, clock, published = _service(interval=0.2)
    service.step()
    clock.now += 5.0
    follower.batches.append([submitted("w", budget="lab/a", pools=("p",))])
    service.step()
    assert _placed(published) == ["w"]
    # while a pass is held back, the poll waits no longer than until it may run
    follower.batches.append([submitted("x", budget="lab/a", pools=("p",))])
    service.step()
    assert _placed(published) == ["w"]  # held back: the last pass was just now
    clock.now += 0.15
    service.step()
    assert follower.timeouts[-1] == pytest.approx(0.05)
    assert _placed(published) == ["w", "x"]


class NeverLeads:
    epoch = 0

    def held(self) -> bool:
        return False

    def close(self) -> None:
        pass


def test_a_standby_with_facts_waits_on_the_plain_poll_and_does_not_spin() -> None:
    clock = Clock()
    follower = ScriptedFollower(clock)
    service = SchedulerService(
        lambda: follower,
        Published(),
        lease=NeverLeads(),
        config=SchedulerConfig(poll_s=0.2, min_pass_interval_s=0.2),
        clock=clock,
        pace_clock=clock,
    )
    follower.batches.append([submitted("w", budget="lab/a", pools=("p",))])
    for _ in range(5):
        service.step()
    assert service.passes == 0
    assert follower.timeouts[1:] == [0.2] * 4  # a spinning standby polled with 0 here
