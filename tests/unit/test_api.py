"""The HTTP API over an in-memory log: what it publishes, what it refuses (publishing nothing),
and what it says about the queue, preemptions, budgets and nodes."""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from fastapi.testclient import TestClient

from events.envelope import Envelope, new_event
from events.models import (
    BudgetCreated,
    BudgetStanding,
    BudgetUsage,
    DecisionRecord,
    EventData,
    InputPosition,
    LedgerCharge,
    MembershipGranted,
    NodeCordoned,
    NodeGpus,
    NodeRegistered,
    Placement,
    PreemptCommand,
    UsageSnapshot,
    WorkloadPlaced,
    WorkloadPreempted,
    WorkloadStarted,
)
from events.serde import decode_binary
from projections.live_state import LiveState
from services.api import app as api_app
from services.api import create_app, default_tokens
from services.api.view import VIEW_KINDS, LiveView
from services.bus.kafka import FatalBusError
from services.bus.memory import InMemoryBroker, InMemoryPublisher, InMemorySubscriber
from services.bus.port import PublishError
from tests.factories import submitted

T0 = datetime(2026, 11, 2, 9, 0, tzinfo=UTC)
NOW = T0 + timedelta(hours=2)
WEEK = 7 * 24 * 3600

ADMIN = {"Authorization": "Bearer admin-token"}
ANA = {"Authorization": "Bearer ana-token"}  # member of lab/a
BO = {"Authorization": "Bearer bo-token"}  # member of lab/b
CHEN = {"Authorization": "Bearer chen-token"}  # manager of lab


class World:
    """Facts fed straight into the API's view; the API's own writes go to the in-memory log
    (``records()``), from which the view reads them back."""

    def __init__(self) -> None:
        self.broker = InMemoryBroker()
        self.publisher = InMemoryPublisher(self.broker)
        self.view = LiveView(InMemorySubscriber(self.broker, "api-view", VIEW_KINDS))
        self.app = create_app(
            self.view, self.publisher, default_tokens(), clock=lambda: NOW.timestamp()
        )
        self.client = TestClient(self.app)
        self._seq = 0

    def fact(self, data: EventData, at: datetime) -> None:
        self._seq += 1
        envelope: Envelope[Any] = new_event(data, source="tests", time=at)
        assert self.view.feed(envelope) == 1, data

    def records(self) -> list[Envelope[Any]]:
        return [
            decode_binary(record.value, record.headers)
            for topic in list(self.broker._logs)
            for record in self.broker.records(topic)
        ]


def build_world() -> World:
    """Two budgets under lab, lab/b over-served; pool p: n1 (4 GPUs) held by r1 of lab/b inside
    its contract, n2 (4 GPUs) half held by r2 of lab/a inside its contract, n3 (4 GPUs)
    cordoned; pending: pb1 (lab/b, 1 GPU, submitted first) and pa1 (lab/a, 4 GPUs); v1 (lab/b)
    was preempted earlier to make room for pa0."""
    # Long on purpose: the world is one story told fact by fact, in log order; the API tests
    # assert against exactly this history.
    w = World()
    t = T0 - timedelta(days=1)
    for budget in ("lab", "lab/a", "lab/b"):
        w.fact(BudgetCreated(budget=budget, created_by="admin"), t)
    w.fact(MembershipGranted(budget="lab/a", user="ana", role="member", granted_by="admin"), t)
    w.fact(MembershipGranted(budget="lab/b", user="bo", role="member", granted_by="admin"), t)
    w.fact(MembershipGranted(budget="lab", user="chen", role="manager", granted_by="admin"), t)
    for name in ("n1", "n2", "n3"):
        w.fact(NodeRegistered(node=name, cluster="c", pool="p", gpus=4, gpu_type="H100"), t)
    w.fact(NodeCordoned(node="n3", cordoned_by="admin", reason="firmware"), t)
    w.fact(
        UsageSnapshot(
            pool="p",
            window_start=T0 - timedelta(days=7),
            window_end=T0,
            as_of=(),
            budgets=(BudgetUsage(budget="lab/b", allocated_gpu_s=100_000, unallocated_gpu_s=0),),
        ),
        T0,
    )
    # v1: ran on n1, preempted for pa0 by pass 3
    on_n1 = Placement(nodes=(NodeGpus(node="n1", gpus=(0, 1, 2, 3)),))
    w.fact(submitted("v1", budget="lab/b", pools=("p",), gpus=4, resumable=False), T0)
    w.fact(
        WorkloadPlaced(
            workload_id="v1", attempt=1, pool="p", placement=on_n1, allocated=True, command_id="x"
        ),
        T0 + timedelta(minutes=1),
    )
    w.fact(
        WorkloadStarted(workload_id="v1", attempt=1, pool="p", placement=on_n1, allocated=True),
        T0 + timedelta(minutes=2),
    )
    w.fact(
        PreemptCommand(
            command_id="preempt:v1:1",
            cluster="c",
            pool="p",
            workload_id="v1",
            attempt=1,
            requeue=False,
            decision=DecisionRecord(
                pass_id=3,
                input_position=(
                    InputPosition(topic="fairshare.workloads", partition=1, offset=17),
                ),
                reason="preempt-for",
                preemptor="pa0",
                budgets=(
                    BudgetStanding(
                        budget="lab/a", rank=1, share=0.5, usage_gpu_s=0, usage_ratio=0.0
                    ),
                    BudgetStanding(
                        budget="lab/b", rank=2, share=0.5, usage_gpu_s=100_000, usage_ratio=0.0276
                    ),
                ),
                detail="v1 (lab/b, past its contract) makes room for pa0",
            ),
        ),
        T0 + timedelta(minutes=30),
    )
    w.fact(
        WorkloadPreempted(workload_id="v1", attempt=1, command_id="preempt:v1:1", ran_s=1680),
        T0 + timedelta(minutes=31),
    )
    # r1 (lab/b) on n1 and r2 (lab/a) on n2, both inside their contracts
    for wid, budget, node, gpus, started in (
        ("r1", "lab/b", "n1", (0, 1, 2, 3), NOW - timedelta(seconds=600)),
        ("r2", "lab/a", "n2", (0, 1), NOW - timedelta(seconds=100)),
    ):
        placement = Placement(nodes=(NodeGpus(node=node, gpus=gpus),))
        w.fact(
            submitted(
                wid,
                budget=budget,
                pools=("p",),
                gpus=len(gpus),
                min_runtime_s=3600,
                submitter="ana" if budget == "lab/a" else "bo",
            ),
            T0 + timedelta(minutes=40),
        )
        w.fact(
            WorkloadPlaced(
                workload_id=wid,
                attempt=1,
                pool="p",
                placement=placement,
                allocated=True,
                command_id=f"place:{wid}:1",
            ),
            started,
        )
        w.fact(
            WorkloadStarted(
                workload_id=wid, attempt=1, pool="p", placement=placement, allocated=True
            ),
            started,
        )
    w.fact(submitted("pb1", budget="lab/b", pools=("p",), gpus=1), NOW - timedelta(minutes=20))
    w.fact(
        submitted("pa1", budget="lab/a", pools=("p",), gpus=4, submitter="ana"),
        NOW - timedelta(minutes=10),
    )
    assert not w.view.state.rejected, w.view.state.rejected
    return w


