"""Read-your-writes in the API's view with its consumer thread running: a request waiting for
the event it published is woken once that event is folded, whatever else is folded meanwhile;
one whose event never comes times out and leaves nothing behind; many wait side by side."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from events import new_event
from events.envelope import Envelope
from events.models import BudgetCreated
from services.api.view import VIEW_KINDS, LiveView
from services.bus.memory import InMemoryBroker, InMemoryPublisher, InMemorySubscriber
from tests.factories import T0


def budget(name: str) -> Envelope[Any]:
    return new_event(BudgetCreated(budget=name, created_by="admin"), source="tests", time=T0)


@pytest.fixture
def log() -> InMemoryBroker:
    return InMemoryBroker()


@pytest.fixture
def view(log: InMemoryBroker) -> Iterator[LiveView]:
    view = LiveView(InMemorySubscriber(log, "api-view", VIEW_KINDS), poll_timeout_s=0.05)
    view.start()
    assert view.wait_caught_up(5)
    yield view
    view.stop()


def test_waiters_are_woken_by_their_own_events(log: InMemoryBroker, view: LiveView) -> None:
    publisher = InMemoryPublisher(log)
    events = [budget(f"lab{i}") for i in range(16)]
    answers: dict[str, bool] = {}

    def wait(envelope: Envelope[Any]) -> None:
        answers[envelope.id] = view.wait_for(envelope.id, timeout_s=10)

    threads = [threading.Thread(target=wait, args=(e,)) for e in events]
    for thread in threads:
        thread.start()
    for envelope in events:  # one by one: each fold holds one waiter's event
        publisher.publish(envelope)
        publisher.flush(5)
    started = time.monotonic()
    for thread in threads:
        thread.join(10)
    assert answers == {e.id: True for e in events}
    # woken, not timed out (10 s) and finding its event folded by then
    assert time.monotonic() - started < 5


def test_a_waiter_whose_event_never_comes_times_out_and_leaves_nothing(
    log: InMemoryBroker, view: LiveView
) -> None:
    publisher = InMemoryPublisher(log)
    other = budget("lab")
    started = time.monotonic()
    waiting = threading.Thread(target=lambda: publisher.publish(other))
    waiting.start()
    assert view.wait_for("never-published", timeout_s=0.5) is False
    assert 0.5 <= time.monotonic() - started < 5
    waiting.join()
    assert view.wait_for(other.id, timeout_s=5) is True  # folded meanwhile: at once
