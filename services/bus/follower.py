"""Following topics from their first offset, without a consumer group, in event-time order.

For every reader whose state is a fold rebuilt on every start (the scheduler, the API's view,
the agents): there is nothing to commit, every instance must read everything, and a reader must
know when it has caught up with the log before it may act on it or say it is current.

Kafka orders a partition, not the log: a consumer sees the partitions of several topics
interleaved as its fetches happen to return, so a placement could be folded before the
registration of its node, or a whole backlog of one topic before another's. The one ordering
rule of every such reader is therefore :class:`TimeMerge`: partitions are merged by event time,
each kept in offset order, and a record is handed out only when every partition has either a
record buffered or has been read to its end. A reader that has caught up thus folded the log
in the order of the offline fold of the same log sorted by event time, however the fetches
interleaved and however often it restarted. What the merge cannot order (facts at equal times,
or produced after the end was read with an earlier event time) is left to the fold's holding of
early facts (:class:`~projections.errors.MissingFact` in ``LiveState``).

Records are checked as every consumer checks them (:func:`~services.bus.records.check`:
decodes, on its type's topic, keyed by its subject). Those that fail are skipped and counted
here (their position still advances), never handed out: the consumers that own them (the
projector, the charging host) dead-letter them. A follower used to check only that a record
decoded, so the scheduler placed a valid submission produced with another key or onto another
topic, which every dead-lettering consumer had rejected.
"""

from __future__ import annotations

import heapq
import logging
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any, Protocol, runtime_checkable

from confluent_kafka import Consumer, KafkaException, Message
from confluent_kafka import TopicPartition as KafkaTopicPartition

from events import TopicKind, Topics
from events.fact_order import TOPIC_RANK
from events.positions import Delivery, Position, TopicPartition
from events.registry import EventRegistry
from services.bus.connection import client_config
from services.bus.export import watermarks
from services.bus.fatal import FatalLatch
from services.bus.records import Rejected, check, raw_record, skip
from services.metrics import lag as lag_metrics

log = logging.getLogger(__name__)

OrderKey = tuple[float, int, int, str, int]

#: On equal times, what a fact can depend on comes first (a node before a placement on it).
_KIND_RANK = TOPIC_RANK  # the canonical order's topic rank (events/fact_order.py)


def time_order(topics: Topics) -> Callable[[Delivery], OrderKey]:
    """The merge order: event time, then what a fact can depend on first, then the partition
    (so that the order is total and the same on every read)."""
    last = len(_KIND_RANK)

    def order(delivery: Delivery) -> OrderKey:
        kind = topics.kind_of(delivery.position.topic)
        rank = _KIND_RANK.get(kind, last) if kind is not None else last
        return (
            delivery.envelope.time.timestamp(),
            rank,
            # a parent budget before its children
            delivery.envelope.subject.count("/") if kind is TopicKind.BUDGETS else 0,
            delivery.position.topic,
            delivery.position.partition,
        )

    return order


def in_time_order(deliveries: list[Delivery], topics: Topics) -> list[Delivery]:
    """Interleave partitions by event time, keeping each partition's own order (a producer's
    skewed clock cannot reorder its own events). The offline form of :class:`TimeMerge`."""
    by_partition: dict[TopicPartition, list[Delivery]] = {}
    for delivery in deliveries:
        key = (delivery.position.topic, delivery.position.partition)
        by_partition.setdefault(key, []).append(delivery)
    if len(by_partition) <= 1:
        return deliveries
    order = time_order(topics)
    return list(heapq.merge(*(by_partition[k] for k in sorted(by_partition)), key=order))


#: Records a partition may hold in the merge's buffer while the merge waits on another
#: (:meth:`Follower._flow_control`).
MAX_BUFFERED = 500