@pytest.fixture
def world() -> Iterator[World]:
    return build_world()


def body(workload_id: str = "job-1", **overrides: Any) -> dict[str, Any]:
    fields: dict[str, Any] = {
        "workload_id": workload_id,
        "budget": "lab/a",
        "pools": ["p"],
        "gpus": 2,
        "min_runtime_s": 600,
        "spec": {"command": ["python", "train.py"]},
    }
    fields.update(overrides)
    return fields


# -- submit -----------------------------------------------------------------------------------
def test_submit_publishes_once_and_is_visible(world: World) -> None:
    response = world.client.post("/workloads", json=body(), headers=ANA)
    assert response.status_code == 201, response.text
    assert response.json()["status"] == "pending"
    assert response.json()["submitter"] == "ana"
    [record] = world.records()
    assert record.type == "fairshare.workload.submitted.v1"
    assert record.data.workload_id == "job-1"
    assert record.data.submitter == "ana"
    assert record.source == "fairshare-api"
    got = world.client.get("/workloads/job-1", headers=BO)
    assert got.status_code == 200
    assert got.json()["budget"] == "lab/a"


def test_a_spec_its_pools_executor_cannot_run_is_refused_naming_the_pool(world: World) -> None:
    """A pool whose nodes run work as Kubernetes pods refuses a spec that makes no pod (422,
    nothing published); the same spec in a pool of the simulated executor is fine."""
    for name in ("k1", "k2"):
        node = NodeRegistered(
            node=name, cluster="k8s", pool="k", gpus=8, gpu_type="H100", executor="kubernetes"
        )
        world.fact(node, T0)
    refused = world.client.post(
        "/workloads", json=body(pools=["p", "k"], spec={"cpu": "lots"}), headers=ANA
    )
    assert refused.status_code == 422, refused.text
    assert "pool 'k' (pools[1]) runs on kubernetes" in refused.text
    assert "spec.cpu" in refused.text
    assert world.records() == []
    fine = world.client.post("/workloads", json=body(spec={"cpu": "lots"}), headers=ANA)
    assert fine.status_code == 201, fine.text


