"""A cold standby scheduler (``SchedulerService.cold_standby``): where the fold is
checkpointed, an instance without the lease reads neither the log nor anything but the lease;
when it wins the lease it starts from the latest checkpoint (the leader's) and reads only the
log after it, and decides exactly what a standby that had folded everything would: nothing the
old leader placed is placed again."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from datetime import UTC, datetime
from typing import Any

from events import new_event
from events.envelope import Envelope
from events.models import BudgetCreated, EventData, NodeRegistered, PlaceCommand
from events.positions import Delivery, Position, TopicPartition
from services.runtime.fold_checkpoints import FoldCheckpoints
from services.scheduler.host import SchedulerConfig, SchedulerService
from services.scheduler.lease import SoleInstance
from tests.factories import T0, submitted

TOPIC = "fairshare.everything"
LAB: tuple[EventData, ...] = (
    BudgetCreated(budget="lab", created_by="admin"),
    BudgetCreated(budget="lab/a", created_by="admin"),
    NodeRegistered(node="n0", cluster="c", pool="p", gpus=8, gpu_type="x"),
)


class Log:
    """One partition holding every fact and command, in the order written."""

    def __init__(self) -> None:
        self.deliveries: list[Delivery] = []

    def write(self, envelope: Envelope[Any]) -> None:
        self.deliveries.append(Delivery(envelope, Position(TOPIC, 0, len(self.deliveries))))

    def add(self, *facts: EventData, at: float = T0.timestamp()) -> None:
        for data in facts:
            self.write(new_event(data, source="tests", time=datetime.fromtimestamp(at, UTC)))


class Follower:
    def __init__(self, log: Log, start: int = 0) -> None:
        self.log, self.next, self.closed, self.polls = log, start, False, 0
        self.positions: dict[TopicPartition, int] = {(TOPIC, 0): start}

    def poll(self, timeout_s: float = 0.5, max_records: int = 1000) -> list[Delivery]:
        assert not self.closed, "a closed follower is never read"
        self.polls += 1
        found = self.log.deliveries[self.next :]
        self.next = len(self.log.deliveries)
        self.positions = {(TOPIC, 0): self.next}
        return found

    def catch_up_in_batches(self, stall_timeout_s: float = 60.0) -> Iterator[list[Delivery]]:
        found = self.poll()
        return iter([found[i : i + 2] for i in range(0, len(found), 2)])

    def close(self) -> None:
        self.closed = True


class Publisher:
    def __init__(self, log: Log) -> None:
        self.log = log

    def publish(self, envelope: Envelope[Any]) -> None:
        self.log.write(envelope)

    def flush(self, timeout_s: float = 30.0) -> None:
        pass

    def close(self) -> None:
        pass


class Store:
    def __init__(self) -> None:
        self.blob: bytes | None = None

    def load(self) -> bytes | None:
        return self.blob

    def save(self, blob: bytes) -> object:
        self.blob = blob
        return None


class Lease:
    def __init__(self) -> None:
        self.ours = False
        self.epoch = 1
        self.turns = 0

    def held(self) -> bool:
        self.turns += 1
        return self.ours

    def close(self) -> None:
        pass


class Instance:
    """A scheduler whose followers (fresh, and resumed from a checkpoint) are recorded."""

    def __init__(
        self, log: Log, store: Store, lease: Lease | SoleInstance, warm: bool = False
    ) -> None:
        self.followers: list[Follower] = []
        self.resumed_from: list[Mapping[TopicPartition, int]] = []
        self.slept: list[float] = []
        self.service = SchedulerService(
            lambda: self._follower(log, 0),
            Publisher(log),
            lease=lease,
            config=SchedulerConfig(poll_s=0.2, min_pass_interval_s=0.0, warm_standby=warm),
            clock=lambda: T0.timestamp() + 60,
            pace_clock=lambda: 0.0,
            checkpoints=FoldCheckpoints(store, name="scheduler"),
            resume=self._resume(log),
            sleep=self.slept.append,
        )

    def _follower(self, log: Log, start: int) -> Follower:
        follower = Follower(log, start)
        self.followers.append(follower)
        return follower

    def _resume(self, log: Log) -> Any:
        def resume(positions: Mapping[TopicPartition, int]) -> Follower:
            self.resumed_from.append(dict(positions))
            return self._follower(log, positions[(TOPIC, 0)])

        return resume


def _placed(log: Log) -> list[str]:
    return [
        d.envelope.data.workload_id
        for d in log.deliveries
        if isinstance(d.envelope.data, PlaceCommand)
    ]


def test_a_standby_parks_and_takes_over_from_the_leaders_checkpoint() -> None:
    log, store = Log(), Store()
    log.add(*LAB, submitted("w1", budget="lab/a", pools=("p",), gpus=4))
    standby = Instance(log, store, Lease())
    standby.service.step()
    assert standby.service.parked
    assert standby.followers[0].closed, "a standby stops reading the log"
    assert not standby.service.state.cluster.workloads, "and lets its state go"
    for _ in range(3):
        assert standby.service.step() is None
    assert standby.slept == [0.2, 0.2, 0.2], "it waits between looks at the lease, no spin"
    assert len(standby.followers) == 1

    leader = Instance(log, store, SoleInstance())
    leader.service.step()
    assert _placed(log) == ["w1"]
    assert leader.service.checkpoints is not None
    checkpointed = dict(leader.service.follower.positions)
    leader.service.checkpoints.save(leader.service.state, checkpointed)
    log.add(submitted("w2", budget="lab/a", pools=("p",), gpus=4))  # the leader dies here

    lease = standby.service.lease
    assert isinstance(lease, Lease)
    lease.ours = True
    standby.service.step()
    assert standby.resumed_from == [checkpointed], "the tail only"
    assert 0 < checkpointed[(TOPIC, 0)] < len(log.deliveries)
    assert set(standby.service.state.cluster.workloads) == {"w1", "w2"}
    assert _placed(log) == ["w1", "w2"], "w1, placed by the old leader, is not placed again"
    assert not standby.service.parked


def test_without_a_checkpoint_it_reads_the_whole_log_when_it_leads() -> None:
    log, store = Log(), Store()
    log.add(*LAB, submitted("w1", budget="lab/a", pools=("p",), gpus=4))
    standby = Instance(log, store, Lease())
    standby.service.step()
    assert standby.service.parked
    lease = standby.service.lease
    assert isinstance(lease, Lease)
    lease.ours = True
    turns = lease.turns
    standby.service.step()
    assert standby.resumed_from == []
    # the whole log, 4 facts in batches of 2: the lease just won is renewed between them
    assert lease.turns - turns >= 1 + 2
    assert len(standby.followers) == 2
    assert standby.followers[1].polls >= 1
    assert _placed(log) == ["w1"]


def test_a_leader_that_loses_the_lease_parks_and_a_warm_standby_never_does() -> None:
    log, store = Log(), Store()
    log.add(*LAB)
    leader = Instance(log, store, Lease())
    lease = leader.service.lease
    assert isinstance(lease, Lease)
    lease.ours = True
    leader.service.step()
    assert not leader.service.parked
    lease.ours = False
    leader.service.step()
    assert leader.service.parked

    warm = Instance(log, store, Lease(), warm=True)
    for _ in range(3):
        warm.service.step()
    assert not warm.service.parked
    assert not warm.followers[0].closed
    assert warm.followers[0].polls == 3
    assert warm.service.state.cluster.nodes, "a warm standby keeps folding"
