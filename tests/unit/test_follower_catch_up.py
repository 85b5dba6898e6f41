"""Catching up with a long log: a batch at a time, with no deadline but a stall (issue 23).

A fixed 60 s deadline made a scheduler restart fail for ever once the log held more than about
an hour of a fleet's history on a small machine, and collecting the whole log in one list
before folding took gigabytes. ``Follower.catch_up_in_batches`` hands out the log as it is
merged and gives up only when nothing has been fetched for its stall timeout."""

from __future__ import annotations

import itertools
import time
from datetime import UTC, datetime

import pytest

from events import TopicKind, Topics
from events.envelope import new_event
from events.models import NodeUp
from events.positions import Delivery, Position
from services.bus.follower import Follower

TOPICS = Topics(prefix="t.")
TOPIC = TOPICS.name(TopicKind.CLUSTER)
T0 = datetime(2026, 11, 2, tzinfo=UTC)


class SlowSource:
    """One partition of ``records`` records, ``per_fetch`` per fetch, each fetch taking
    ``fetch_s``; after ``stall_after`` records it never delivers again."""

    def __init__(
        self, records: int, per_fetch: int, fetch_s: float, stall_after: int | None = None
    ) -> None:
        self.records, self.per_fetch, self.fetch_s = records, per_fetch, fetch_s
        self.stall_after = records if stall_after is None else stall_after
        self.offset = 0

    def partitions(self) -> list[tuple[str, int]]:
        return [(TOPIC, 0)]

    def fetch(self, timeout_s: float, max_records: int) -> list[Delivery | Position]:
        time.sleep(self.fetch_s)
        end = min(self.offset + min(self.per_fetch, max_records), self.stall_after)
        out: list[Delivery | Position] = []
        for offset in range(self.offset, end):
            envelope = new_event(NodeUp(node=f"n{offset}"), source="tests", time=T0)
            out.append(Delivery(envelope, Position(TOPIC, 0, offset)))
        self.offset = end
        return out

    def end_offsets(self, cached: bool = False) -> dict[tuple[str, int], int]:
        return {(TOPIC, 0): self.records}

    def close(self) -> None:
        pass


def test_a_log_longer_than_the_stall_timeout_is_read_to_its_end_a_batch_at_a_time() -> None:
    source = SlowSource(records=600, per_fetch=20, fetch_s=0.005)
    follower = Follower(source, TOPICS)
    started = time.monotonic()
    batches = list(follower.catch_up_in_batches(stall_timeout_s=0.05))
    assert time.monotonic() - started > 0.05  # longer than the stall timeout, all the same
    assert sum(len(b) for b in batches) == 600
    assert len(batches) > 1  # handed out as merged, never all at once
    offsets = [d.position.offset for d in itertools.chain.from_iterable(batches)]
    assert offsets == list(range(600))
    assert follower.positions[(TOPIC, 0)] == 600


def test_a_log_that_stops_coming_gives_up_after_the_stall_timeout() -> None:
    follower = Follower(SlowSource(records=100, per_fetch=10, fetch_s=0.001, stall_after=30))
    batches = follower.catch_up_in_batches(stall_timeout_s=0.2)
    read = sum(len(next(batches)) for _ in range(3))
    assert read == 30
    with pytest.raises(TimeoutError, match="nothing came from the log"):
        next(batches)