def test_a_gang_no_pool_could_ever_hold_is_refused_naming_the_most(world: World) -> None:
    """Pool p has three 4-GPU nodes (one cordoned: still the pool's): 12 GPUs at most, ever.
    100,000 GPUs would wait forever and swamp every demand figure; 12 is fine (whole nodes),
    and so is a gang that only one of its pools could hold."""
    refused = world.client.post("/workloads", json=body(gpus=100_000), headers=ANA)
    assert refused.status_code == 422, refused.text
    assert refused.json()["detail"][0]["loc"] == ["body", "gpus"]
    assert "can never start: the most any of its pools could ever hold is 12" in refused.text
    assert world.records() == []
    too_many = world.client.post("/workloads", json=body("j13", gpus=13), headers=ANA)
    assert too_many.status_code == 422, too_many.text
    assert world.client.post("/workloads", json=body("j12", gpus=12), headers=ANA).is_success
    for name in ("k1", "k2"):
        node = NodeRegistered(node=name, cluster="k8s", pool="k", gpus=8, gpu_type="H100")
        world.fact(node, T0)
    either = world.client.post(
        "/workloads", json=body("j16", gpus=16, pools=["p", "k"]), headers=ANA
    )
    assert either.is_success, either.text


def test_work_already_in_the_log_that_no_pool_could_hold_is_kept_out_of_demand(
    world: World,
) -> None:
    """A 100,000-GPU gang that came in before the door refused it (foreign work, an older
    release) waits "can never start" and wants nothing: ``/budgets``' demand and what lab/a is
    owed stay as they were, and ``why`` still names it. Once a pool could hold a waiting
    gang (a node registers), it wants its GPUs again."""
    before = world.client.get("/budgets", params={"pool": "p"}, headers=ANA).json()
    world.fact(submitted("huge", budget="lab/a", pools=("p",), gpus=100_000, submitter="ana"), NOW)
    world.fact(submitted("j16", budget="lab/a", pools=("p",), gpus=16, submitter="ana"), NOW)
    after = world.client.get("/budgets", params={"pool": "p"}, headers=ANA).json()
    a = {b["budget"]: b for b in after["budgets"]}["lab/a"]["pools"]["p"]
    a0 = {b["budget"]: b for b in before["budgets"]}["lab/a"]["pools"]["p"]
    assert (a["demand_gpus"], a["entitled_gpus"]) == (a0["demand_gpus"], a0["entitled_gpus"])
    why = world.client.get("/workloads/huge/why", headers=ANA)
    assert why.status_code == 200, why.text
    assert "never" in why.text, why.text
    world.fact(NodeRegistered(node="n4", cluster="c", pool="p", gpus=4, gpu_type="H100"), NOW)
    grown = world.client.get("/budgets", params={"pool": "p"}, headers=ANA).json()
    a = {b["budget"]: b for b in grown["budgets"]}["lab/a"]["pools"]["p"]
    assert a["demand_gpus"] == a0["demand_gpus"] + 16


def test_a_spec_without_a_command_is_refused_where_the_executor_runs_one(world: World) -> None:
    """The local agent and Slurm run the spec's command: with none, the run would fail once
    placed. The simulated executor (pool p) runs anything."""
    for name, executor in (("l1", "local"), ("s1", "slurm")):
        node = NodeRegistered(
            node=name, cluster=name, pool=name, gpus=4, gpu_type="H100", executor=executor
        )
        world.fact(node, T0)
    for pool in ("l1", "s1"):
        for spec in ({}, {"command": "  "}, {"command": []}, {"command": [1]}):
            refused = world.client.post(
                "/workloads", json=body(f"no-command-{pool}", pools=[pool], spec=spec), headers=ANA
            )
            assert refused.status_code == 422, (pool, spec, refused.text)
            assert "spec.command" in refused.text
    assert world.records() == []
    runs = world.client.post("/workloads", json=body("cmd", pools=["l1"]), headers=ANA)
    assert runs.status_code == 201, runs.text
    # pool p's nodes name no executor (facts from before executors were stated): unchecked
    assert world.client.post("/workloads", json=body("old", spec={}), headers=ANA).is_success


def test_the_simulated_cluster_needs_a_duration_or_a_command(world: World) -> None:
    """``fairshare up``'s demo runs nothing: a spec with neither a duration nor a command was
    accepted and "ran" until cancelled, with nothing to say why."""
    node = NodeRegistered(
        node="d1", cluster="demo", pool="demo", gpus=4, gpu_type="H100", executor="simulated"
    )
    world.fact(node, T0)
    for spec in ({}, {"duration_s": -1}, {"duration_s": "ten"}, {"duration_s": True}):
        refused = world.client.post(
            "/workloads", json=body("sim", pools=["demo"], spec=spec), headers=ANA
        )
        assert refused.status_code == 422, (spec, refused.text)
        assert "duration_s" in refused.text
    assert world.records() == []
    for i, spec in enumerate(({"duration_s": 60}, {"command": ["python", "train.py"]})):
        taken = world.client.post(
            "/workloads", json=body(f"sim{i}", pools=["demo"], spec=spec), headers=ANA
        )
        assert taken.status_code == 201, taken.text


