"""Publishing a consumer's dead letters, each at most once in the log.

A consumer that rebuilds its fold reads its inputs from the first offset on every start (the
charging host, under a new consumer group each time), so it meets every poison record again
after each restart. Its dead letters used to be named after the group and published again each
time: 12 poison records became 222 dead letters. Now a dead letter is named after the
consumer's stable name (its id derives from that name and the source position only,
:func:`~services.bus.records.dead_letter_id`), and before publishing its first one a consumer
reads the ids already in the dead-letter topic, so a redelivered poison record is
recognised, not posted again. Only one consumer group member per name dead-letters
(the projector's static membership fences a second one), so this is exact but for a publish
whose acknowledgement was lost; the topic's readers still count distinct ids.

Which ids count as published: only those of valid dead letters whose id derives from their own
consumer and position, so a forged record on the dead-letter topic cannot silence the letter of
another position.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from datetime import UTC, datetime

from events.envelope import Envelope
from events.models import DeadLetter
from events.positions import Delivery
from events.registry import EventRegistry
from events.topics import Topics
from services.bus.port import EventPublisher
from services.bus.records import RawRecord, Rejected, check, dead_letter_for
from services.bus.records import dead_letter_id as derived_id
from services.metrics.common import DEAD_LETTERS

log = logging.getLogger(__name__)


def published_dead_letter_ids(
    records: Iterable[RawRecord], topics: Topics, registry: EventRegistry | None = None
) -> set[str]:
    """The ids of the genuine dead letters among ``records`` (the dead-letter topic)."""
    ids: set[str] = set()
    for record in records:
        checked = check(record, topics, registry)
        if not isinstance(checked, Delivery):
            continue
        letter = checked.envelope.data
        if not isinstance(letter, DeadLetter):
            continue
        if checked.envelope.id == derived_id(letter.consumer, letter.source_position):
            ids.add(checked.envelope.id)
    return ids


class DeadLetters:
    """The dead-letter office of one consumer (by its stable name, whatever its group)."""

    def __init__(
        self,
        consumer: str,
        publisher: Callable[[], EventPublisher],
        published: Callable[[], Iterable[RawRecord]],
        topics: Topics,
        *,
        registry: EventRegistry | None = None,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        """``publisher`` opens the publisher of dead letters and ``published`` reads the
        dead-letter topic to its end; both are called only once a record is rejected (most
        consumers never meet a poison record)."""
        self.consumer = consumer
        self._open_publisher = publisher
        self._read_published = published
        self._topics = topics
        self._registry = registry
        self._clock = clock
        self._publisher: EventPublisher | None = None
        self._known: set[str] | None = None
        self._unflushed = 0
        #: Dead letters published by this office; records found already dead-lettered.
        self.posted = 0
        self.already_posted = 0

    def reject(self, rejected: Rejected) -> Envelope[DeadLetter] | None:
        """Queue the dead letter of ``rejected``; None if the log already holds it."""
        letter = dead_letter_for(rejected.record, rejected.reason, self.consumer, self._clock())
        known = self._known_ids()
        extra = {"consumer": self.consumer, "position": letter.data.source_position}
        if letter.id in known:
            self.already_posted += 1
            log.info("record already dead-lettered", extra=extra)
            return None
        if self._publisher is None:
            self._publisher = self._open_publisher()
        self._publisher.publish(letter)
        known.add(letter.id)
        self._unflushed += 1
        self.posted += 1
        DEAD_LETTERS.labels(self.consumer, rejected.record.topic).inc()
        log.warning("dead-lettered record", extra={**extra, "reason": letter.data.reason})
        return letter

    def flush(self) -> None:
        """Wait until every queued dead letter is in the log (before committing past them).
        A letter that did not make it is forgotten as known, so a redelivery posts it again."""
        if self._publisher is None or not self._unflushed:
            return
        try:
            self._publisher.flush()
        except Exception:
            self._known = None  # re-read the topic: what did land is there
            raise
        self._unflushed = 0

    def _known_ids(self) -> set[str]:
        if self._known is None:
            self._known = published_dead_letter_ids(
                self._read_published(), self._topics, self._registry
            )
        return self._known

    def close(self) -> None:
        if self._publisher is not None:
            self._publisher.close()
            self._publisher = None
