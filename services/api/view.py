"""The API's picture of the system: a LiveState kept current from the whole log.

A background thread reads every event topic from the first offset with a
:class:`~services.bus.follower.Follower` (no consumer group: each API process folds the whole
history on every start) and folds each event into one :class:`~projections.live_state.LiveState`
under a lock. The follower merges partitions by event time up to each partition's end, the one
ordering rule of every reader of LiveState, so a view that has caught up equals the offline fold
of the same log sorted by event time, however the fetches interleaved and however often the API
restarted. Request handlers read the state under the same lock, so they never see a
half-applied event.

Facts the merge could not order are held by the state. The view rejects a held fact only once
it has read every partition to the end offsets it captured after the fact was held, and the
fact still cannot apply (:meth:`LiveView.settle`): never because time passed.

Read-your-writes: after publishing, the API waits (bounded) until the view has folded the event
it wrote (:meth:`LiveView.wait_for`), so a ``GET`` right after a ``201`` sees the workload.

Without a running thread (unit tests, embedded use) the view is pumped synchronously: every
read first folds whatever the source has (:meth:`LiveView.sync`), and events can also be fed
directly (:meth:`LiveView.feed`).

Crash-only, like every service: a view thread that cannot go on (a fatal Kafka error, a fold
that raised) ends the API process with :data:`~services.runtime.service.EXIT_CRASH` and one log
line saying why, and its supervisor restarts it. Retrying in the thread kept an API answering
from a state that no longer moved, with a health check that said it was running.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import Any

from events.envelope import Envelope
from events.positions import TopicPartition
from events.topics import TopicKind, Topics
from projections.live_state import LiveState
from services.bus.follower import Follower, PartitionSource
from services.metrics.trust import watch_refusals
from services.runtime.fold_checkpoints import FoldCheckpoints
from services.runtime.service import EXIT_CRASH, run_service

log = logging.getLogger(__name__)

#: Every topic whose events the state folds (the liveness signals too: a node's last-seen
#: time and readings); dead letters are not facts.
VIEW_KINDS: tuple[TopicKind, ...] = tuple(k for k in TopicKind if k is not TopicKind.DEADLETTER)


class LiveView:
    def __init__(
        self,
        source: Follower | PartitionSource | None = None,
        *,
        state: LiveState | None = None,
        topics: Topics | None = None,
        poll_timeout_s: float = 0.2,
        settle_every_s: float = 1.0,
        end_process: Callable[[int], None] = os._exit,
    ) -> None:
        """``end_process``: how the process ends when the view thread cannot go on (tests
        record the exit code instead)."""
        self.state = state or LiveState()
        watch_refusals("api", lambda: self.state.trust.refused)
        if source is None or isinstance(source, Follower):
            self._follower = source
        else:
            self._follower = Follower(source, topics)
        self._poll_timeout_s = poll_timeout_s
        self._settle_every_s = settle_every_s
        self._changed = threading.Condition(threading.RLock())
        self._thread: threading.Thread | None = None
        self._stopping = threading.Event()
        #: Where the log ended when the view started: the history, read once before writes.
        self._history = dict(self._follower.merge.ends) if self._follower else {}
        #: Next offset not yet folded, per partition (updated under the lock with the state).
        self._folded: dict[TopicPartition, int] = (
            dict(self._follower.positions) if self._follower else {}
        )
        #: Checkpoints of the fold, saved now and then by the consumer thread (None: never).
        self.checkpoints: FoldCheckpoints | None = None
        #: Whether the state was restored from a checkpoint (else it is saved once caught up).
        self._restored = False
        self._caught_up = self._follower is None
        #: A pending check for held facts: (hold mark, end offsets captured after it).
        self._settling: tuple[int, dict[TopicPartition, int]] | None = None
        self._next_settle = 0.0
        self._end_process = end_process
        self._mark_caught_up()

    @classmethod
    def from_kafka(
        cls,
        bootstrap: str,
        topics: Topics | None = None,
        *,
        kinds: Iterable[TopicKind] = VIEW_KINDS,
        checkpoint_every_s: float | None = None,
    ) -> LiveView:
        """A view over a Kafka cluster, reading every topic from its first offset, or, with
        ``checkpoint_every_s``, from the latest checkpoint of the view's fold (then only the
        log's tail), saving one that often. Its reader is eager: a write waits for the view to
        fold it (read-your-writes), and a reader that waited out its poll timeout for a full
        batch held every request ~0.1-0.2 s (16 clients: 69 submissions/s)."""
        from services.bus.checkpoints import KafkaCheckpoints
        from services.bus.follower import LogFollower

        topics = topics or Topics()
        if checkpoint_every_s is None:
            return cls(LogFollower(bootstrap, tuple(kinds), topics, eager=True), topics=topics)
        store = KafkaCheckpoints(bootstrap, topics, "api-view")
        checkpoints = FoldCheckpoints(store, checkpoint_every_s, name="api-view")
        restored = checkpoints.restore()
        start = restored.positions if restored is not None else None
        view = cls(
            LogFollower(bootstrap, tuple(kinds), topics, start=start, eager=True),
            topics=topics,
            state=restored.state if restored is not None else None,
        )
        view.checkpoints = checkpoints
        view._restored = restored is not None
        return view

    # -- folding ------------------------------------------------------------------------------
    def feed(self, *envelopes: Envelope[Any]) -> int:
        """Fold events in directly; returns how many changed the state."""
        applied = 0
        with self._changed:
            for envelope in envelopes:
                if self.state.apply(envelope):
                    applied += 1
            self._changed.notify_all()
        return applied

    def poll_once(self, timeout_s: float | None = None) -> int:
        """Read the next batch and fold what the merge hands out; returns how many records
        were read or folded (0: nothing new)."""
        follower = self._follower
        if follower is None:
            return 0
        before = sum(follower.merge.fetched.values())
        deliveries = follower.poll(
            timeout_s=self._poll_timeout_s if timeout_s is None else timeout_s
        )
        with self._changed:
            for delivery in deliveries:
                self.state.apply(delivery.envelope)
            self._folded = dict(follower.positions)
            self._changed.notify_all()
        self._mark_caught_up()
        self.settle()
        return len(deliveries) + sum(follower.merge.fetched.values()) - before

    def _mark_caught_up(self) -> None:
        if self._caught_up or not self._has_folded(self._history):
            return
        with self._changed:
            self._caught_up = True
            self._changed.notify_all()
        log.info("view caught up with the log", extra={"events": self.state.events})
        if self.checkpoints is not None and not self._restored:
            self.checkpoints.due_now()

    def _has_folded(self, ends: dict[TopicPartition, int]) -> bool:
        return all(self._folded.get(key, 0) >= end for key, end in ends.items())

    def settle(self) -> int:
        """Reject held facts that can no longer apply: those held before the view captured
        end offsets it has since read every partition to. Rate-limited (one end-offset query
        per ``settle_every_s``); returns how many were rejected."""
        if self._follower is None:
            return 0
        if self._settling is None:
            if not self.state.waiting or time.monotonic() < self._next_settle:
                return 0
            with self._changed:
                mark = self.state.hold_mark()
            self._settling = (mark, self._follower.source.end_offsets())
            self._next_settle = time.monotonic() + self._settle_every_s
        mark, ends = self._settling
        if not self._has_folded(ends):
            return 0
        self._settling = None
        with self._changed:
            return self.state.reject_held_before(mark)

    def sync(self) -> None:
        """Without a consumer thread: fold everything the source has now."""
        if self._thread is None and self._follower is not None:
            while self.poll_once(0.0):
                pass

    # -- the consumer thread ----------------------------------------------------------------
    def start(self) -> None:
        if self._thread is not None or self._follower is None:
            return
        self._stopping.clear()
        self._thread = threading.Thread(target=self._run, name="fairshare-api-view", daemon=True)
        self._thread.start()
        log.info("view consumer started")

    def _run(self) -> None:
        """The thread: follow the log until stopped. Any error ends the process, as it ends
        every service (:func:`~services.runtime.service.run_service` logs why): an exception
        would end only this thread, and the API would go on answering from a stale state."""
        try:
            run_service(self._follow)
        except SystemExit:
            self._end_process(EXIT_CRASH)

    def _follow(self) -> None:
        while not self._stopping.is_set():
            if self.checkpoints is not None and self.checkpoints.due():
                # a consistent cut: the state and what it has folded, read under the lock
                self.checkpoints.save(self.state, self._folded, lock=self._changed)
            try:
                self.poll_once()
            except Exception:
                if not self._stopping.is_set():
                    raise
                # stopping: the follower may be closed under a read that outlasted the join
                log.info("view consumer stopped mid-read", exc_info=True)
                return

    def stop(self) -> None:
        thread, self._thread = self._thread, None
        self._stopping.set()
        if thread is not None:
            thread.join(timeout=10)
        if self._follower is not None:
            self._follower.close()
            self._follower = None
        log.info("view consumer stopped")

    # -- reading ------------------------------------------------------------------------------
    @property
    def caught_up(self) -> bool:
        """Whether the view has read the history (the log as it was when it started) once."""
        return self._caught_up

    @property
    def running(self) -> bool:
        return self._thread is not None

    def log_end(self) -> dict[TopicPartition, int]:
        """The log's end offsets now, asked of the broker (not of the merge, which belongs to
        the consumer thread)."""
        return {} if self._follower is None else self._follower.source.end_offsets()

    def reached(self, ends: dict[TopicPartition, int], timeout_s: float = 0.0) -> bool:
        """Whether the view has folded every partition up to ``ends`` (waiting up to
        ``timeout_s`` for the consumer to get there)."""
        self.sync()
        with self._changed:
            return self._changed.wait_for(lambda: self._has_folded(ends), timeout=timeout_s)

    def behind(self, ends: dict[TopicPartition, int]) -> int:
        """Records before ``ends`` not folded yet."""
        with self._changed:
            return sum(max(0, end - self._folded.get(key, 0)) for key, end in ends.items())

    @property
    def skipped(self) -> int:
        """Records read that are not valid events where they lie (wrong topic or key, or not
        decodable): never folded, as no other reader of the log folds them."""
        return 0 if self._follower is None else self._follower.skipped

    @property
    def buffered(self) -> int:
        """Records read but held back by the merge (a partition is not read to its end)."""
        return 0 if self._follower is None else self._follower.buffered

    @contextmanager
    def read(self) -> Iterator[LiveState]:
        """The state, locked against the consumer for the duration of the block."""
        self.sync()
        with self._changed:
            yield self.state

    def seen(self, event_id: str) -> bool:
        with self._changed:
            return event_id in self.state.event_ids

    def wait_for(self, event_id: str, timeout_s: float = 5.0) -> bool:
        """Wait until the event ``event_id`` is folded (read-your-writes); False on timeout."""
        deadline = time.monotonic() + timeout_s
        if self._thread is None:
            while True:
                self.sync()
                if self.seen(event_id):
                    return True
                if time.monotonic() >= deadline or self._follower is None:
                    return False
                time.sleep(0.01)
        with self._changed:
            return self._changed.wait_for(
                lambda: event_id in self.state.event_ids,
                timeout=max(0.0, deadline - time.monotonic()),
            )

    def wait_caught_up(self, timeout_s: float = 30.0) -> bool:
        """Wait until the consumer has read the history once (before answering writes)."""
        deadline = time.monotonic() + timeout_s
        if self._thread is None:
            self.sync()
            return self._caught_up
        with self._changed:
            return self._changed.wait_for(
                lambda: self._caught_up, timeout=max(0.0, deadline - time.monotonic())
            )