class QueuedBehindBacklog:
    """Two partitions as a client with a full queue delivers them: the big one's backlog
    (``big`` records, ``per_fetch`` at a time, each fetch taking ``fetch_s``) comes first, and
    the small one's only after it; both hold records of the same span of event times."""

    SMALL = (TOPIC, 1)

    def __init__(self, big: int, small: int, per_fetch: int, fetch_s: float) -> None:
        self.big, self.small, self.per_fetch, self.fetch_s = big, small, per_fetch, fetch_s
        self.offsets = {(TOPIC, 0): 0, self.SMALL: 0}

    def partitions(self) -> list[tuple[str, int]]:
        return [(TOPIC, 0), self.SMALL]

    def _record(self, key: tuple[str, int], offset: int, of: int) -> Delivery:
        at = T0.timestamp() + 3600 * offset / of
        envelope = new_event(
            NodeUp(node=f"n{key[1]}-{offset}"),
            source="tests",
            time=datetime.fromtimestamp(at, UTC),
        )
        return Delivery(envelope, Position(key[0], key[1], offset))

    def fetch(self, timeout_s: float, max_records: int) -> list[Delivery | Position]:
        time.sleep(self.fetch_s)
        key, of = ((TOPIC, 0), self.big)
        if self.offsets[key] >= self.big:
            key, of = self.SMALL, self.small
        start = self.offsets[key]
        end = min(start + self.per_fetch, of)
        self.offsets[key] = end
        return [self._record(key, offset, of) for offset in range(start, end)]

    def end_offsets(self, cached: bool = False) -> dict[tuple[str, int], int]:
        return {(TOPIC, 0): self.big, self.SMALL: self.small}

    def close(self) -> None:
        pass


def test_a_partition_queued_behind_a_long_backlog_is_waited_for_not_merged_without() -> None:
    """Issue 23's bench: during a long catch-up the follower merged without a budgets partition
    whose records had simply not come yet (``fetched=0``), facts came out of order and the
    API's fold rejected placements. Records still arriving are not a stall."""
    source = QueuedBehindBacklog(big=400, small=10, per_fetch=20, fetch_s=0.01)
    follower = Follower(source, TOPICS, stall_s=0.05)  # the backlog takes 0.2 s
    merged = list(itertools.chain.from_iterable(follower.catch_up_in_batches()))
    assert len(merged) == 410
    times = [d.envelope.epoch_seconds for d in merged]
    assert times == sorted(times)


class PausableBacklog(QueuedBehindBacklog):
    """The same two partitions, from a source that can pause: a paused partition delivers
    nothing until resumed (Kafka drops what it fetched ahead and fetches it again)."""

    def __init__(self, big: int, small: int, per_fetch: int, fetch_s: float) -> None:
        super().__init__(big, small, per_fetch, fetch_s)
        self.paused: set[tuple[str, int]] = set()
        self.pauses = 0

    def pause(self, keys: list[tuple[str, int]]) -> None:
        self.paused.update(keys)
        self.pauses += 1

    def resume(self, keys: list[tuple[str, int]]) -> None:
        self.paused.difference_update(keys)

    def fetch(self, timeout_s: float, max_records: int) -> list[Delivery | Position]:
        time.sleep(self.fetch_s)
        for key, of in (((TOPIC, 0), self.big), (self.SMALL, self.small)):
            if key in self.paused or self.offsets[key] >= of:
                continue
            start = self.offsets[key]
            end = min(start + self.per_fetch, of)
            self.offsets[key] = end
            return [self._record(key, offset, of) for offset in range(start, end)]
        return []


def test_a_partition_whose_buffer_is_full_while_the_merge_waits_is_paused() -> None:
    """Issue 23: a first start on a week of a fleet held gigabytes of decoded records that the
    merge could not hand out yet. A partition holding ``MAX_BUFFERED`` records is paused while
    the merge waits on another, so what waits stays bounded, and the merge is still exact."""
    from services.bus import follower as module

    source = PausableBacklog(big=4 * module.MAX_BUFFERED, small=10, per_fetch=100, fetch_s=0.0)
    follower = Follower(source, TOPICS, stall_s=5.0)
    merged: list[Delivery] = []
    peak = 0
    for batch in follower.catch_up_in_batches():
        merged += batch
        peak = max(peak, follower.buffered)
    assert source.pauses >= 1
    assert peak <= module.MAX_BUFFERED + 100, "without the pause: the whole backlog, 4x that"
    assert len(merged) == 4 * module.MAX_BUFFERED + 10
    times = [d.envelope.epoch_seconds for d in merged]
    assert times == sorted(times)
    assert follower.buffered == 0
    assert not source.paused, "resumed once drained"