class TimeMerge:
    """Partitions merged by event time, up to each partition's end.

    Records are buffered per partition as they are fetched. The earliest head is handed out
    only while no partition is *blocking*: empty here but not yet read to its known end (its
    next record, still on the broker, could be earlier). A partition read to its end does not
    block, so the live tail flows; backlogs are merged exactly.
    """

    def __init__(self, topics: Topics) -> None:
        self._order = time_order(topics)
        self._buffers: dict[TopicPartition, deque[Delivery]] = {}
        #: Next offset read from the log, per partition (skipped records included).
        self.fetched: dict[TopicPartition, int] = {}
        #: The end of each partition as last known.
        self.ends: dict[TopicPartition, int] = {}

    def track(self, key: TopicPartition, start: int = 0) -> None:
        self._buffers.setdefault(key, deque())
        self.fetched.setdefault(key, start)

    def add(self, delivery: Delivery) -> None:
        key = (delivery.position.topic, delivery.position.partition)
        self.track(key)
        self._buffers[key].append(delivery)
        self.fetched[key] = max(self.fetched[key], delivery.position.offset + 1)

    def skip(self, position: Position) -> None:
        """A record that is not a valid event was read: the partition moves past it."""
        key = (position.topic, position.partition)
        self.track(key)
        self.fetched[key] = max(self.fetched[key], position.offset + 1)

    def note_ends(self, ends: dict[TopicPartition, int], *, replace: bool = False) -> None:
        """Ends only grow, unless ``replace`` (the broker was asked again after a stall)."""
        for key, end in ends.items():
            self.track(key)
            self.ends[key] = end if replace else max(end, self.ends.get(key, 0))

    def blocking(self) -> list[TopicPartition]:
        return [key for key in sorted(self._buffers) if self._blocks(key)]

    def _blocks(self, key: TopicPartition) -> bool:
        return not self._buffers[key] and self.fetched[key] < self.ends.get(key, 0)

    def release(self) -> list[Delivery]:
        """Every record that can be handed out now, in merge order."""
        if self.blocking():
            return []
        heap = [(self._order(b[0]), key) for key, b in self._buffers.items() if b]
        heapq.heapify(heap)
        released: list[Delivery] = []
        while heap:
            _, key = heapq.heappop(heap)
            buffer = self._buffers[key]
            released.append(buffer.popleft())
            if buffer:
                heapq.heappush(heap, (self._order(buffer[0]), key))
            elif self._blocks(key):
                break
        return released

    def position(self, key: TopicPartition) -> int:
        """Everything before this offset has been handed out (or skipped)."""
        buffer = self._buffers.get(key)
        if buffer:
            return buffer[0].position.offset
        return self.fetched.get(key, 0)

    @property
    def buffered(self) -> int:
        return sum(len(b) for b in self._buffers.values())

    def sizes(self) -> dict[TopicPartition, int]:
        """Records waiting per partition."""
        return {key: len(buffer) for key, buffer in self._buffers.items()}


class PartitionSource(Protocol):
    """Raw reading of partitions from their first offset, each in offset order."""

    def partitions(self) -> list[TopicPartition]: ...

    def fetch(self, timeout_s: float, max_records: int) -> list[Delivery | Position]:
        """What was read next: events that pass :func:`~services.bus.records.check`, and the
        bare position of records that do not (skipped, never dead-lettered: see
        :func:`~services.bus.records.skip`)."""

    def end_offsets(self, cached: bool = False) -> dict[TopicPartition, int]:
        """The end of every partition, safe to ask from any thread; ``cached``: as the
        reading thread last saw it, without asking the broker (unknown ones left out)."""

    def close(self) -> None: ...


@runtime_checkable
class Pausable(Protocol):
    """A source that can stop fetching some partitions for a while (Kafka's pause/resume):
    what it had fetched of them ahead is dropped and fetched again on resume."""

    def pause(self, keys: list[TopicPartition]) -> None: ...

    def resume(self, keys: list[TopicPartition]) -> None: ...