def test_a_unique_prefix_of_a_workload_id_names_it_and_an_ambiguous_one_says_so(
    world: World,
) -> None:
    """As git takes a commit's unique prefix: ``why 07da9312`` was a 404."""
    for workload_id in ("07da9312-aaaa", "07da9312-bbbb", "5c1e77d0-cccc"):
        assert world.client.post("/workloads", json=body(workload_id), headers=ANA).is_success
    one = world.client.get("/workloads/5c1e", headers=ANA)
    assert one.status_code == 200, one.text
    assert one.json()["workload_id"] == "5c1e77d0-cccc"
    why = world.client.get("/workloads/5c1e77/why", headers=ANA)
    assert why.status_code == 200, why.text
    assert why.json()["workload_id"] == "5c1e77d0-cccc"
    both = world.client.get("/workloads/07da9312/why", headers=ANA)
    assert both.status_code == 404
    assert "ambiguous: 2 workloads begin with it (07da9312-aaaa, 07da9312-bbbb)" in both.text
    assert world.client.get("/workloads/07da9312-b", headers=ANA).json()["workload_id"] == (
        "07da9312-bbbb"
    )
    assert world.client.get("/workloads/5c1", headers=ANA).status_code == 404  # too short


def test_a_running_workload_shows_what_it_used_since_its_charges_stop(world: World) -> None:
    """r1 (4 GPUs) started 600 s ago and no hour of it is charged yet: ``show`` said
    ``charged_gpu_s 0`` while ``/budgets`` counted its use. Once an hour of it is charged, the
    running part counts from that hour's end; pending work has none."""
    r1 = world.client.get("/workloads/r1", headers=BO).json()
    assert (r1["charged_gpu_s"], r1["running_gpu_s"]) == (0, 4 * 600)
    started = NOW.timestamp() - 600
    hour = int(started) // 3600 * 3600
    charge = LedgerCharge(
        charge_id=f"charge:r1:1:{hour}:0",
        workload_id="r1",
        budget="lab/b",
        pool="p",
        bucket_start=datetime.fromtimestamp(hour, UTC),
        kind="allocated",
        debit_account="budget:lab/b",
        credit_account="capacity:p",
        gpu_seconds=4 * int(hour + 3600 - started),
        amount=4 * int(hour + 3600 - started),
    )
    assert hour + 3600 == NOW.timestamp()  # the hour r1 started in has closed: charged
    world.fact(charge, NOW)
    r1 = world.client.get("/workloads/r1", headers=BO).json()
    assert (r1["charged_gpu_s"], r1["running_gpu_s"]) == (4 * 600, 0)
    assert world.client.get("/workloads/pb1", headers=BO).json()["running_gpu_s"] == 0


def test_metrics_graph_the_pools_budgets_and_queues_as_the_api_answers_them(
    world: World,
) -> None:
    """The API's /metrics had request and lag metrics only: an operator could not graph
    capacity, held GPUs, a budget's usage or what it is owed now, nor the queue by reason."""
    text = world.client.get("/metrics").text
    samples = {
        line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith(("fairshare_pool_", "fairshare_budget_", "fairshare_queue_"))
    }
    assert samples['fairshare_pool_capacity_gpus{pool="p"}'] == 12
    assert samples['fairshare_pool_held_gpus{kind="allocated",pool="p"}'] == 6  # r1 4, r2 2
    budgets = world.client.get("/budgets", headers=ANA).json()["budgets"]
    for b in budgets:
        figures = b["pools"]["p"]
        labels = f'budget="{b["budget"]}",pool="p"'
        assert samples[f"fairshare_budget_usage_gpu_seconds{{{labels}}}"] == figures["usage_gpu_s"]
        assert samples[f"fairshare_budget_demand_gpus{{{labels}}}"] == figures["demand_gpus"]
        assert samples[f"fairshare_budget_owed_gpus{{{labels}}}"] == figures["entitled_gpus"]
    queue = world.client.get("/queue", headers=ANA).json()["pools"][0]
    by_reason: dict[str, int] = {}
    for entry in queue["pending"]:
        by_reason[entry["reason"]] = by_reason.get(entry["reason"], 0) + 1
    assert {
        key.split('reason="')[1].rstrip('"}'): value
        for key, value in samples.items()
        if key.startswith("fairshare_queue_length")
    } == by_reason
    openmetrics = world.client.get(
        "/metrics", headers={"Accept": "application/openmetrics-text; version=1.0.0"}
    ).text
    assert openmetrics.count("# EOF") == 1
    assert "fairshare_queue_length" in openmetrics


def test_a_spec_posing_as_a_clusters_native_work_is_refused(world: World) -> None:
    """Only a cluster's agent states a native origin (the Job whose pods it binds and
    suspends): through the API it would let a user act on another namespace's Job."""
    origin = {
        "cluster": "k8s", "kind": "Job", "namespace": "other-team", "name": "train",
        "uid": "0f4c5b0e-5d1f-4d5c-9a63-0c8f8e0b1a2b", "gpus_per_pod": 1,
    }  # fmt: skip
    refused = world.client.post("/workloads", json=body(spec={"native": origin}), headers=ANA)
    assert refused.status_code == 422, refused.text
    assert refused.json()["detail"][0]["loc"] == ["body", "spec", "native"]
    assert world.records() == []


