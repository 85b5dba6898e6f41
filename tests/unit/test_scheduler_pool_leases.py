"""The scheduler service with a lease per pool: it passes for the pools it leads only, stamps
each command with its pool's epoch, states the liveness of its own pools' nodes only, catches up
before acting on a pool it gains, and publishes nothing of a pass that outlived a pool's lease."""

from __future__ import annotations

from collections.abc import Iterable, Iterator

import pytest

from events.models import (
    BudgetCreated,
    GpuHeartbeat,
    GpuReading,
    NodeDown,
    NodeRegistered,
    PlaceCommand,
)
from events.positions import Delivery
from services.scheduler.host import SchedulerConfig, SchedulerService
from tests.factories import submitted
from tests.unit.test_pass_pacing import Clock, Published, ScriptedFollower


class FakePoolLeases:
    """Leads what the test says; counts the turns."""

    def __init__(self) -> None:
        self.leading: dict[str, int] = {}
        self.tracked: set[str] = set()
        self.turns = 0
        #: Pools lost on a given turn (a lease that ran out while a pass ran).
        self.lose: dict[int, set[str]] = {}

    def track(self, pools: Iterable[str]) -> None:
        self.tracked.update(pools)

    def held_pools(self) -> dict[str, int]:
        self.turns += 1
        for pool in self.lose.pop(self.turns, set()):
            self.leading.pop(pool, None)
        return dict(self.leading)

    def epoch(self, pool: str) -> int:
        return self.leading.get(pool, 0)

    def close(self) -> None:
        pass


class CountingFollower(ScriptedFollower):
    def __init__(self, clock: Clock) -> None:
        super().__init__(clock)
        self.catch_ups = 0

    def catch_up_in_batches(self, stall_timeout_s: float = 60.0) -> Iterator[list[Delivery]]:
        self.catch_ups += 1
        return iter(())


LAB = (
    BudgetCreated(budget="lab", created_by="admin"),
    BudgetCreated(budget="lab/a", created_by="admin"),
    *(
        NodeRegistered(node=f"n{pool}", cluster="c", pool=pool, gpus=8, gpu_type="x")
        for pool in ("p1", "p2")
    ),
)


def _service() -> tuple[SchedulerService, CountingFollower, Clock, Published, FakePoolLeases]:
    clock = Clock()
    follower = CountingFollower(clock)
    published = Published()
    leases = FakePoolLeases()
    service = SchedulerService(
        lambda: follower,
        published,
        pool_leases=leases,
        config=SchedulerConfig(poll_s=0.2, min_pass_interval_s=0.0, heartbeat_timeout_s=30),
        clock=clock,
        pace_clock=clock,
    )
    follower.batches.append(list(LAB))
    return service, follower, clock, published, leases


def _commands(published: Published) -> list[tuple[str, str, int]]:
    return [
        (e.data.workload_id, e.data.pool, e.data.epoch)
        for e in published.events
        if isinstance(e.data, PlaceCommand)
    ]


def test_it_schedules_the_pools_it_leads_with_their_epochs() -> None:
    service, follower, clock, published, leases = _service()
    service.step()
    assert leases.tracked == {"p1", "p2"}, "it competes for every pool it has seen"
    assert service.passes == 0, "no pool led: no pass"
    leases.leading = {"p1": 3}
    follower.batches.append(
        [submitted(f"w-{p}", budget="lab/a", pools=(p,), gpus=1) for p in ("p1", "p2")]
    )
    catch_ups = follower.catch_ups
    service.step()
    assert follower.catch_ups == catch_ups + 1, "a pool gained: the log is read to its end first"
    assert _commands(published) == [("w-p1", "p1", 3)]
    leases.leading["p2"] = 7
    clock.now += 1
    service.step()
    assert follower.catch_ups == catch_ups + 2
    assert _commands(published) == [("w-p1", "p1", 3), ("w-p2", "p2", 7)]
    ids = [e.id for e in published.events]
    assert len(ids) == len(set(ids))


def test_it_declares_down_only_the_nodes_of_its_pools() -> None:
    service, follower, clock, published, leases = _service()
    leases.leading = {"p2": 1}
    service.step()
    clock.now += 31  # both nodes silent since registration
    service.step()
    down = [e.data.node for e in published.events if isinstance(e.data, NodeDown)]
    assert down == ["np2"]
    beat = GpuHeartbeat(
        node="np1",
        cluster="c",
        sequence=1,
        gpus=(GpuReading(index=0, utilisation_pct=0, memory_used_bytes=0),),
    )
    follower.batches.append([beat])
    service.step()
    assert [e.data.node for e in published.events if isinstance(e.data, NodeDown)] == ["np2"]


def test_a_pass_that_outlived_a_pools_lease_publishes_nothing() -> None:
    service, follower, clock, published, leases = _service()
    leases.leading = {"p1": 1, "p2": 1}
    service.step()
    follower.batches.append([submitted("w", budget="lab/a", pools=("p1",), gpus=1)])
    turns = leases.turns
    leases.lose[turns + 2] = {"p2"}  # lost while the pass ran: seen when asked after it
    clock.now += 1
    service.step()
    assert leases.turns == turns + 2, "asked on the turn, and again after the pass"
    assert _commands(published) == []
    assert service.lease_lost_passes == 1
    # The state was rebuilt from the log (which this follower hands out again); p1 alone is
    # still led: the next pass places w, in p1's epoch.
    follower.batches.append([*LAB, submitted("w", budget="lab/a", pools=("p1",), gpus=1)])
    clock.now += 1
    service.step()
    assert _commands(published) == [("w", "p1", 1)]


def test_lease_and_pool_leases_are_one_or_the_other() -> None:
    from services.scheduler.lease import SoleInstance

    with pytest.raises(ValueError, match="one or the other"):
        SchedulerService(
            lambda: ScriptedFollower(Clock()),
            Published(),
            lease=SoleInstance(),
            pool_leases=FakePoolLeases(),
        )
