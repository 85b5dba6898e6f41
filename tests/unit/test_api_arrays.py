"""Job arrays through the API over an in-memory log: one record for the whole array, an
idempotent retry, 409 for the same id with other content or taken ids, 422 for a bad
expression (nothing published), the summary, the elements as workloads (list, queue, why,
show), the throttle's reason, and cancelling a whole array or one element."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from fastapi.testclient import TestClient

from events.envelope import Envelope
from events.models import (
    NodeGpus,
    Placement,
    WorkloadFinished,
    WorkloadPlaced,
    WorkloadStarted,
)
from services.api import create_app, default_tokens
from services.bus.memory import InMemoryBroker, InMemoryPublisher
from services.bus.port import PublishError
from tests.factories import submitted
from tests.unit.test_api import ANA, BO, CHEN, NOW, World, build_world


@pytest.fixture
def world() -> World:
    return build_world()


def array_body(array_id: str = "sweep", **overrides: Any) -> dict[str, Any]:
    fields: dict[str, Any] = {
        "array_id": array_id,
        "indices": "0-9",
        "budget": "lab/a",
        "pools": ["p"],
        "gpus": 1,
        "min_runtime_s": 600,
        "spec": {"command": ["python", "sweep.py"], "name": "lr-sweep"},
    }
    fields.update(overrides)
    return fields


def _arrays(world: World) -> list[Any]:
    return [r for r in world.records() if r.type == "fairshare.workload_array.submitted.v1"]


def test_an_array_is_one_record_and_its_elements_are_workloads(world: World) -> None:
    response = world.client.post("/arrays", json=array_body(indices="5,0-3,9"), headers=ANA)
    assert response.status_code == 201, response.text
    view = response.json()
    assert (view["array_id"], view["indices"], view["count"]) == ("sweep", "0-3,5,9", 6)
    assert (view["first_element"], view["last_element"]) == ("sweep_0", "sweep_9")
    assert view["statuses"] == {"pending": 6}
    assert (view["submitter"], view["name"]) == ("ana", "lr-sweep")
    [record] = world.records()
    assert record.subject == "sweep"
    assert record.data.indices == "0-3,5,9"  # canonical: equal sets state equal facts
    element = world.client.get("/workloads/sweep_5", headers=ANA).json()
    assert (element["array_id"], element["array_index"], element["status"]) == (
        "sweep",
        5,
        "pending",
    )
    assert element["spec"] == {"command": ["python", "sweep.py"], "name": "lr-sweep"}
    assert world.client.get("/workloads/sweep_4", headers=ANA).status_code == 404


def test_a_retry_is_idempotent_and_other_content_is_a_conflict(world: World) -> None:
    assert world.client.post("/arrays", json=array_body(), headers=ANA).status_code == 201
    again = world.client.post("/arrays", json=array_body(indices="0,1-9"), headers=ANA)
    assert again.status_code == 200, again.text  # the same set, written otherwise
    other = world.client.post("/arrays", json=array_body(indices="0-10"), headers=ANA)
    assert other.status_code == 409
    assert "indices" in other.json()["detail"]
    throttled = world.client.post("/arrays", json=array_body(max_running=2), headers=ANA)
    assert throttled.status_code == 409
    assert "max_running" in throttled.json()["detail"]
    assert len(_arrays(world)) == 1


def test_ids_taken_by_workloads_are_refused_both_ways(world: World) -> None:
    world.fact(submitted("sweep_3", budget="lab/a", pools=("p",)), NOW - timedelta(minutes=1))
    clash = world.client.post("/arrays", json=array_body(), headers=ANA)
    assert clash.status_code == 409
    assert "sweep_3" in clash.json()["detail"]
    named = world.client.post("/arrays", json=array_body("pa1"), headers=ANA)
    assert named.status_code == 409  # pa1 is a workload
    assert world.client.post("/arrays", json=array_body("grid"), headers=ANA).status_code == 201
    workload = {"workload_id": "grid", "budget": "lab/a", "pools": ["p"], "gpus": 1}
    refused = world.client.post("/workloads", json={**workload, "min_runtime_s": 0}, headers=ANA)
    assert refused.status_code == 409
    assert "array" in refused.json()["detail"]
    assert len(_arrays(world)) == 1


@pytest.mark.parametrize(
    ("indices", "needle"),
    [
        ("9-0", "a range goes up"),
        ("0-9:0", "a step is at least 1"),
        ("a-b", "is not an index"),
        ("0-200000", "at most 100000 elements"),
        ("10000000", "indices go up to 9999999"),
    ],
)
def test_a_bad_expression_is_a_422_naming_it(world: World, indices: str, needle: str) -> None:
    response = world.client.post("/arrays", json=array_body(indices=indices), headers=ANA)
    assert response.status_code == 422, response.text
    [error] = response.json()["detail"]
    assert error["loc"] == ["body", "indices"]
    assert needle in error["msg"]
    assert world.records() == []


def test_the_checks_of_a_submission_hold_for_an_array(world: World) -> None:
    assert world.client.post("/arrays", json=array_body(), headers=BO).status_code == 403
    unknown = world.client.post("/arrays", json=array_body(pools=["nowhere"]), headers=ANA)
    assert unknown.status_code == 422
    too_long = "x" * 121  # the elements' ids would be over 128 characters
    assert world.client.post("/arrays", json=array_body(too_long), headers=ANA).status_code == 422
    assert world.records() == []


def test_list_and_queue_take_the_array_id(world: World) -> None:
    world.client.post("/arrays", json=array_body(indices="0-11", max_running=4), headers=ANA)
    listed = world.client.get("/workloads", params={"array": "sweep"}, headers=ANA).json()
    assert [w["workload_id"] for w in listed["workloads"]][:3] == ["sweep_0", "sweep_1", "sweep_2"]
    assert listed["total"] == 12
    queue = world.client.get("/queue", params={"array": "sweep"}, headers=ANA).json()
    [pool] = queue["pools"]
    entries = pool["pending"]
    assert [e["array_index"] for e in entries] == list(range(12))  # index order, 2 before 10
    queued, held = entries[:4], entries[4:]
    assert all(e["reason"] != "array-limit" for e in queued)
    assert {e["reason"] for e in held} == {"array-limit"}
    assert held[0]["position"] == pool["queue_length"] - 7
    assert "JobArrayTaskLimit" in held[0]["summary"]


def test_history_takes_the_array_id(world: World) -> None:
    world.client.post("/arrays", json=array_body(indices="0-3"), headers=ANA)
    for index in (0, 2):
        _run(world, f"sweep_{index}", gpu=2 + index // 2)
        world.fact(
            WorkloadFinished(workload_id=f"sweep_{index}", attempt=1, outcome="succeeded"),
            NOW - timedelta(seconds=10 - index),
        )
    ended = world.client.get("/history", params={"array": "sweep"}, headers=ANA).json()
    assert [w["workload_id"] for w in ended["workloads"]] == ["sweep_2", "sweep_0"]
    assert ended["total"] == 2
    everything = world.client.get("/history", headers=ANA).json()
    assert everything["total"] > 2  # the world's other finished work, not of the array


def test_why_and_show_of_a_held_element(world: World) -> None:
    world.client.post("/arrays", json=array_body(max_running=1), headers=ANA)
    why = world.client.get("/workloads/sweep_5/why", headers=ANA).json()
    [pending] = why["pending"]
    assert pending["reason"] == "array-limit"
    [reason] = pending["reasons"]
    assert (reason["array_id"], reason["max_running"], reason["running"]) == ("sweep", 1, 0)
    assert world.client.get("/workloads/sweep_5", headers=ANA).json()["held_by_array"]
    assert not world.client.get("/workloads/sweep_0", headers=ANA).json()["held_by_array"]
    summary = world.client.get("/arrays/sweep", headers=ANA).json()
    assert (summary["held"], summary["running"], summary["max_running"]) == (9, 0, 1)
    assert world.client.get("/arrays/nope", headers=ANA).status_code == 404


def _run(world: World, workload_id: str, gpu: int) -> None:
    placement = Placement(nodes=(NodeGpus(node="n2", gpus=(gpu,)),))
    for data in (
        WorkloadPlaced(
            workload_id=workload_id,
            attempt=1,
            pool="p",
            placement=placement,
            allocated=True,
            command_id=f"place:{workload_id}:1",
        ),
        WorkloadStarted(
            workload_id=workload_id, attempt=1, pool="p", placement=placement, allocated=True
        ),
    ):
        world.fact(data, NOW - timedelta(seconds=30))


def test_cancel_of_the_array_cancels_every_element_left(world: World) -> None:
    world.client.post("/arrays", json=array_body(indices="0-4"), headers=ANA)
    _run(world, "sweep_0", 2)
    one = world.client.post("/workloads/sweep_4/cancel", json={}, headers=ANA)
    assert one.status_code == 202, one.text
    before = len(world.records())
    response = world.client.post("/arrays/sweep/cancel", json={"reason": "bad lr"}, headers=CHEN)
    assert response.status_code == 202, response.text
    answer = response.json()
    assert (answer["cancelled"], answer["already_cancelled"], answer["ended"]) == (4, 1, 0)
    assert answer["visible"]
    cancels = [r for r in world.records() if r.type == "fairshare.workload.cancelled.v1"]
    assert sorted(r.subject for r in cancels if r.data.reason == "bad lr") == [
        "sweep_0",
        "sweep_1",
        "sweep_2",
        "sweep_3",
    ]
    summary = world.client.get("/arrays/sweep", headers=ANA).json()
    assert summary["statuses"] == {"cancelled": 4, "running": 1}  # stopped by the scheduler
    again = world.client.post("/arrays/sweep/cancel", json={}, headers=ANA)
    assert again.status_code == 200
    assert again.json()["cancelled"] == 0
    assert len(world.records()) == before + 4


def test_only_who_may_cancel_its_work_cancels_an_array(world: World) -> None:
    world.client.post("/arrays", json=array_body(), headers=ANA)
    assert world.client.post("/arrays/sweep/cancel", json={}, headers=BO).status_code == 403
    assert world.client.post("/arrays/nope/cancel", json={}, headers=ANA).status_code == 404


class RefusesOnce(InMemoryPublisher):
    """A log that refuses the first write (a broker away): nothing of it is kept."""

    def __init__(self, broker: InMemoryBroker) -> None:
        super().__init__(broker)
        self.refused = False

    def publish(self, envelope: Envelope[Any]) -> None:
        if not self.refused:
            self.refused = True
            raise PublishError("Local: Broker transport failure")
        super().publish(envelope)


def test_a_refused_write_leaves_nothing_and_its_retry_records_the_whole_array() -> None:
    w = build_world()
    app = create_app(w.view, RefusesOnce(w.broker), default_tokens(), clock=lambda: NOW.timestamp())
    client = TestClient(app)
    refused = client.post("/arrays", json=array_body(indices="0-999"), headers=ANA)
    assert refused.status_code == 503
    assert "Retry the same request with the same array_id 'sweep'" in refused.json()["detail"]
    assert w.records() == []
    assert "sweep" not in w.view.state.cluster.arrays
    retried = client.post("/arrays", json=array_body(indices="0-999"), headers=ANA)
    assert retried.status_code == 201, retried.text
    assert retried.json()["statuses"] == {"pending": 1000}
    assert len(w.records()) == 1


def _demand(world: World, budget: str) -> int:
    report = world.client.get("/budgets", params={"pool": "p"}, headers=ANA).json()
    [found] = [b for b in report["budgets"] if b["budget"] == budget]
    return int(found["pools"]["p"]["demand_gpus"])


def test_held_elements_want_their_gpus_as_the_read_models_count_them(world: World) -> None:
    """Demand is what a budget's pending and running work asks for: the throttle is its
    submitter's choice of pace, not less work (the read models count every pending element)."""
    before = _demand(world, "lab/a")
    world.client.post("/arrays", json=array_body(max_running=2, gpus=3), headers=ANA)
    assert _demand(world, "lab/a") == before + 10 * 3
