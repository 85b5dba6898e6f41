"""The API's picture of the system: a LiveState kept current from the whole log.

A background thread consumes every event topic from the first offset (a throw-away consumer
group that never commits, so each API process folds the whole history) and folds each event
into one :class:`~projections.live_state.LiveState` under a lock. Request handlers read the
state under the same lock, so they never see a half-applied event.

Read-your-writes: after publishing, the API waits (bounded) until the view has folded the event
it wrote (:meth:`LiveView.wait_for`), so a ``GET`` right after a ``201`` sees the workload.

Without a running thread (unit tests, embedded use) the view is pumped synchronously: every
read first folds whatever the subscriber has (:meth:`LiveView.sync`), and events can also be fed
directly (:meth:`LiveView.feed`).
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any

from events.envelope import Envelope
from events.topics import TopicKind, Topics
from projections.live_state import LiveState
from services.bus.export import end_offsets
from services.bus.port import EventSubscriber

log = logging.getLogger(__name__)

#: Every topic whose events are facts the state folds; dead letters are not facts.
VIEW_KINDS: tuple[TopicKind, ...] = tuple(k for k in TopicKind if k is not TopicKind.DEADLETTER)


class LiveView:
    def __init__(
        self,
        subscriber: EventSubscriber | None = None,
        *,
        state: LiveState | None = None,
        poll_timeout_s: float = 0.2,
        end_offsets: dict[tuple[str, int], int] | None = None,
        settle_s: float = 10.0,
    ) -> None:
        self.state = state or LiveState()
        self._subscriber = subscriber
        self._poll_timeout_s = poll_timeout_s
        self._changed = threading.Condition(threading.RLock())
        self._thread: threading.Thread | None = None
        self._stopping = threading.Event()
        #: True once a poll found nothing more to read (the history is folded).
        self._caught_up = subscriber is None
        #: Where the log ended when the view started (Kafka): caught up once every partition
        #: is read that far. Without it (in-memory bus), the first empty poll means caught up.
        self._remaining = {tp: end for tp, end in (end_offsets or {}).items() if end > 0}
        self._uses_end_offsets = end_offsets is not None
        self._settle_s = settle_s
        self._started_at = time.monotonic()
        self.errors = 0

    @classmethod
    def from_kafka(
        cls,
        bootstrap: str,
        topics: Topics | None = None,
        *,
        group_id: str | None = None,
        kinds: Iterable[TopicKind] = VIEW_KINDS,
    ) -> LiveView:
        """A view over a Kafka cluster, reading every topic from its first offset."""
        from services.bus.kafka import KafkaEventSubscriber

        topics = topics or Topics()
        kinds = tuple(kinds)
        ends = end_offsets(bootstrap, [topics.name(kind) for kind in kinds])
        subscriber = KafkaEventSubscriber(
            bootstrap,
            group_id or f"fairshare-api-view-{uuid.uuid4().hex}",
            kinds,
            topics,
        )
        return cls(subscriber, end_offsets=ends)

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
        """Fold the next batch from the subscriber; returns how many events it held."""
        if self._subscriber is None:
            return 0
        deliveries = self._subscriber.poll(
            timeout_s=self._poll_timeout_s if timeout_s is None else timeout_s
        )
        if deliveries:
            self.feed(*(delivery.envelope for delivery in deliveries))
        if not self._caught_up and self._reached_end(deliveries):
            with self._changed:
                self._caught_up = True
                self._changed.notify_all()
            log.info("view caught up with the log", extra={"events": self.state.events})
        return len(deliveries)

    def _reached_end(self, deliveries: list[Any]) -> bool:
        if not self._uses_end_offsets:
            return not deliveries
        for delivery in deliveries:
            key = (delivery.position.topic, delivery.position.partition)
            end = self._remaining.get(key)
            if end is not None and delivery.position.offset + 1 >= end:
                del self._remaining[key]
        if not self._remaining:
            return True
        # A dead-lettered record at the end of a partition is never delivered: after a quiet
        # poll past the settle time, what was readable has been read.
        return not deliveries and time.monotonic() - self._started_at >= self._settle_s

    def sync(self) -> None:
        """Without a consumer thread: fold everything the subscriber has now."""
        if self._thread is None and self._subscriber is not None:
            while self.poll_once(0.0):
                pass

    # -- the consumer thread ----------------------------------------------------------------
    def start(self) -> None:
        if self._thread is not None or self._subscriber is None:
            return
        self._stopping.clear()
        self._thread = threading.Thread(target=self._run, name="fairshare-api-view", daemon=True)
        self._thread.start()
        log.info("view consumer started")

    def _run(self) -> None:
        while not self._stopping.is_set():
            try:
                self.poll_once()
            except Exception:
                self.errors += 1
                log.exception("view consumer failed; retrying", extra={"errors": self.errors})
                self._stopping.wait(1.0)

    def stop(self) -> None:
        thread, self._thread = self._thread, None
        self._stopping.set()
        if thread is not None:
            thread.join(timeout=10)
        if self._subscriber is not None:
            self._subscriber.close()
            self._subscriber = None
        log.info("view consumer stopped")

    # -- reading ------------------------------------------------------------------------------
    @property
    def caught_up(self) -> bool:
        return self._caught_up

    @property
    def running(self) -> bool:
        return self._thread is not None

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
                if time.monotonic() >= deadline or self._subscriber is None:
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
            return self._caught_up or self._subscriber is None
        with self._changed:
            return self._changed.wait_for(
                lambda: self._caught_up, timeout=max(0.0, deadline - time.monotonic())
            )
