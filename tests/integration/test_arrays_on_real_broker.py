"""Job arrays through the API on a real broker (the Kafka-backed LiveView and publisher): a
10,000-element array is one record, accepted within the bound the issue sets (10 s); a retry
is idempotent and other content a 409, whatever the view has folded; a cancel of the array
reaches every element, each on its own partition."""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from events import TopicKind
from events.envelope import new_event
from events.models import BudgetCreated, MembershipGranted, NodeRegistered
from services.agents.agent import AgentSettings, ClusterAgent
from services.agents.local import LocalAdapter
from services.api import LiveView, create_app, default_tokens
from tests.integration.cluster_stack import ClusterStack, wait_until
from tests.integration.kafka_bus import KafkaBus

pytestmark = [pytest.mark.broker]

ANA = {"Authorization": "Bearer ana-token"}
#: What the issue asks of an array of 10,000: accepted in at most this long.
ACCEPT_BOUND_S = 10.0


@pytest.fixture
def api(bus: KafkaBus) -> Iterator[TestClient]:
    seed = bus.publisher()
    now = datetime.now(UTC)
    for data in (
        BudgetCreated(budget="lab", created_by="admin"),
        BudgetCreated(budget="lab/a", created_by="admin"),
        MembershipGranted(budget="lab/a", user="ana", role="member", granted_by="admin"),
        NodeRegistered(node="n1", cluster="c", pool="p", gpus=8, gpu_type="H100"),
    ):
        seed.publish(new_event(data, source="tests", time=now))
    seed.flush()
    view = LiveView.from_kafka(bus.broker.bootstrap, bus.topics)
    view.start()
    try:
        assert view.wait_caught_up(60.0), "the view did not read the seeded history"
        yield TestClient(create_app(view, bus.publisher(), default_tokens()))
    finally:
        view.stop()


def array_body(array_id: str, indices: str, **overrides: object) -> dict[str, object]:
    return {
        "array_id": array_id,
        "indices": indices,
        "budget": "lab/a",
        "pools": ["p"],
        "gpus": 1,
        "min_runtime_s": 600,
        "spec": {"command": ["python", "sweep.py"]},
        **overrides,
    }


def _until(check: object, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not check() and time.monotonic() < deadline:  # type: ignore[operator]
        time.sleep(0.1)


def test_a_10000_element_array_is_one_record_accepted_within_the_bound(
    api: TestClient, bus: KafkaBus
) -> None:
    body = array_body("sweep", "0-9999", max_running=50)
    started = time.monotonic()
    response = api.post("/arrays", json=body, headers=ANA)
    took = time.monotonic() - started
    assert response.status_code in (201, 202), response.text
    assert took < ACCEPT_BOUND_S, f"accepting 10,000 elements took {took:.2f} s"
    print(f"\n10,000-element array accepted in {took:.3f} s ({response.status_code})")
    _until(lambda: api.get("/arrays/sweep", headers=ANA).status_code == 200)
    summary = api.get("/arrays/sweep", headers=ANA).json()
    assert (summary["count"], summary["statuses"]) == (10_000, {"pending": 10_000})
    assert (summary["held"], summary["max_running"]) == (10_000 - 50, 50)
    again = api.post("/arrays", json=body, headers=ANA)
    assert again.status_code == 200, again.text
    other = api.post("/arrays", json={**body, "max_running": 60}, headers=ANA)
    assert other.status_code == 409
    element = api.get("/workloads/sweep_9999", headers=ANA).json()
    assert (element["array_id"], element["array_index"]) == ("sweep", 9999)

    reader = bus.subscriber("check", [TopicKind.WORKLOADS])
    found: list[str] = []
    deadline = time.monotonic() + 30
    while not found and time.monotonic() < deadline:
        found = [d.envelope.subject for d in reader.poll(timeout_s=1.0)]
    reader.close()
    assert found == ["sweep"]  # one record for the whole array, however often it was sent


def test_cancel_by_array_id_reaches_every_element(api: TestClient) -> None:
    assert api.post("/arrays", json=array_body("grid", "0-999:3"), headers=ANA).status_code in (
        201,
        202,
    )
    _until(lambda: api.get("/arrays/grid", headers=ANA).status_code == 200)
    one = api.post("/workloads/grid_3/cancel", json={}, headers=ANA)
    assert one.status_code == 202, one.text
    response = api.post("/arrays/grid/cancel", json={"reason": "wrong grid"}, headers=ANA)
    assert response.status_code == 202, response.text
    answer = response.json()
    assert answer["cancelled"] + answer["already_cancelled"] == 334
    _until(lambda: api.get("/arrays/grid", headers=ANA).json()["statuses"] == {"cancelled": 334})
    assert api.get("/arrays/grid", headers=ANA).json()["statuses"] == {"cancelled": 334}
    again = api.post("/arrays/grid/cancel", json={}, headers=ANA)
    assert (again.status_code, again.json()["cancelled"]) == (200, 0)


def test_elements_run_with_their_index_at_most_k_at_once(bus: KafkaBus, tmp_path: Path) -> None:
    """The whole path: the API writes the array, the scheduler places at most K elements at
    once, the local agent runs each as a process that sees its index, and each next element
    starts when one ends."""
    stack = ClusterStack(bus, "local")
    stack.seed_lab()
    out = tmp_path / "out"
    out.mkdir()
    agent = ClusterAgent(
        LocalAdapter("box", virtual_gpus=4, use_nvml=False, log_dir=tmp_path / "logs"),
        bus.publisher(),
        AgentSettings("local", "local", heartbeat_s=0.5),
    )
    try:
        stack.run_agent(agent)
        stack.start_scheduler()
        client = stack.start_api()
        script = (
            f"date +%s.%N > {out}/$FAIRSHARE_ARRAY_INDEX.start; sleep 1; "
            f'echo "$FAIRSHARE_ARRAY_ID $FAIRSHARE_ARRAY_INDEX $FAIRSHARE_ARRAY_COUNT" '
            f"> {out}/$FAIRSHARE_ARRAY_INDEX; date +%s.%N > {out}/$FAIRSHARE_ARRAY_INDEX.end"
        )
        body = array_body("run", "0-5", max_running=2, pools=["local"], spec={"command": script})
        response = client.post("/arrays", json=body, headers=ANA)
        assert response.status_code in (201, 202), response.text
        wait_until(
            lambda: (
                client.get("/arrays/run", headers=ANA).json().get("statuses") == {"succeeded": 6}
            ),
            "every element to succeed",
            timeout_s=120,
        )
    finally:
        stack.close()
    assert sorted(p.read_text().split() for p in out.glob("[0-9]")) == [
        ["run", str(i), "6"] for i in range(6)
    ]
    spans = [
        (float((out / f"{i}.start").read_text()), float((out / f"{i}.end").read_text()))
        for i in range(6)
    ]
    for at, _end in spans:  # at each start, at most 2 elements were between start and end
        assert sum(1 for start, end in spans if start <= at < end) <= 2