def test_submit_is_idempotent_on_the_client_id(world: World) -> None:
    assert world.client.post("/workloads", json=body(), headers=ANA).status_code == 201
    again = world.client.post("/workloads", json=body(), headers=ANA)
    assert again.status_code == 200, again.text
    assert again.json()["workload_id"] == "job-1"
    assert len(world.records()) == 1


def test_same_id_other_content_is_a_conflict(world: World) -> None:
    assert world.client.post("/workloads", json=body(), headers=ANA).status_code == 201
    other = world.client.post("/workloads", json=body(gpus=3), headers=ANA)
    assert other.status_code == 409
    assert "gpus" in other.json()["detail"]
    assert len(world.records()) == 1


def test_a_manager_of_an_ancestor_may_submit(world: World) -> None:
    assert world.client.post("/workloads", json=body(), headers=CHEN).status_code == 201


@pytest.mark.parametrize(
    ("headers", "payload", "code", "needle"),
    [
        ({}, body(), 401, "missing bearer token"),
        ({"Authorization": "Bearer nope-nope-nope"}, body(), 401, "unknown bearer token"),
        ({"Authorization": "Basic YW5hOng="}, body(), 401, "missing bearer token"),
        (BO, body(), 403, "bo is not a member of lab/a"),
        (ANA, body(budget="lab/b"), 403, "ana is not a member of lab/b"),
        (ANA, body(budget="lab/zz"), 404, "unknown budget 'lab/zz'"),
    ],
)
def test_submit_refusals_publish_nothing(
    world: World, headers: dict[str, str], payload: dict[str, Any], code: int, needle: str
) -> None:
    response = world.client.post("/workloads", json=payload, headers=headers)
    assert response.status_code == code, response.text
    assert needle in response.json()["detail"]
    assert world.records() == []


@pytest.mark.parametrize(
    ("payload", "field"),
    [
        (body(gpus="3"), ["body", "gpus"]),
        (body(gpus=0), ["body", "gpus"]),
        (body(min_runtime_s=9 * 3600), ["body", "min_runtime_s"]),
        (body(workload_id="has space"), ["body", "workload_id"]),
        (body(pools=[]), ["body", "pools"]),
        (body(pools=["p", "p"]), ["body", "pools"]),
        (body(gang="diagonal"), ["body", "gang"]),
        (body(colour="red"), ["body", "colour"]),
        (body(budget="lab"), ["body", "budget"]),  # not a leaf
        (body(pools=["p", "q"]), ["body", "pools", 1]),  # unknown pool
    ],
)
def test_invalid_submissions_name_the_field(
    world: World, payload: dict[str, Any], field: list[Any]
) -> None:
    response = world.client.post("/workloads", json=payload, headers=ANA)
    assert response.status_code == 422, response.text
    locations = [error["loc"] for error in response.json()["detail"]]
    assert field in locations, locations
    assert world.records() == []


def test_publish_failure_is_503_and_the_same_id_can_be_retried(world: World) -> None:
    world.publisher.unavailable = True
    failed = world.client.post("/workloads", json=body(), headers=ANA)
    assert failed.status_code == 503
    assert "same workload_id 'job-1'" in failed.json()["detail"]
    assert world.records() == []
    world.publisher.unavailable = False
    retried = world.client.post("/workloads", json=body(), headers=ANA)
    assert retried.status_code == 201
    assert len(world.records()) == 1


