"""The API's application context: what every request works on (the view, the log, the clock,
the limits, the read models) and the steps every write takes on it (:meth:`Application.ready`,
:meth:`~Application.publish`, :meth:`~Application.visible`), with the result a write returns
(:class:`Outcome`, :class:`Result`), the duplicate-submission tracking and the locks.

The writes themselves are in :mod:`services.api.writes`, one module per resource, each
following the one path of :mod:`services.api.writes.skeleton`.
"""

from __future__ import annotations

import logging
import os
import threading
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum
from typing import Any, Generic, TypeVar

from sqlalchemy import Engine

from events.envelope import Envelope, new_event
from events.models import EventData, WorkloadArraySubmitted, WorkloadSubmitted
from events.times import DEFAULT_WINDOW_S, utc_from_epoch
from services.api.auth import Principal
from services.api.errors import TooLarge, Unavailable
from services.api.view import LiveView
from services.bus.port import EventPublisher, PublishError

log = logging.getLogger(__name__)

SOURCE = "fairshare-api"

Clock = Callable[[], float]
A = TypeVar("A")


class Outcome(Enum):
    #: Nothing published: the state already was what was asked.
    UNCHANGED = "unchanged"
    #: Published, and the view has folded it: the answer is the new state.
    DONE = "done"
    #: Recorded in the log, not yet visible in the view: the answer says what was recorded.
    ACCEPTED = "accepted"


@dataclass(frozen=True)
class Result(Generic[A]):
    outcome: Outcome
    answer: A


#: A submission: one workload, or a job array.
Submission = WorkloadSubmitted | WorkloadArraySubmitted


class Submissions:
    """Submissions (workloads and arrays, by their ids) this process published that its view
    has not folded yet.

    Idempotency must hold across the gap between flush and fold: a repeated submit in that gap
    is compared with what was published instead of being published again. :meth:`lock` keeps
    two submits of one id from both publishing; submits of other ids mostly hold other locks
    (striped by id), so they publish and wait for the broker side by side."""

    STRIPES = 64

    def __init__(self) -> None:
        self._stripes = [threading.Lock() for _ in range(self.STRIPES)]
        self._unseen: dict[str, Submission] = {}

    def lock(self, workload_id: str) -> threading.Lock:
        return self._stripes[zlib.crc32(workload_id.encode()) % self.STRIPES]

    def unseen(self, workload_id: str) -> Submission | None:
        return self._unseen.get(workload_id)

    def published(self, data: Submission) -> None:
        self._unseen[data.subject()] = data

    def folded(self, workload_id: str) -> None:
        self._unseen.pop(workload_id, None)


#: How long a write waits for the log to acknowledge its events before it answers 503. The
#: API's producer gives up on a record after as long (``message.timeout.ms``,
#: :func:`write_producer_config`): a record still in its queue is then never sent. One already
#: sent may still reach the broker later (a partition's TCP retransmits it once the link
#: heals: tests/partitions/test_api_cut_from_kafka.py), so a 503 says "may still be recorded",
#: and retrying the same request (idempotent) settles it.
WRITE_TIMEOUT_S = 10.0
#: What the flush waits beyond that for the producer's verdict on each record (librdkafka
#: scans for timed-out records about once a second).
_VERDICT_MARGIN_S = 3.0


def write_producer_config(write_timeout_s: float = WRITE_TIMEOUT_S) -> dict[str, int]:
    """The API producer's settings: records not sent expire with the request that wrote
    them (with librdkafka's default, 30 s, a record refused with a 503 after 10 s was still
    written up to 20 s later, once the link came back)."""
    return {"message.timeout.ms": int(write_timeout_s * 1000)}


class Application:
    """What every request works on: the view (read), the log (write), the clock and the
    limits, and the locks that keep concurrent writes consistent."""

    def __init__(
        self,
        view: LiveView,
        publisher: EventPublisher,
        clock: Clock,
        *,
        window_s: int = DEFAULT_WINDOW_S,
        read_your_writes_s: float = 5.0,
        flush_timeout_s: float = WRITE_TIMEOUT_S,
        read_models: Engine | None = None,
    ) -> None:
        self.view = view
        self.publisher = publisher
        self.clock = clock
        self.window_s = window_s
        self.read_your_writes_s = read_your_writes_s
        self.flush_timeout_s = flush_timeout_s
        #: The SQL read models delivered and owed are computed from (None: see
        #: :meth:`read_model_engine`).
        self.read_models = read_models
        self.submissions = Submissions()
        #: Held from the check of a budget change to its being visible: two creates of one path
        #: must not both publish.
        self.budget_lock = threading.Lock()
        #: Held from the check of a price to its being visible: two prices for one instant
        #: must not both publish.
        self.price_lock = threading.Lock()
        self._engine_lock = threading.Lock()

    def read_model_engine(self) -> Engine | None:
        """The read models: the engine the app was built with, else one made once from
        ``$FAIRSHARE_DATABASE_URL``, else None (no delivered and owed figures)."""
        with self._engine_lock:
            if self.read_models is None and os.environ.get("FAIRSHARE_DATABASE_URL"):
                from sqlalchemy import create_engine

                self.read_models = create_engine(os.environ["FAIRSHARE_DATABASE_URL"])
            return self.read_models

    def ready(self) -> None:
        """Writes wait until the view has read the log's history: checks against a partial
        state could accept what the whole log refuses."""
        self.view.sync()
        if not self.view.caught_up:
            raise Unavailable(
                "the API is still reading the event log; retry shortly", retry_after_s=2
            )

    def publish(self, data: EventData, who: Principal, retry: str = "") -> Envelope[Any]:
        """Publish and flush one event; ``retry`` tells the client what to send again."""
        return self.publish_all([data], who, retry)[0]

    def publish_all(
        self, facts: list[EventData], who: Principal, retry: str = ""
    ) -> list[Envelope[Any]]:
        """Publish events and flush them once (a batch costs one wait for the broker, not
        one per event); ``retry`` tells the client what to send again."""
        at = utc_from_epoch(self.clock())
        envelopes = [new_event(data, source=SOURCE, time=at) for data in facts]
        # No lock: the publisher's flush answers for this thread's records (requests publish
        # side by side; the check-then-publish of one id is guarded by its caller's lock).
        try:
            for envelope in envelopes:
                self.publisher.publish(envelope)
            self.publisher.flush(self.flush_timeout_s + _VERDICT_MARGIN_S)
        except PublishError as error:
            first = envelopes[0]
            if "MSG_SIZE_TOO_LARGE" in str(error):  # no retry can make it fit
                raise TooLarge(
                    f"the event log refuses a record this large ({error}); nothing was recorded",
                    user=who.user,
                ) from error
            log.warning(
                "event log did not accept a request",
                extra={"type": first.type, "subject": first.subject, "error": str(error)},
            )
            raise Unavailable(
                f"the event log did not acknowledge the request ({error}); it may still be "
                "recorded if it reached the log before the link failed. Retry the same "
                f"request{retry}: it is idempotent, and takes effect once either way",
                retry_after_s=1,
                user=who.user,
            ) from error
        log.info(
            "event published",
            extra={
                "type": envelopes[0].type,
                "subject": envelopes[0].subject,
                "event_id": envelopes[0].id,
                "user": who.user,
                "events": len(envelopes),
            },
        )
        return envelopes

    def visible(self, envelope: Envelope[Any]) -> bool:
        """Whether the view folded ``envelope`` within the read-your-writes bound."""
        return self.view.wait_for(envelope.id, self.read_your_writes_s)
