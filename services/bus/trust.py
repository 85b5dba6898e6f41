"""The one judgement of ``projections.trust`` for readers that do not fold the keys topic in
event-time order with their inputs: charging, the projector.

Their inputs come in fetch order (the projector's consumer group) or without the keys topic
(charging's merge of workloads and heartbeats), so the key facts are read apart, from the keys
topic to its end (:func:`kafka_keys`): when the reader starts, when it meets a record signed
by a key it has not read (a key registered since), and every ``refresh_s`` (a revocation).
Between two readings a revocation is not known here yet: for at most ``refresh_s`` a record
its key signed after it is believed, where the audit, which reads every key, refuses it
(docs/signed-facts.md, "Revocation"). The live state's readers have no such gap: the keys
topic is one of their inputs, merged by event time.

What is not believed is handed to ``refuse`` as a :class:`~services.bus.records.Rejected`,
the same value a record that does not decode is: a consumer that owns dead letters posts one
(once per consumer and position, ``services.bus.deadletters``), any other skips it.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from typing import Any

from events.envelope import Envelope
from events.positions import Delivery
from events.topics import TopicKind, Topics
from projections.trust import UNKNOWN_KEY, Distrust, KeyBook, Owners, Trust
from services.bus.records import RawRecord, Rejected, check, record_of, skip

log = logging.getLogger(__name__)

KeyReader = Callable[[], Iterable[Envelope[Any]]]


def kafka_keys(bootstrap: str, topics: Topics) -> KeyReader:
    """Reads the keys topic to its end, as every reader checks records (a record that is not
    a valid event there is no key fact)."""

    def read() -> list[Envelope[Any]]:
        from services.bus.export import read_to_end

        envelopes = []
        for record in read_to_end(bootstrap, [topics.name(TopicKind.KEYS)]):
            checked = check(record, topics)
            if isinstance(checked, Delivery):
                envelopes.append(checked.envelope)
        return envelopes

    return read


def not_believed(record: RawRecord, verdict: Distrust) -> Rejected:
    """A record ``verdict`` refuses, as every reader dead-letters or skips it: with the same
    reason an undecodable record would carry."""
    return Rejected(record, f"not believed: {verdict.reason}")


class KeysFromLog:
    """A :class:`~projections.trust.Trust` whose key book is read from the keys topic."""

    def __init__(
        self,
        read_keys: KeyReader,
        *,
        refresh_s: float = 30.0,
        trust: Trust | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._read_keys = read_keys
        self.refresh_s = refresh_s
        self.trust = trust or Trust(horizon_s=8 * 86_400)
        self._clock = clock
        self._read_at = float("-inf")
        #: Key facts refused so far (each named once in the log, not at every reading).
        self._refused_keys: set[str] = set()

    def refresh(self) -> None:
        """Read every key fact again into a new book (a revocation changes a key's entry)."""
        envelopes = list(self._read_keys())
        scratch = Trust()
        scratch.learn_keys(envelopes)
        self.trust.book = scratch.book
        for refusal in scratch.refusals:
            if refusal.event_id not in self._refused_keys:
                self._refused_keys.add(refusal.event_id)
                self.trust.refusals.append(refusal)
                self.trust.refused[refusal.kind] = self.trust.refused.get(refusal.kind, 0) + 1
                log.warning(
                    "key fact not believed",
                    extra={"event_id": refusal.event_id, "reason": refusal.reason},
                )
        self._read_at = self._clock()

    @property
    def book(self) -> KeyBook:
        return self.trust.book

    def judge(self, envelope: Envelope[Any], owners: Owners | None = None) -> Distrust | None:
        """The trust's judgement, with the keys read again first when they are older than
        ``refresh_s`` or the record names a key not read yet; a refusal is recorded."""
        now = self._clock()
        if now - self._read_at >= self.refresh_s:
            self.refresh()
        verdict = self.trust.judge(envelope, owners)
        if verdict is not None and verdict.kind == UNKNOWN_KEY and now - self._read_at >= 1.0:
            # at most once a second: a stream of records under made-up keys must not turn
            # into a stream of reads of the keys topic
            self.refresh()
            verdict = self.trust.judge(envelope, owners)
        if verdict is not None:
            self.trust.refuse(envelope, verdict)
            log.warning(
                "record not believed",
                extra={"event_id": envelope.id, "kind": verdict.kind, "reason": verdict.reason},
            )
        return verdict


class Believing:
    """A reader that hands out only what ``judge`` believes; the rest goes to ``refuse``
    (then ``flush``, so a consumer's dead letters are in the log before it commits past
    them). Everything else is the wrapped reader's."""

    def __init__(
        self,
        inner: Any,
        judge: Callable[[Envelope[Any]], Distrust | None],
        refuse: Callable[[Rejected], object] | None = None,
        flush: Callable[[], None] | None = None,
    ) -> None:
        self.inner = inner
        self._judge = judge
        self._refuse = refuse or (lambda rejected: skip(rejected, "believing reader"))
        self._flush = flush

    def poll(self, timeout_s: float = 1.0, max_records: int = 500) -> list[Delivery]:
        believed = []
        refused = False
        for delivery in self.inner.poll(timeout_s, max_records):
            verdict = self._judge(delivery.envelope)
            if verdict is None:
                believed.append(delivery)
            else:
                refused = True
                self._refuse(not_believed(record_of(delivery), verdict))
        if refused and self._flush is not None:
            self._flush()
        return believed

    def commit(self) -> None:
        self.inner.commit()

    def close(self) -> None:
        self.inner.close()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)
