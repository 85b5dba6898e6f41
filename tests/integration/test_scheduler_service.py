"""The scheduler service through a real broker: it places from the log, issues nothing twice
after a restart, declares silent nodes down, and hands over to a standby on failure."""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import pytest

from events import TopicKind, new_event
from events.envelope import Envelope
from events.models import (
    BudgetCreated,
    EventData,
    GpuHeartbeat,
    GpuReading,
    NodeDown,
    NodeRegistered,
    PlaceCommand,
    PreemptCommand,
    SchedulerSettings,
    WorkloadLost,
    WorkloadRequeued,
    WorkloadStarted,
)
from services.bus.export import read_to_end
from services.bus.lease import KafkaLeaseLog
from services.scheduler.host import SchedulerConfig, SchedulerService
from services.scheduler.lease import LeaseTiming, LogLease
from services.scheduler.serve import kafka_scheduler
from tests.factories import submitted
from tests.integration.kafka_bus import KafkaBus

pytestmark = [pytest.mark.broker]

T0 = float(int(time.time()) // 60 * 60)


class Clock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def _publish(bus: KafkaBus, facts: list[tuple[EventData, float]]) -> None:
    publisher = bus.publisher()
    for data, at in facts:
        publisher.publish(new_event(data, source="tests", time=datetime.fromtimestamp(at, UTC)))
    publisher.flush()


def _lab(nodes: int = 2) -> list[tuple[EventData, float]]:
    facts: list[tuple[EventData, float]] = [
        (BudgetCreated(budget="lab", created_by="admin"), T0),
        (BudgetCreated(budget="lab/a", created_by="admin"), T0),
        (BudgetCreated(budget="lab/b", created_by="admin"), T0),
    ]
    facts += [
        (NodeRegistered(node=f"n{i}", cluster="c", pool="p", gpus=4, gpu_type="x"), T0)
        for i in range(nodes)
    ]
    return facts


def _commands(bus: KafkaBus) -> list[PlaceCommand | PreemptCommand]:
    """The commands on the commands topic (it also holds the settings each leader states)."""
    return [
        e.data
        for e in _log(bus, TopicKind.COMMANDS)
        if isinstance(e.data, PlaceCommand | PreemptCommand)
    ]


def _log(bus: KafkaBus, kind: TopicKind) -> list[Envelope[Any]]:
    from events import decode_binary

    return [
        decode_binary(r.value, r.headers)
        for r in read_to_end(bus.broker.bootstrap, [bus.topics.name(kind)])
    ]


def _until(service: SchedulerService, done: Callable[[], bool], timeout_s: float = 30) -> None:
    deadline = time.monotonic() + timeout_s
    while not done():
        assert time.monotonic() < deadline, "timed out"
        service.step()


def _service(bus: KafkaBus, clock: Clock, **kwargs: Any) -> SchedulerService:
    config = SchedulerConfig(tick_s=1.0, heartbeat_timeout_s=60, poll_s=0.1)
    return kafka_scheduler(bus.broker.bootstrap, bus.topics, config=config, clock=clock, **kwargs)


def test_places_from_the_log_and_a_restart_issues_nothing_twice(bus: KafkaBus) -> None:
    _publish(
        bus,
        [
            *_lab(),
            (submitted("w1", budget="lab/a", pools=("p",), gpus=4, min_runtime_s=600), T0 + 1),
            (submitted("w2", budget="lab/b", pools=("p",), gpus=2, min_runtime_s=0), T0 + 2),
        ],
    )
    clock = Clock(T0 + 5)
    first = _service(bus, clock)
    # its settings, two place commands and two placed facts
    _until(first, lambda: first.published >= 5)
    commands = _commands(bus)
    assert sorted(c.workload_id for c in commands) == ["w1", "w2"]
    place = next(c for c in commands if c.workload_id == "w1")
    assert isinstance(place, PlaceCommand)
    assert place.allocated
    assert place.decision.reason == "fairshare"
    assert place.decision.input_position, "the decision names the log position it was made at"
    first.close()

    clock.now += 30
    second = _service(bus, clock)
    second.fold(second.follower.catch_up())
    assert not second.state.rejected, "the log folds cleanly whatever the partition order"
    assert not second.state.waiting
    for _ in range(5):
        second.step()
    assert second.passes >= 1
    assert len(_commands(bus)) == 2, "nothing decided twice"
    stated = [e for e in _log(bus, TopicKind.COMMANDS) if isinstance(e.data, SchedulerSettings)]
    assert len(stated) == 2, "each leader states its settings before its passes"
    assert second.published == 1
    second.close()


def test_a_silent_node_is_declared_down_and_its_work_lost_and_requeued(bus: KafkaBus) -> None:
    _publish(
        bus,
        [
            *_lab(nodes=1),
            (submitted("w1", budget="lab/a", pools=("p",), gpus=4, min_runtime_s=600), T0 + 1),
        ],
    )
    clock = Clock(T0 + 5)
    service = _service(bus, clock)
    _until(service, lambda: service.published >= 2)
    place = next(c for c in _commands(bus) if isinstance(c, PlaceCommand))
    beat = GpuHeartbeat(
        node="n0",
        cluster="c",
        sequence=1,
        gpus=tuple(
            GpuReading(index=i, occupant="w1", attempt=1, utilisation_pct=90, memory_used_bytes=0)
            for i in range(4)
        ),
    )
    started = WorkloadStarted(
        workload_id="w1", attempt=1, pool="p", placement=place.placement, allocated=True
    )
    _publish(bus, [(started, T0 + 10), (beat, T0 + 70)])
    # The scheduler reads them before its clock moves on (a scheduler that reads each record
    # as it arrives may otherwise pass at T0 + 80 before it has read the heartbeat of T0 + 70)
    _until(service, lambda: service.state.cluster.nodes["n0"].last_heartbeat == T0 + 70)
    clock.now = T0 + 80
    _until(service, lambda: service.state.cluster.workloads["w1"].status == "running")
    for _ in range(5):
        service.step()
    assert not any(isinstance(e.data, NodeDown) for e in _log(bus, TopicKind.CLUSTER))

    clock.now = T0 + 70 + 61  # silent for longer than the timeout
    _until(service, lambda: service.state.cluster.workloads["w1"].status == "pending")
    down = [e.data for e in _log(bus, TopicKind.CLUSTER) if isinstance(e.data, NodeDown)]
    assert [d.node for d in down] == ["n0"]
    assert down[0].last_heartbeat == datetime.fromtimestamp(T0 + 70, UTC)
    workloads = [e.data for e in _log(bus, TopicKind.WORKLOADS)]
    lost = [w for w in workloads if isinstance(w, WorkloadLost)]
    assert [(w.workload_id, w.last_heartbeat) for w in lost] == [
        ("w1", datetime.fromtimestamp(T0 + 70, UTC))
    ]
    assert any(isinstance(w, WorkloadRequeued) and w.reason == "lost" for w in workloads)
    service.close()


def _lease(bus: KafkaBus, timing: LeaseTiming | None = None) -> LogLease:
    """The whole-cluster lease over the test broker, as ``fairshare scheduler`` builds it."""
    timing = timing or LeaseTiming()
    lease_log = KafkaLeaseLog(bus.broker.bootstrap, bus.topics, record_timeout_s=timing.ttl_s)
    return LogLease(lease_log, timing=timing, clock=time.monotonic)


def _step_until_leading(service: SchedulerService, timeout_s: float) -> float:
    """Steps ``service`` until its lease says it leads; returns when (monotonic)."""
    deadline = time.monotonic() + timeout_s
    while not service.lease.held():
        assert time.monotonic() < deadline, "never got the lease"
        service.step()
    return time.monotonic()


@pytest.mark.slow  # a takeover waits out the lease: with the chaos scenarios
def test_a_standby_takes_over_when_the_leader_is_killed_and_the_old_one_is_fenced(
    bus: KafkaBus,
) -> None:
    """kill -9 of the leader is a hard stop: it neither closes nor says goodbye, it just stops
    renewing. The standby leads within the lease's ttl (10 s) plus a renewal, well under 30 s;
    the old leader, resumed after the takeover (a stall, not a death), issues nothing."""
    _publish(bus, _lab())
    clock = Clock(T0 + 5)
    timing = LeaseTiming()  # the defaults: ttl 10 s, renewals every 2 s
    leader = _service(bus, clock, lease=_lease(bus, timing))
    _step_until_leading(leader, 30)
    standby = _service(bus, clock, lease=_lease(bus, timing))
    _publish(bus, [(submitted("w1", budget="lab/a", pools=("p",), gpus=4), T0 + 6)])
    until = time.monotonic() + 2 * timing.ttl_s  # a standby that reads renewals never claims
    while time.monotonic() < until:
        leader.step()
        standby.step()
        assert not standby.lease.held(), "a standby does not take over from a live leader"
    assert leader.lease.held()
    assert leader.published >= 2
    assert standby.published == 0, "the standby issues nothing while the leader lives"

    killed = time.monotonic()  # the leader is never stepped (nor closed) again
    _publish(bus, [(submitted("w2", budget="lab/b", pools=("p",), gpus=4), T0 + 7)])
    leading = _step_until_leading(standby, 30)
    _until(standby, lambda: standby.published >= 2, timeout_s=30)
    issued = time.monotonic()
    print(
        f"\ntakeover after a hard stop of the leader: leading after {leading - killed:.1f} s, "
        f"first commands out after {issued - killed:.1f} s (ttl {timing.ttl_s:.0f} s)"
    )
    assert leading - killed < 30
    assert standby.lease.epoch == leader.lease.epoch + 1

    published_before = leader.published
    for _ in range(10):  # the old leader wakes up: it reads the higher epoch and stands by
        leader.step()
    assert not leader.lease.held()
    assert leader.published == published_before

    commands = _commands(bus)
    assert sorted(c.workload_id for c in commands) == ["w1", "w2"], "no command issued twice"
    assert {c.workload_id: c.epoch for c in commands} == {"w1": 1, "w2": 2}
    by_id: dict[str, set[bytes]] = {}
    for command in commands:
        by_id.setdefault(command.command_id, set()).add(
            command.model_dump_json(exclude={"epoch", "decision"}).encode()
        )
    assert all(len(decisions) == 1 for decisions in by_id.values())
    standby.close()
    leader.close()


def test_of_two_schedulers_started_together_exactly_one_leads(bus: KafkaBus) -> None:
    _publish(bus, _lab())
    clock = Clock(T0 + 5)
    services = [_service(bus, clock, lease=_lease(bus)) for _ in range(2)]
    deadline = time.monotonic() + 30
    while not any(s.lease.held() for s in services):
        assert time.monotonic() < deadline, "nobody got the lease"
        for service in services:
            service.step()
    for _ in range(20):
        for service in services:
            service.step()
        assert sum(s.lease.held() for s in services) == 1
    assert {s.lease.epoch for s in services} == {1}
    for service in services:
        service.close()
