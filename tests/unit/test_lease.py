"""The lease's pure state machine, driven by the records of its topic and a fake clock.

Each test plays the one partition by hand: what an instance appends is "in the log" only once
the test feeds it back (to every instance, in the same order), which is how a race is decided.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable

import pytest

from services.scheduler.lease import (
    WHOLE,
    LeaseCore,
    LeaseRecord,
    LeaseSet,
    LeaseTiming,
    LogLease,
    LogPoolLeases,
    SoleInstance,
)

TIMING = LeaseTiming(ttl_s=10.0, renew_s=2.0, margin_s=3.0)


def _caught_up() -> bool:
    return True


class Log:
    """The lease partition and the instances that read it."""

    def __init__(self, *names: str) -> None:
        self.records: list[LeaseRecord] = []
        self.cores = {name: LeaseCore(name, TIMING, now=0.0) for name in names}

    def append(self, record: LeaseRecord, now: float, sent_at: float | None = None) -> None:
        """The broker appends ``record``: its sender is acknowledged, everyone reads it."""
        self.records.append(record)
        self.cores[record.holder].acknowledged(record, now if sent_at is None else sent_at)
        for core in self.cores.values():
            core.read(record, now)

    def tick(self, name: str, now: float) -> LeaseRecord | None:
        """``name`` asks what to append at ``now`` and the broker appends it at once."""
        record = self.cores[name].due(now, _caught_up)
        if record is not None:
            self.append(record, now)
        return record


def test_the_first_instance_on_an_empty_log_claims_epoch_one_and_leads() -> None:
    log = Log("a")
    claim = log.tick("a", 0.0)
    assert claim == LeaseRecord("claim", "a", 1)
    core = log.cores["a"]
    assert core.leading(0.1)
    assert core.epoch == 1
    assert core.owner == "a"


def test_no_claim_before_the_topic_is_read_to_its_end() -> None:
    core = LeaseCore("a", TIMING, now=0.0)
    assert core.due(0.0, lambda: False) is None
    assert core.due(0.0, _caught_up) == LeaseRecord("claim", "a", 1)


def test_a_claim_not_yet_read_back_does_not_lead() -> None:
    core = LeaseCore("a", TIMING, now=0.0)
    claim = core.due(0.0, _caught_up)
    assert claim is not None
    core.acknowledged(claim, 0.0)
    assert not core.leading(0.1), "appended, but not read back: the log has not said who won"
    core.read(claim, 0.2)
    assert core.leading(0.2)


def test_the_first_claim_of_an_epoch_wins_a_race_and_the_later_one_loses() -> None:
    log = Log("a", "b")
    a_claim = log.cores["a"].due(0.0, _caught_up)
    b_claim = log.cores["b"].due(0.0, _caught_up)
    assert a_claim == LeaseRecord("claim", "a", 1)
    assert b_claim == LeaseRecord("claim", "b", 1)
    log.append(b_claim, 0.01)  # b's reached the partition first
    log.append(a_claim, 0.02)
    assert log.cores["b"].leading(0.1)
    assert not log.cores["a"].leading(0.1)
    assert log.cores["a"].owner == "b"
    # The loser waits for the winner's renewals like any standby: no claim while they come.
    for second in range(1, 30):
        log.tick("b", float(second))
        assert log.tick("a", float(second)) is None


def test_the_leader_renews_every_renew_s_and_a_reading_standby_never_claims() -> None:
    log = Log("a", "b")
    log.tick("a", 0.0)
    renewals = []
    for tenth in range(1, 600):
        now = tenth / 10
        record = log.tick("a", now)
        if record is not None:
            renewals.append((now, record))
        assert log.tick("b", now) is None
        assert log.cores["a"].leading(now)
    assert [r for _, r in renewals][:2] == [LeaseRecord("renew", "a", 1)] * 2
    gaps = [b - a for (a, _), (b, _) in itertools.pairwise(renewals)]
    assert all(gap == pytest.approx(2.0, abs=0.11) for gap in gaps)


def test_a_dead_leader_is_replaced_after_ttl_s_without_a_renewal() -> None:
    log = Log("a", "b")
    log.tick("a", 0.0)
    log.tick("a", 2.0)  # its last renewal, read by b at 2.0; then it dies
    for tenth in range(21, 200):
        now = tenth / 10
        record = log.tick("b", now)
        if record is not None:
            break
    assert record == LeaseRecord("claim", "b", 2)
    assert now == pytest.approx(12.0)
    assert log.cores["b"].leading(now)
    assert log.cores["b"].epoch == 2


def test_a_stalled_leader_fences_itself_before_a_standby_may_claim() -> None:
    log = Log("a", "b")
    log.tick("a", 0.0)
    log.tick("a", 2.0)  # the last renewal acknowledged: sent at 2.0
    core = log.cores["a"]
    assert core.leading(2.0 + TIMING.ttl_s - TIMING.margin_s - 0.01)
    assert not core.leading(2.0 + TIMING.ttl_s - TIMING.margin_s), "self-fenced by its own clock"
    # b read the renewal at 2.0 at the earliest, so it cannot claim before 12.0: 3 s later.
    assert log.tick("b", 11.9) is None
    assert log.tick("b", 12.0) == LeaseRecord("claim", "b", 2)


def test_renewals_that_are_appended_but_not_acknowledged_do_not_keep_a_leader() -> None:
    core = LeaseCore("a", TIMING, now=0.0)
    claim = core.due(0.0, _caught_up)
    assert claim is not None
    core.acknowledged(claim, 0.0)
    core.read(claim, 0.0)
    for second in (2.0, 4.0, 6.0):
        renewal = core.due(second, _caught_up)
        assert renewal is not None
        core.read(renewal, second)  # in the log, but the acknowledgement never came
    assert not core.leading(7.0)
    late = core.due(8.0, _caught_up)
    assert late is not None
    core.acknowledged(late, 8.0)
    assert core.leading(8.5), "an acknowledged renewal of its epoch makes it lead again"


def test_a_leader_is_deposed_as_soon_as_it_reads_a_higher_epoch() -> None:
    log = Log("a", "b")
    log.tick("a", 0.0)
    log.tick("a", 2.0)
    # b's clock ran out (say a's renewals were slow to reach it) and its claim is in the log.
    log.append(LeaseRecord("claim", "b", 2), 3.0)
    assert not log.cores["a"].leading(3.0)
    assert log.cores["a"].owner == "b"
    # A renewal a sends before it read the claim is of the old epoch: it changes nothing.
    log.append(LeaseRecord("renew", "a", 1), 3.1)
    assert log.cores["b"].leading(3.2)
    assert not log.cores["a"].leading(3.2)
    assert log.cores["a"].due(3.3, _caught_up) is None, "a standby now, waiting on b"


def test_a_claim_that_never_comes_back_is_made_again_after_ttl_s() -> None:
    core = LeaseCore("a", TIMING, now=0.0)
    assert core.due(0.0, _caught_up) == LeaseRecord("claim", "a", 1)
    assert core.due(5.0, _caught_up) is None
    assert core.due(10.0, _caught_up) == LeaseRecord("claim", "a", 1)


def test_a_new_instance_waits_a_full_ttl_for_an_owner_it_has_read() -> None:
    log = Log("a")
    log.tick("a", 0.0)
    late = LeaseCore("c", TIMING, now=100.0)  # starts later and reads the whole topic
    for record in log.records:
        late.read(record, 100.0)
    assert late.owner == "a"
    assert late.due(109.9, _caught_up) is None
    assert late.due(110.0, _caught_up) == LeaseRecord("claim", "c", 2)


def test_lease_records_decode_strictly() -> None:
    record = LeaseRecord("renew", "host:1:ab", 7)
    assert LeaseRecord.decode(record.encode()) == record
    for bad in (b"", b"{}", b"[1]", b'{"kind":"renew","holder":"x","epoch":0}',
                b'{"kind":"steal","holder":"x","epoch":1}',
                b'{"kind":"claim","holder":"","epoch":1}',
                b'{"kind":"claim","holder":"x","epoch":true}', None):  # fmt: skip
        assert LeaseRecord.decode(bad) is None


def test_timing_is_checked() -> None:
    with pytest.raises(ValueError, match="renew_s"):
        LeaseTiming(ttl_s=5.0, renew_s=4.0, margin_s=2.0)


def test_a_sole_instance_always_leads_in_its_epoch() -> None:
    assert SoleInstance().held()
    assert SoleInstance().epoch == 0
    assert SoleInstance(epoch=3).epoch == 3


# -- leases by name: the whole-cluster lease and a lease per pool ---------------------------------


def test_a_record_names_its_lease_and_an_old_record_is_the_whole_clusters() -> None:
    old = b'{"kind":"renew","holder":"h:1:ab","epoch":7}'  # as written before names existed
    assert LeaseRecord.decode(old) == LeaseRecord("renew", "h:1:ab", 7, WHOLE)
    assert LeaseRecord("renew", "h:1:ab", 7).encode() == old, "whole-cluster records unchanged"
    pool = LeaseRecord("claim", "h:1:ab", 3, "gpu-a:1")
    assert LeaseRecord.decode(pool.encode()) == pool
    assert LeaseRecord("renew", "h", 7).key() == b"7", "the whole lease keeps its old key"
    assert pool.key() == b"gpu-a:1:3", "compacted per lease and epoch"
    for bad in (b'{"kind":"renew","holder":"x","epoch":1,"name":""}',
                b'{"kind":"renew","holder":"x","epoch":1,"name":3}'):  # fmt: skip
        assert LeaseRecord.decode(bad) is None


def test_a_core_ignores_the_records_of_other_leases() -> None:
    core = LeaseCore("a", TIMING, now=0.0, name="p1")
    core.read(LeaseRecord("claim", "b", 4, "p2"), 0.0)
    core.read(LeaseRecord("claim", "b", 9), 0.0)
    assert (core.epoch, core.owner) == (0, None)
    assert core.due(0.0, _caught_up) == LeaseRecord("claim", "a", 1, "p1")


class Pools:
    """The lease partition and the :class:`LeaseSet` of each instance that reads it."""

    def __init__(self, **preferred: tuple[str, ...]) -> None:
        self.records: list[LeaseRecord] = []
        self.sets = {
            name: LeaseSet(name, TIMING, 0.0, whole=False, preferred=pools)
            for name, pools in preferred.items()
        }
        self.dead: set[str] = set()

    def append(self, record: LeaseRecord, now: float) -> None:
        self.records.append(record)
        self.sets[record.holder].acknowledged(record, now)
        for leases in self.sets.values():
            leases.read(record, now)

    def tick(self, now: float, seen: tuple[str, ...] = ()) -> None:
        """Every live instance sees ``seen`` pools, and appends what is due at once."""
        for name, leases in self.sets.items():
            if name in self.dead:
                continue
            leases.track(seen, now)
            for record in leases.due(now, _caught_up):
                self.append(record, now)

    def held(self, name: str, now: float) -> dict[str, int]:
        return self.sets[name].held(now)


ALL = ("p1", "p2", "p3", "p4")


def test_each_instance_leads_its_preferred_pools_and_waits_for_the_others() -> None:
    log = Pools(a=("p1", "p2"), b=("p3", "p4"))
    for tenth in range(0, 600):
        now = tenth / 10
        log.tick(now, ALL)
        if now >= 0.1:
            assert log.held("a", now) == {"p1": 1, "p2": 1}
            assert log.held("b", now) == {"p3": 1, "p4": 1}
    claims = [r for r in log.records if r.kind == "claim"]
    assert sorted((r.name, r.holder) for r in claims) == [
        ("p1", "a"), ("p2", "a"), ("p3", "b"), ("p4", "b")
    ], "nobody claims a pool whose preferred owner renews it"  # fmt: skip


def test_a_pool_nobody_prefers_is_adopted_after_adopt_s_and_only_once() -> None:
    log = Pools(a=("p1",), b=("p2",))
    adopted_at = None
    for tenth in range(0, 400):
        now = tenth / 10
        log.tick(now, ("p1", "p2", "p9"))
        owners = [n for n in ("a", "b") if "p9" in log.held(n, now)]
        if owners and adopted_at is None:
            adopted_at = now
        assert len(owners) <= 1
    assert adopted_at == pytest.approx(2 * TIMING.ttl_s, abs=0.11)
    assert [r.holder for r in log.records if r.name == "p9" and r.kind == "claim"] != []
    winners = {r.holder for r in log.records if r.name == "p9" and r.kind == "renew"}
    assert len(winners) == 1, "the first claim of the epoch won, the other instance stood by"


def test_a_dead_instances_pools_move_to_the_survivor_after_adopt_s() -> None:
    log = Pools(a=("p1", "p2"), b=("p3", "p4"))
    for tenth in range(0, 100):
        log.tick(tenth / 10, ALL)
    assert log.held("b", 9.9) == {"p3": 1, "p4": 1}
    log.dead.add("b")  # kill -9: it stops renewing, and says nothing
    last = max(i for i, r in enumerate(log.records) if r.holder == "b")
    last_renewal = 9.9 - 9.9 % TIMING.renew_s  # when b's last record went out (and was read)
    taken = None
    for tenth in range(100, 400):
        now = tenth / 10
        log.tick(now, ALL)
        if taken is None and "p3" in log.held("a", now):
            taken = now
    assert taken is not None
    assert taken - last_renewal == pytest.approx(2 * TIMING.ttl_s, abs=0.21)
    assert log.held("a", 39.9) == {"p1": 1, "p2": 1, "p3": 2, "p4": 2}
    assert all(r.holder == "a" for r in log.records[last + 1 :])


def test_a_preferred_pool_held_by_another_is_not_taken_back() -> None:
    """No rebalancing: a preferred owner that starts late finds its pools adopted, and leaves
    them to their holder while it renews (a limit; restart the adopter to hand them back)."""
    log = Pools(a=("p1",))
    for tenth in range(0, 300):
        log.tick(tenth / 10, ("p1", "p2"))
    assert log.held("a", 29.9) == {"p1": 1, "p2": 1}
    log.sets["b"] = LeaseSet("b", TIMING, 30.0, whole=False, preferred=("p2",))
    for record in log.records:
        log.sets["b"].read(record, 30.0)
    for tenth in range(300, 600):
        log.tick(tenth / 10, ("p1", "p2"))
    assert log.held("b", 59.9) == {}
    assert log.held("a", 59.9) == {"p1": 1, "p2": 1}


def test_epochs_are_per_lease_and_a_pool_claim_goes_above_the_whole_clusters() -> None:
    """A log that ran a whole-cluster scheduler (epoch 5 fences every pool at 5) and then runs
    a lease per pool: the pools' first epochs are 6, or their commands would be fenced."""
    leases = LeaseSet("a", TIMING, 0.0, whole=False, preferred=("p1", "p2"))
    leases.read(LeaseRecord("claim", "old", 5), 0.0)
    leases.read(LeaseRecord("renew", "old", 5), 0.0)
    leases.read(LeaseRecord("claim", "z", 2, "p2"), 0.0)  # an older per-pool run
    due = leases.due(20.0, _caught_up)
    assert due == [LeaseRecord("claim", "a", 6, "p1"), LeaseRecord("claim", "a", 6, "p2")]
    for record in due:
        leases.acknowledged(record, 20.0)
        leases.read(record, 20.0)
    assert leases.held(20.1) == {"p1": 6, "p2": 6}
    assert WHOLE not in leases.held(20.1), "a per-pool instance never claims the whole lease"
    # ... and back: a whole-cluster claim goes above every pool's epoch.
    whole = LeaseSet("c", TIMING, 0.0)
    for record in [LeaseRecord("claim", "old", 5), *due]:
        whole.read(record, 0.0)
    assert whole.due(10.0, _caught_up) == [LeaseRecord("claim", "c", 7)]