def test_while_the_view_reads_the_history_only_health_answers(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The API listens at once; until its view has read the log's history every request but
    /health is a 503 to retry (no read answers from half the log), and /health says so."""
    monkeypatch.setattr(type(world.view), "caught_up", property(lambda _self: False))
    health = world.client.get("/health")
    assert health.status_code == 200
    assert health.json()["caught_up"] is False
    for method, path in (("GET", "/queue"), ("GET", "/budgets"), ("POST", "/workloads")):
        refused = world.client.request(method, path, json=body(), headers=ANA)
        assert refused.status_code == 503, (path, refused.text)
        assert refused.headers["Retry-After"] == "2"
        assert "still reading the event log" in refused.json()["detail"]
    assert world.client.get("/openapi.json").status_code == 200
    assert world.records() == []  # nothing was written


class FlushFails(InMemoryPublisher):
    def flush(self, timeout_s: float = 30.0) -> None:
        raise PublishError("1 event(s) not acknowledged within 10s")


def test_flush_failure_is_503() -> None:
    w = build_world()
    app = create_app(
        w.view, FlushFails(InMemoryBroker()), default_tokens(), clock=lambda: NOW.timestamp()
    )
    response = TestClient(app).post("/workloads", json=body(), headers=ANA)
    assert response.status_code == 503
    assert "not acknowledged" in response.json()["detail"]


class ClientDead(InMemoryPublisher):
    def flush(self, timeout_s: float = 30.0) -> None:
        raise FatalBusError("fatal error: out of order sequence number")


def test_a_dead_bus_client_answers_503_and_ends_the_api(monkeypatch: pytest.MonkeyPatch) -> None:
    """Crash-only: no zombie API answering 500 to every write; its supervisor restarts it."""
    ended: list[int] = []
    monkeypatch.setattr(api_app, "end_process", ended.append)
    monkeypatch.setattr(api_app, "EXIT_DELAY_S", 0.0)
    w = build_world()
    app = create_app(w.view, ClientDead(InMemoryBroker()), default_tokens(), clock=lambda: 0.0)
    response = TestClient(app).post("/workloads", json=body(), headers=ANA)
    assert response.status_code == 503
    assert response.headers["Retry-After"] == "2"
    deadline = time.monotonic() + 5
    while not ended and time.monotonic() < deadline:
        time.sleep(0.01)
    assert ended == [70]


def test_unseen_write_is_202_accepted(world: World) -> None:
    """A log the view does not read: the write is recorded, but not visible in time."""
    elsewhere = InMemoryPublisher(InMemoryBroker())
    app = create_app(
        world.view,
        elsewhere,
        default_tokens(),
        clock=lambda: NOW.timestamp(),
        read_your_writes_s=0.05,
    )
    response = TestClient(app).post("/workloads", json=body(), headers=ANA)
    assert response.status_code == 202
    assert response.json()["status"] == "accepted"


# -- cancel -----------------------------------------------------------------------------------
def test_cancel_by_its_submitter_only(world: World) -> None:
    refused = world.client.post("/workloads/pa1/cancel", headers=BO)
    assert refused.status_code == 403
    assert world.records() == []
    assert world.client.post("/workloads/nope/cancel", headers=ANA).status_code == 404
    done = world.client.post("/workloads/pa1/cancel", json={"reason": "typo"}, headers=ADMIN)
    assert done.status_code == 202
    assert done.json()["status"] == "cancelled"
    [record] = world.records()
    assert record.data.cancelled_by == "admin"
    again = world.client.post("/workloads/pa1/cancel", headers=ADMIN)
    assert again.status_code == 200
    assert len(world.records()) == 1


# -- reading ----------------------------------------------------------------------------------
def test_reads_need_a_token(world: World) -> None:
    for path in ("/workloads", "/queue", "/budgets", "/nodes", "/workloads/pa1/why"):
        assert world.client.get(path).status_code == 401


def test_list_filters(world: World) -> None:
    def ids(**params: str) -> list[str]:
        response = world.client.get("/workloads", params=params, headers=ANA)
        assert response.status_code == 200
        return sorted(w["workload_id"] for w in response.json()["workloads"])

    assert ids(status="pending") == ["pa1", "pb1"]
    assert ids(budget="lab/b") == ["pb1", "r1", "v1"]
    assert ids(budget="lab", status="running") == ["r1", "r2"]
    assert ids(submitter="nobody") == []
    assert ids(pool="p", status="preempted") == ["v1"]


def test_queue_order_and_why_pending(world: World) -> None:
    response = world.client.get("/queue", headers=ANA)
    assert response.status_code == 200
    [pool] = response.json()["pools"]
    assert pool["pool"] == "p"
    assert pool["cordoned_nodes"] == ["n3"]
    # lab/a is under-served (lab/b used 100,000 GPU-s): its later, bigger job comes first
    assert [(e["position"], e["workload_id"]) for e in pool["pending"]] == [(1, "pa1"), (2, "pb1")]
    pa1, pb1 = pool["pending"]
    assert pa1["budget_rank"] == 1
    assert pb1["budget_rank"] == 2

    codes = {r["code"]: r for r in pa1["reasons"]}
    assert "fair-share" not in codes
    assert codes["insufficient-capacity"]["largest_free_gpus"] == 2
    assert codes["insufficient-capacity"]["largest_free_node"] == "n2"
    contract = codes["contract"]
    assert contract["waits_on"] == "r1"  # its contract ends first
    assert contract["contract_ends_at"] == "2026-11-02T11:50:00Z"
    assert "in 3000 s" in contract["message"]
    assert [c["workload_id"] for c in contract["contracts"]] == ["r1", "r2"]
    assert codes["cordoned-nodes"]["nodes"] == ["n3"]

    codes = {r["code"]: r for r in pb1["reasons"]}
    ahead = codes["fair-share"]["budgets_ahead"]
    assert [(b["budget"], b["rank"], b["workloads_ahead"]) for b in ahead] == [("lab/a", 1, 1)]
    assert "fits-now" in codes
    assert "contract" not in codes


def test_why_pending_names_the_contract(world: World) -> None:
    response = world.client.get("/workloads/pa1/why", headers=ANA)
    assert response.status_code == 200
    [entry] = response.json()["pending"]
    assert entry["pool"] == "p"
    assert entry["position"] == 1
    assert entry["queue_length"] == 2
    messages = " ".join(r["message"] for r in entry["reasons"])
    assert "waits on r1" in messages
    assert "cordoned" in messages
    assert response.json()["preemptions"] == []


def test_why_preempted_from_the_decision_record(world: World) -> None:
    response = world.client.get("/workloads/v1/why", headers=BO)
    assert response.status_code == 200
    data = response.json()
    assert data["status"] == "preempted"
    assert data["pending"] == []
    [preemption] = data["preemptions"]
    assert preemption["reason"] == "preempt-for"
    assert preemption["preemptor"] == "pa0"
    assert preemption["pass_id"] == 3
    assert preemption["input_position"] == [
        {"topic": "fairshare.workloads", "partition": 1, "offset": 17}
    ]
    assert [(b["budget"], b["rank"], b["usage_ratio"]) for b in preemption["budgets"]] == [
        ("lab/a", 1, 0.0),
        ("lab/b", 2, 0.0276),
    ]
    assert preemption["message"] == "preempted to make room for pa0: its contract was over"
    assert data["summary"] == preemption["message"]
    assert world.client.get("/workloads/nope/why", headers=BO).status_code == 404


def test_budget_report_numbers(world: World) -> None:
    response = world.client.get("/budgets", params={"pool": "p"}, headers=ANA)
    assert response.status_code == 200
    data = response.json()
    assert data["window_s"] == WEEK
    assert data["pools"] == [{"pool": "p", "capacity": 12}]  # cordoned GPUs still count
    by = {b["budget"]: b for b in data["budgets"]}
    a, b, lab = by["lab/a"]["pools"]["p"], by["lab/b"]["pools"]["p"], by["lab"]["pools"]["p"]
    assert a["share"] == b["share"] == 0.5
    assert lab["share"] == 1.0
    # lab/b: 100,000 charged + r1 since 11:00 (4 GPUs x 600 s); lab/a: r2 (2 GPUs x 100 s)
    assert b["usage_gpu_s"] == 102_400
    assert a["usage_gpu_s"] == 200
    assert lab["usage_gpu_s"] == 102_600
    # Delivered and owed come from the read models (tests/unit/test_reports_agree.py): this
    # API has none, so it says so instead of a second, live figure.
    assert data["delivered_owed"] is None
    assert (b["owed_gpu_s"], b["delivered_gpu_s"], b["delivered_ratio"]) == (None, None, None)
    # sshare's FairShare: 2^-usage_ratio
    assert b["fairshare_factor"] == pytest.approx(2 ** -b["usage_ratio"], abs=1e-6)
    assert a["fairshare_factor"] > b["fairshare_factor"]
    assert (a["rank"], b["rank"]) == (1, 2)
    # demand now: lab/a pa1 (4) + r2 (2); lab/b pb1 (1) + r1 (4)
    assert (a["demand_gpus"], b["demand_gpus"]) == (6, 5)
    assert a["entitled_gpus"] == 6
    assert b["entitled_gpus"] == 5
    assert by["lab"]["members"] == {"chen": ["manager"]}
    one = world.client.get("/budgets/lab/b", headers=ANA)
    assert one.status_code == 200
    assert one.json()["pools"]["p"]["rank"] == 2
    assert world.client.get("/budgets/lab/zz", headers=ANA).status_code == 404


def test_nodes(world: World) -> None:
    response = world.client.get("/nodes", headers=BO)
    nodes = {n["node"]: n for n in response.json()["nodes"]}
    assert (nodes["n1"]["used_gpus"], nodes["n1"]["free_gpus"], nodes["n1"]["state"]) == (
        4,
        0,
        "allocated",
    )
    assert nodes["n2"]["state"] == "mixed"
    assert nodes["n2"]["workloads"] == ["r2"]
    assert nodes["n3"]["cordoned"]
    assert nodes["n3"]["state"] == "cordoned"
    assert world.client.get("/nodes/zz", headers=BO).status_code == 404


# -- admin and manager actions ----------------------------------------------------------------
def test_cordon_and_uncordon_by_admins_only(world: World) -> None:
    for path in ("/nodes/n1/cordon", "/nodes/n3/uncordon", "/nodes/zz/cordon"):
        refused = world.client.post(path, headers=CHEN)
        assert refused.status_code == 403
        assert "only admins" in refused.json()["detail"]
    assert world.records() == []
    assert world.client.post("/nodes/zz/cordon", headers=ADMIN).status_code == 404
    done = world.client.post("/nodes/n1/cordon", json={"reason": "disk"}, headers=ADMIN)
    assert done.status_code == 200
    assert done.json()["cordoned"]
    assert world.client.post("/nodes/n1/cordon", headers=ADMIN).status_code == 200  # no-op
    back = world.client.post("/nodes/n3/uncordon", headers=ADMIN)
    assert back.status_code == 200
    assert not back.json()["cordoned"]
    assert sorted((r.type, r.subject) for r in world.records()) == [
        ("fairshare.node.cordoned.v1", "n1"),
        ("fairshare.node.uncordoned.v1", "n3"),
    ]
    assert {r.subject: r.data for r in world.records()}["n1"].reason == "disk"


def test_weights_are_set_by_a_manager_of_the_parent(world: World) -> None:
    for headers, budget, needle in (
        (ANA, "lab/a", "ana is not a manager of lab"),
        (CHEN, "lab", "only an admin"),
    ):
        refused = world.client.put(f"/budgets/{budget}/weight", json={"weight": 3}, headers=headers)
        assert refused.status_code == 403
        assert needle in refused.json()["detail"]
    assert (
        world.client.put("/budgets/lab/zz/weight", json={"weight": 3}, headers=CHEN).status_code
        == 404
    )
    invalid = world.client.put("/budgets/lab/a/weight", json={"weight": 0}, headers=CHEN)
    assert invalid.status_code == 422
    assert invalid.json()["detail"][0]["loc"] == ["body", "weight"]
    assert world.records() == []
    done = world.client.put("/budgets/lab/a/weight", json={"weight": 3.0}, headers=CHEN)
    assert done.status_code == 200, done.text
    [record] = world.records()
    assert (record.data.budget, record.data.weight, record.data.changed_by) == (
        "lab/a",
        3.0,
        "chen",
    )
    shares = world.client.get("/budgets", headers=ANA).json()["budgets"]
    assert {b["budget"]: b["pools"]["p"]["share"] for b in shares}["lab/a"] == 0.75


def test_members_are_added_by_a_manager(world: World) -> None:
    refused = world.client.post("/budgets/lab/b/members", json={"user": "ana"}, headers=ANA)
    assert refused.status_code == 403
    assert "not a manager of lab/b" in refused.json()["detail"]
    assert world.records() == []
    assert (
        world.client.post("/budgets/nope/members", json={"user": "ana"}, headers=CHEN).status_code
        == 404
    )
    bad = world.client.post(
        "/budgets/lab/b/members", json={"user": "ana", "role": "owner"}, headers=CHEN
    )
    assert bad.status_code == 422
    assert bad.json()["detail"][0]["loc"] == ["body", "role"]
    done = world.client.post("/budgets/lab/b/members", json={"user": "ana"}, headers=CHEN)
    assert done.status_code == 201
    assert done.json()["changed"]
    again = world.client.post("/budgets/lab/b/members", json={"user": "ana"}, headers=CHEN)
    assert again.status_code == 200
    assert not again.json()["changed"]
    assert len(world.records()) == 1
    assert world.view.state.tree.is_member("ana", "lab/b")


def test_openapi_is_served(world: World) -> None:
    schema = world.client.get("/openapi.json").json()
    assert "/workloads" in schema["paths"]
    assert "/queue" in schema["paths"]
    assert world.client.get("/docs").status_code == 200


def test_the_live_state_is_never_mutated_by_reads(world: World) -> None:
    before = (world.view.state.cluster.version, world.view.state.events)
    for path in ("/queue", "/budgets", "/workloads/pa1/why", "/nodes", "/workloads"):
        assert world.client.get(path, headers=ADMIN).status_code == 200
    assert (world.view.state.cluster.version, world.view.state.events) == before
    assert world.view.state.cluster.workloads["pa1"].status == "pending"


def test_view_reads_its_own_log() -> None:
    """A view over a subscriber folds what was published; LiveState starts empty."""
    broker = InMemoryBroker()
    view = LiveView(InMemorySubscriber(broker, "g", VIEW_KINDS))
    assert view.state.events == 0
    assert isinstance(view.state, LiveState)
    envelope = new_event(BudgetCreated(budget="lab", created_by="admin"), source="tests", time=T0)
    InMemoryPublisher(broker).publish(envelope)
    assert view.wait_for(envelope.id, 1.0)
    assert view.caught_up
    assert "lab" in view.state.tree.nodes


# -- the writes, without HTTP ----------------------------------------------------------------------
def test_writes_refuse_with_domain_errors_and_publish_nothing(world: World) -> None:
    from services.api.application import Outcome
    from services.api.auth import Principal
    from services.api.errors import Conflict, Forbidden, Invalid, NotFound
    from services.api.models import SubmitRequest
    from services.api.writes import workloads

    ctx = world.app.state.application
    bo, ana = Principal("bo"), Principal("ana")
    with pytest.raises(Forbidden, match="bo neither submitted"):
        workloads.cancel(ctx, bo, "pa1")
    with pytest.raises(NotFound, match="unknown workload 'nope'"):
        workloads.cancel(ctx, ana, "nope")
    with pytest.raises(Invalid) as invalid:
        workloads.submit(ctx, ana, SubmitRequest.model_validate(body(pools=["p", "q"])))
    assert invalid.value.field == ("pools", 1)
    assert world.records() == []
    done = workloads.submit(ctx, ana, SubmitRequest.model_validate(body()))
    assert done.outcome is Outcome.DONE
    assert done.answer.status == "pending"
    with pytest.raises(Conflict, match="other gpus"):
        workloads.submit(ctx, ana, SubmitRequest.model_validate(body(gpus=3)))
    again = workloads.submit(ctx, ana, SubmitRequest.model_validate(body()))
    assert again.outcome is Outcome.UNCHANGED
    assert len(world.records()) == 1