class Follower:
    """A reader of whole partitions in event-time order (see the module docstring)."""

    def __init__(
        self,
        source: PartitionSource,
        topics: Topics | None = None,
        *,
        stall_s: float = 5.0,
        start: Mapping[TopicPartition, int] | None = None,
    ) -> None:
        """``start``: the first offset to hand out per partition (a checkpoint's positions; the
        source must read from there too); others from their first."""
        self.source = source
        self.topics = topics or Topics()
        self.stall_s = stall_s
        self.merge = TimeMerge(self.topics)
        #: Next offset not yet handed out, per (topic, partition).
        self.positions: dict[TopicPartition, int] = {}
        #: Records read that are not valid events there (never handed out).
        self.skipped = 0
        for key in source.partitions():
            first = (start or {}).get(key, 0)
            self.merge.track(key, first)
            self.positions[key] = first
        self.merge.note_ends(source.end_offsets())
        self._progress_at = time.monotonic()
        self._fetched = sum(self.merge.fetched.values())
        #: Partitions paused because their buffer is full while the merge waits on another.
        self._paused: set[TopicPartition] = set()
        lag_metrics.watch(self)

    def poll(self, timeout_s: float = 0.5, max_records: int = 1000) -> list[Delivery]:
        """The next records that can be handed out in merge order (maybe none)."""
        for item in self.source.fetch(timeout_s, max_records):
            if isinstance(item, Delivery):
                self.merge.add(item)
            else:
                self.skipped += 1
                self.merge.skip(item)
        self.merge.note_ends(self.source.end_offsets(cached=True))
        released = self.merge.release()
        self._flow_control()
        fetched = sum(self.merge.fetched.values())
        if released or not self.merge.buffered or fetched != self._fetched:
            # Still reading is not a stall: during a long catch-up the client's queue is full
            # of one topic's backlog and a small partition's next records come only after it,
            # so a merge blocked for seconds while records keep arriving must wait, not merge
            # without that partition (which put facts out of order and got them rejected).
            self._progress_at, self._fetched = time.monotonic(), fetched
        elif time.monotonic() - self._progress_at > self.stall_s:
            released = self._unstall()
        for key in self.positions:
            self.positions[key] = self.merge.position(key)
        return released

    def _flow_control(self) -> None:
        """Bound what waits in the merge's buffers. While the merge waits for a partition
        that is behind, the client's queue is drained of every other partition's backlog
        into them (decoded records, ten kilobytes each for a node's signal of life): a first
        start on a fleet's week held gigabytes that way. A partition holding
        ``MAX_BUFFERED`` records is paused at the source (Kafka drops what it fetched ahead
        and fetches it again on resume), so the fetches go to the one the merge waits for;
        it is resumed once its buffer is half drained."""
        source = self.source
        if not isinstance(source, Pausable):
            return
        sizes = self.merge.sizes()
        full = [
            key for key, size in sizes.items() if size >= MAX_BUFFERED and key not in self._paused
        ]
        if full and self.merge.blocking():
            source.pause(full)
            self._paused.update(full)
        drained = [key for key in self._paused if sizes.get(key, 0) < MAX_BUFFERED // 2]
        if drained:
            source.resume(drained)
            self._paused.difference_update(drained)

    def _unstall(self) -> list[Delivery]:
        """A partition blocks but its records do not come (its end was stale, or has gaps):
        ask the broker again, and treat a partition still not delivering as read to its end.
        What it delivers later is early or late by at most ``stall_s``: the fold holds it."""
        self.merge.note_ends(self.source.end_offsets(), replace=True)
        for key in self.merge.blocking():
            log.warning(
                "partition stalled below its end; merging without it",
                extra={"partition": f"{key[0]}/{key[1]}", "fetched": self.merge.fetched[key]},
            )
            self.merge.ends[key] = self.merge.fetched[key]
        self._progress_at = time.monotonic()
        return self.merge.release()

    def end_offsets(self) -> dict[TopicPartition, int]:
        """The log's current end, per partition (what "caught up" is measured against)."""
        ends = self.source.end_offsets()
        self.merge.note_ends(ends)
        return ends

    def caught_up_with(self, ends: dict[TopicPartition, int]) -> bool:
        return all(self.positions.get(key, 0) >= end for key, end in ends.items())

    def catch_up_in_batches(self, stall_timeout_s: float = 60.0) -> Iterator[list[Delivery]]:
        """Everything up to the end of the log as it is now, merged, a batch at a time: the
        reader folds each as it comes, so memory never holds the whole log (a fleet's history
        is millions of records). It gives up only when nothing has been fetched for
        ``stall_timeout_s`` (a broker that stopped answering), never because the log is long:
        a fixed deadline made every restart past an hour of a fleet's history fail for ever."""
        ends = self.end_offsets()
        progress_at, fetched = time.monotonic(), -1
        while not self.caught_up_with(ends):
            batch = self.poll(timeout_s=0.05, max_records=5000)
            now_fetched = sum(self.merge.fetched.values())
            if batch or now_fetched != fetched:
                progress_at, fetched = time.monotonic(), now_fetched
            elif time.monotonic() - progress_at > stall_timeout_s:
                raise TimeoutError(
                    f"nothing came from the log for {stall_timeout_s:g} s while catching up"
                )
            if batch:
                yield batch

    def catch_up(self, stall_timeout_s: float = 60.0) -> list[Delivery]:
        """Everything up to the end of the log as it is now, merged, in one list (for small
        logs and tests; services fold :meth:`catch_up_in_batches` as it comes)."""
        return [d for batch in self.catch_up_in_batches(stall_timeout_s) for d in batch]

    @property
    def buffered(self) -> int:
        """Records read but held back by the merge."""
        return self.merge.buffered

    def lag(self) -> dict[TopicPartition, int]:
        """Records not handed out yet per partition, up to the ends last seen (any thread: it
        copies what the reading thread last wrote, and asks the broker nothing)."""
        ends = dict(self.merge.ends)
        return {key: max(0, ends.get(key, at) - at) for key, at in dict(self.positions).items()}

    def commit(self) -> None:
        """Nothing to commit: a follower reads from the first offset on every start."""

    def close(self) -> None:
        lag_metrics.unwatch(self)
        self.source.close()


class KafkaPartitions:
    """Every partition of some topics, from the first offset, with a group that never joins
    (partitions are assigned, nothing is committed).

    Crash-only, through the one consume of every Kafka reader (:meth:`FatalLatch.consume`): a
    fatal client error raises :class:`~services.bus.fatal.FatalBusError` from the next fetch
    or end-offset query, whichever thread asks, so the service exits and is restarted; a
    follower that dropped such errors looked alive while it would never read again."""

    def __init__(
        self,
        bootstrap: str,
        names: list[str],
        timeout_s: float = 10.0,
        *,
        topics: Topics | None = None,
        registry: EventRegistry | None = None,
        eager: bool = False,
        config: Mapping[str, Any] | None = None,
        start: Mapping[TopicPartition, int] | None = None,
        only: Mapping[str, Iterable[int]] | None = None,
        on_invalid: Callable[[Rejected], Position] | None = None,
    ) -> None:
        """``config``: more settings for both clients (tests quiet their logs); ``start``: the
        offset to read each partition from (the others from their first), or the first still
        there when retention removed it (``self.start`` says which); ``only``: of the topics
        named there, only these partitions (a charging shard's); ``on_invalid``: what to do
        with a record that is not a valid event there (default: log and skip it; an owner of
        the topic dead-letters it)."""
        self.timeout_s = timeout_s
        self.topics = topics or Topics()
        self.registry = registry
        self.eager = eager
        self._on_invalid = on_invalid or (lambda rejected: skip(rejected, "follower"))
        self.fatal = FatalLatch("follower")
        self._consumer = Consumer(
            client_config(bootstrap)
            | {
                "group.id": f"fairshare-follower-{uuid.uuid4().hex}",
                "enable.auto.commit": False,
                "isolation.level": "read_committed",
                # How long the broker holds an empty fetch: new records still come back as
                # soon as they are written, and an idle reader asks twice a second instead of
                # twenty times (four idle readers at 50 ms cost the embedded broker ten points
                # of a core). End offsets have a client of their own (below).
                "fetch.wait.max.ms": 500,
                # What librdkafka fetches ahead is memory too, and a merge waiting on one
                # partition drains the rest of it into decoded buffers: 16 MiB (64 default).
                "queued.max.messages.kbytes": 16384,
                # An offset removed by retention between the start's query and the first
                # fetch: read from the first one left, never jump to the end.
                "auto.offset.reset": "earliest",
                **(config or {}),
                "error_cb": self.fatal.on_error,
            }
        )
        # End offsets are asked for from other threads too (the API's health check while its
        # consumer thread fetches): a client of their own, never assigned, one call at a time.
        self._ends_consumer = Consumer(
            client_config(bootstrap)
            | {
                "group.id": f"fairshare-ends-{uuid.uuid4().hex}",
                **(config or {}),
                "error_cb": self.fatal.on_error,
            }
        )
        self._ends_lock = threading.Lock()
        metadata = self._consumer.list_topics(timeout=timeout_s).topics
        self._partitions: list[KafkaTopicPartition] = []
        #: The offset each partition is read from: the one asked for, or the first still on
        #: the broker when retention removed it (the liveness topic's records live for days).
        self.start: dict[TopicPartition, int] = {}
        for name in names:
            if name not in metadata:
                raise RuntimeError(f"topic {name} does not exist (run the topic setup first)")
            held = sorted(metadata[name].partitions)
            if only is not None and name in only:
                wanted = set(only[name])
                held = [p for p in held if p in wanted]
            for partition in held:
                low, _ = watermarks(
                    self._ends_consumer, KafkaTopicPartition(name, partition), timeout_s
                )
                first = max((start or {}).get((name, partition), 0), low)
                self.start[(name, partition)] = first
                self._partitions.append(KafkaTopicPartition(name, partition, first))
        self._consumer.assign(self._partitions)

    def partitions(self) -> list[TopicPartition]:
        return [(tp.topic, tp.partition) for tp in self._partitions]

    def fetch(self, timeout_s: float, max_records: int) -> list[Delivery | Position]:
        """Up to ``max_records`` records. librdkafka's ``consume`` waits out its whole timeout
        unless ``max_records`` arrive; an ``eager`` reader (the scheduler, the agents: each
        record may be a decision to make) returns as soon as the first one is there, with
        whatever else is already fetched."""
        items: list[Delivery | Position] = []
        messages: list[Message]
        if self.eager:
            messages = self.fatal.consume(self._consumer, 1, timeout_s)
            if not messages:
                return items
            if max_records > 1:
                messages += self.fatal.consume(self._consumer, max_records - 1, 0)
        else:
            messages = self.fatal.consume(self._consumer, max_records, timeout_s)
        for message in messages:
            checked = check(raw_record(message), self.topics, self.registry)
            items.append(checked if isinstance(checked, Delivery) else self._on_invalid(checked))
        return items

    def end_offsets(self, cached: bool = False) -> dict[TopicPartition, int]:
        ends: dict[TopicPartition, int] = {}
        for tp in self._partitions:
            key = KafkaTopicPartition(tp.topic, tp.partition)
            if cached:
                # The high watermark of the partition's last fetch response: free, maybe stale.
                marks = self._consumer.get_watermark_offsets(key, cached=True)
                if marks is not None and marks[1] >= 0:
                    ends[(tp.topic, tp.partition)] = int(marks[1])
                continue
            self.fatal.check()
            with self._ends_lock:
                try:
                    _, high = watermarks(self._ends_consumer, key, self.timeout_s)
                except KafkaException as error:
                    self.fatal.raise_if_fatal(error)
                    raise
            ends[(tp.topic, tp.partition)] = high
        return ends

    def pause(self, keys: list[TopicPartition]) -> None:
        self._consumer.pause([KafkaTopicPartition(topic, partition) for topic, partition in keys])

    def resume(self, keys: list[TopicPartition]) -> None:
        self._consumer.resume([KafkaTopicPartition(topic, partition) for topic, partition in keys])

    def close(self) -> None:
        self._consumer.close()
        with self._ends_lock:
            self._ends_consumer.close()


class LogFollower(Follower):
    """A :class:`Follower` over Kafka topics."""

    def __init__(
        self,
        bootstrap: str,
        kinds: Iterable[TopicKind],
        topics: Topics | None = None,
        *,
        timeout_s: float = 10.0,
        stall_s: float = 5.0,
        eager: bool = False,
        start: Mapping[TopicPartition, int] | None = None,
    ) -> None:
        """``eager``: hand out a record as soon as it arrives (see :meth:`KafkaPartitions.fetch`),
        with whatever else is fetched already: for readers a caller waits on (the scheduler,
        the agents, the API's view). A batching reader waits out its poll timeout unless a
        whole batch arrives (a catch-up, a projector)."""
        topics = topics or Topics()
        names = [topics.name(k) for k in kinds]
        self.kafka = KafkaPartitions(
            bootstrap, names, timeout_s, topics=topics, eager=eager, start=start
        )
        # From where the partitions are actually read: a position below a partition's first
        # offset still on the broker would block the merge (and a catch-up) for ever.
        super().__init__(self.kafka, topics, stall_s=stall_s, start=self.kafka.start)