def test_a_whole_cluster_set_competes_for_the_whole_lease_only() -> None:
    leases = LeaseSet("a", TIMING, 0.0)
    leases.track(["p1", "p2"], 0.0)
    assert leases.competing == {WHOLE}
    assert leases.due(0.0, _caught_up) == [LeaseRecord("claim", "a", 1)]


def test_caught_up_is_asked_once_per_turn_whatever_the_claims() -> None:
    asked = []

    def caught_up() -> bool:
        asked.append(1)
        return True

    leases = LeaseSet("a", TIMING, 0.0, whole=False, preferred=("p1", "p2", "p3"))
    assert len(leases.due(0.0, caught_up)) == 3
    assert len(asked) == 1


def test_lease_set_arguments_are_checked() -> None:
    with pytest.raises(ValueError, match="preferred"):
        LeaseSet("a", TIMING, 0.0, whole=False, preferred=(WHOLE,))
    with pytest.raises(ValueError, match="adopt_s"):
        LeaseSet("a", TIMING, 0.0, whole=False, adopt_s=TIMING.ttl_s / 2)


# -- the drivers over a lease log ------------------------------------------------------------
class MemoryLeaseLog:
    """One partition shared by every driver, in memory: what a driver appends is acknowledged,
    and is read by every driver (its own included), at the next read, like Kafka's."""

    def __init__(self) -> None:
        self.values: list[bytes | None] = []

    def reader(self) -> MemoryLeaseLog.Reader:
        return MemoryLeaseLog.Reader(self)

    class Reader:
        def __init__(self, partition: MemoryLeaseLog) -> None:
            self.partition = partition
            self.next = 0
            self.acks: list[Callable[[], None]] = []
            self.closed = False

        def read(self) -> list[bytes | None]:
            acks, self.acks = self.acks, []
            for ack in acks:
                ack()
            values = self.partition.values[self.next :]
            self.next = len(self.partition.values)
            return values

        def caught_up(self) -> bool:
            return self.next >= len(self.partition.values)

        def append(self, key: bytes, value: bytes, on_appended: Callable[[], None]) -> None:
            self.partition.values.append(value)
            self.acks.append(on_appended)

        def close(self) -> None:
            self.closed = True


