"""The API restarted during a run on a real broker: its view still equals the fold of the log.

The run is the recorded log of ``tests/unit/test_view_ordering.py`` (a simulated run with
preemptions, budgets created when their first workload arrives, nodes registered at the instant
of their first placement), produced into Kafka in batches while the API's view is started,
stopped and started again (three restarts). After the last one has caught up, every workload's
status, attempt and placement equals the fold of the log sorted by event time, nothing waits or
was rejected, and ``/health`` says so.
"""

from __future__ import annotations

import time

import pytest
from fastapi.testclient import TestClient

from services.api import LiveView, create_app, default_tokens
from tests.integration.kafka_bus import KafkaBus
from tests.unit.test_view_ordering import offline, recorded, summary

pytestmark = [pytest.mark.broker]


def _caught_up(view: LiveView, timeout_s: float = 60.0) -> None:
    ends = view.log_end()
    assert view.reached(ends, timeout_s=timeout_s), f"behind by {view.behind(ends)}"


def test_three_restarts_during_a_run_end_with_the_fold_of_the_log(bus: KafkaBus) -> None:
    log = [delivery.envelope for delivery in recorded()]
    publisher = bus.publisher()
    batches = [log[i : i + len(log) // 4 + 1] for i in range(0, len(log), len(log) // 4 + 1)]
    view: LiveView | None = None
    try:
        for restart, batch in enumerate(batches):
            for envelope in batch:
                publisher.publish(envelope)
            publisher.flush()
            if view is not None:
                time.sleep(0.3 * restart)  # stopped mid-read or not, as it happens
                view.stop()
            view = LiveView.from_kafka(bus.broker.bootstrap, bus.topics)
            view.start()
        assert view is not None
        assert view.wait_caught_up(60.0)
        _caught_up(view)
        with view.read() as state:
            assert not state.rejected, state.rejected[:3]
            assert not state.waiting
            assert summary(state) == offline()
        health = TestClient(create_app(view, publisher, default_tokens())).get("/health")
        assert health.status_code == 200
        body = health.json()
        assert body["caught_up"] is True
        assert (body["behind"], body["waiting"], body["rejected"]) == (0, 0, 0)
        assert body["events"] > 0
    finally:
        if view is not None:
            view.stop()
