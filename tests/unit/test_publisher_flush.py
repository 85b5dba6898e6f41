"""The Kafka publisher's flush answers for the calling thread's records only.

The API's requests publish side by side, each flushing its own submission: a flush that waited
for the producer's whole queue (librdkafka's) waited for the other requests' later records too,
and reported their failures. librdkafka is replaced by a scripted client here (which record is
acknowledged, refused or held), since a real broker cannot be made to hold one record."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

from events import new_event
from services.bus.kafka import KafkaEventPublisher
from services.bus.port import PublishError
from tests.factories import T0, submitted


class _Report:
    def __init__(self, topic: str) -> None:
        self._topic = topic

    def topic(self) -> str:
        return self._topic

    def key(self) -> bytes:
        return b"k"


class _Refused:
    def name(self) -> str:
        return "NOT_ENOUGH_REPLICAS"

    def str(self) -> str:
        return "refused"

    def fatal(self) -> bool:
        return False

    def code(self) -> int:
        return 19


class ScriptedProducer:
    """Records to a topic named ``held`` are never answered; ``refused`` ones fail; the rest
    are acknowledged on the next poll, whichever thread polls (as librdkafka serves them)."""

    def __init__(self) -> None:
        self._queue: list[tuple[str, Callable[..., None]]] = []
        self._lock = threading.Lock()

    def produce(self, topic: str, on_delivery: Callable[..., None], **_: Any) -> None:
        with self._lock:
            self._queue.append((topic, on_delivery))

    def poll(self, timeout: float = 0.0) -> int:
        with self._lock:
            answerable = [item for item in self._queue if item[0] != "held"]
            self._queue = [item for item in self._queue if item[0] == "held"]
        for topic, report in answerable:
            report(_Refused() if topic == "refused" else None, _Report(topic))
        if not answerable:
            time.sleep(min(timeout, 0.01))
        return len(answerable)

    def flush(self, timeout: float) -> int:
        deadline = time.monotonic() + timeout
        while True:
            self.poll(0.01)
            with self._lock:
                left = len(self._queue)
            if not left or time.monotonic() >= deadline:
                return left


@pytest.fixture
def publisher() -> KafkaEventPublisher:
    publisher = KafkaEventPublisher("127.0.0.1:1")
    publisher._producer = ScriptedProducer()  # type: ignore[assignment]
    return publisher


def _in_thread(work: Callable[[], None]) -> threading.Thread:
    thread = threading.Thread(target=work)
    thread.start()
    thread.join(5)
    return thread


def test_a_flush_does_not_wait_for_another_thread_s_held_record(
    publisher: KafkaEventPublisher,
) -> None:
    _in_thread(lambda: publisher.publish_raw("held", b"k", b"v"))  # never answered
    publisher.publish(new_event(submitted("mine"), source="test", time=T0))
    began = time.monotonic()
    publisher.flush(2)  # waiting for the whole queue: 2 s, then "1 event(s) not acknowledged"
    assert time.monotonic() - began < 1


def test_a_flush_reports_its_own_refusals_not_another_thread_s(
    publisher: KafkaEventPublisher,
) -> None:
    failures: list[str] = []

    def other() -> None:
        publisher.publish_raw("refused", b"k", b"v")
        try:
            publisher.flush(2)
        except PublishError as error:
            failures.append(str(error))

    publisher.publish(new_event(submitted("mine"), source="test", time=T0))
    _in_thread(other)
    publisher.flush(2)  # the other thread's refusal is not this request's
    assert failures
    assert "NOT_ENOUGH_REPLICAS" in failures[0]


def test_a_flush_waits_for_its_own_held_record_and_says_so(
    publisher: KafkaEventPublisher,
) -> None:
    publisher.publish_raw("held", b"k", b"v")
    with pytest.raises(PublishError, match="1 event\\(s\\) not acknowledged"):
        publisher.flush(0.3)
