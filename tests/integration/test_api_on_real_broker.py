"""The API over a real broker: the Kafka-backed LiveView and KafkaEventPublisher."""

from __future__ import annotations

import time
from datetime import UTC, datetime

import pytest
from fastapi.testclient import TestClient

from events import TopicKind
from events.envelope import new_event
from events.models import BudgetCreated, MembershipGranted, NodeRegistered
from services.api import LiveView, create_app, default_tokens
from tests.integration.kafka_bus import KafkaBus

pytestmark = [pytest.mark.broker]

ANA = {"Authorization": "Bearer ana-token"}


def test_submit_over_http_lands_on_the_workloads_topic_and_in_the_view(bus: KafkaBus) -> None:
    now = datetime.now(UTC)
    seed = bus.publisher()
    for data in (
        BudgetCreated(budget="lab", created_by="admin"),
        BudgetCreated(budget="lab/a", created_by="admin"),
        MembershipGranted(budget="lab/a", user="ana", role="member", granted_by="admin"),
        NodeRegistered(node="n1", cluster="c", pool="p", gpus=8, gpu_type="H100"),
    ):
        seed.publish(new_event(data, source="tests", time=now))
    seed.flush()

    view = LiveView.from_kafka(bus.broker.bootstrap, bus.topics)
    publisher = bus.publisher()
    view.start()
    try:
        assert view.wait_caught_up(60.0), "the view did not read the seeded history"
        assert view.state.tree.is_member("ana", "lab/a")
        client = TestClient(create_app(view, publisher, default_tokens()))
        request = {
            "workload_id": "wl-http-1",
            "budget": "lab/a",
            "pools": ["p"],
            "gpus": 2,
            "min_runtime_s": 600,
        }
        response = client.post("/workloads", json=request, headers=ANA)
        assert response.status_code in (201, 202), response.text
        deadline = time.monotonic() + 20
        got = client.get("/workloads/wl-http-1", headers=ANA)
        while got.status_code == 404 and time.monotonic() < deadline:
            time.sleep(0.2)
            got = client.get("/workloads/wl-http-1", headers=ANA)
        assert got.status_code == 200
        assert got.json()["status"] == "pending"
        assert got.json()["submitter"] == "ana"
        again = client.post("/workloads", json=request, headers=ANA)
        assert again.status_code == 200
    finally:
        view.stop()

    reader = bus.subscriber("check", [TopicKind.WORKLOADS])
    found = []
    deadline = time.monotonic() + 30
    while not found and time.monotonic() < deadline:
        found = [
            d.envelope
            for d in reader.poll(timeout_s=1.0)
            if d.envelope.type == "fairshare.workload.submitted.v1"
        ]
    reader.close()
    assert [(e.subject, e.source, e.data.gpus) for e in found] == [
        ("wl-http-1", "fairshare-api", 2)
    ]