def test_of_two_drivers_on_one_log_the_first_claim_leads_and_junk_is_skipped() -> None:
    partition = MemoryLeaseLog()
    partition.values.append(b"not a lease record")
    now = [0.0]
    log_a = partition.reader()
    a = LogLease(log_a, timing=TIMING, holder="a", clock=lambda: now[0])
    b = LogLease(partition.reader(), timing=TIMING, holder="b", clock=lambda: now[0])
    assert not a.held()  # claims epoch 1: led once the claim is read back and acknowledged
    assert not b.held()  # reads a's claim first: a standby
    assert a.held()
    assert not b.held()
    assert (a.epoch, b.epoch, a.skipped, b.skipped) == (1, 1, 1, 1)
    now[0] = 11.0  # a stalls past its lease: b claims; a fences itself
    assert not b.held()
    assert b.held()
    assert not a.held()
    assert (a.epoch, b.epoch) == (2, 2)
    a.close()
    assert log_a.closed


def test_pool_leases_over_one_log_share_the_pools_out_by_preference() -> None:
    partition = MemoryLeaseLog()
    a, b = (
        LogPoolLeases(
            partition.reader(), preferred=pools, timing=TIMING, holder=holder, clock=lambda: 0.0
        )
        for holder, pools in (("a", ("p1",)), ("b", ("p2",)))
    )
    for leases in (a, b):
        leases.track(["p1", "p2"])
    for _ in range(2):  # the claims, then reading them back
        a.held_pools()
        b.held_pools()
    assert a.held_pools() == {"p1": 1}
    assert b.held_pools() == {"p2": 1}
    assert a.epoch("p2") == 1
