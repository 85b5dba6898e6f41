"""Work the API's view has forgotten (it ended a window and a day ago, issue 23) is still
answered from the read models: ``GET /workloads/{id}`` (archived), ``/history`` past the
view's horizon without a workload twice, and its id cannot be submitted again."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import Engine, create_engine

from events.envelope import Envelope
from events.models import LedgerCharge, WorkloadFinished
from services.api import create_app, default_tokens
from services.api.view import VIEW_KINDS, LiveView
from services.bus.memory import InMemoryBroker, InMemoryPublisher, InMemorySubscriber
from services.devtools.demo_data import HISTORY_END, long_history, project
from services.read_models.migrate import migrate

ADMIN = {"Authorization": "Bearer admin-token"}
NOW = (HISTORY_END + timedelta(minutes=5)).timestamp()


@pytest.fixture(scope="module")
def log() -> list[Envelope[Any]]:
    return long_history(weeks=2)


@pytest.fixture(scope="module")
def engine(log: list[Envelope[Any]], tmp_path_factory: pytest.TempPathFactory) -> Iterator[Engine]:
    engine = create_engine(f"sqlite:///{tmp_path_factory.mktemp('past') / 'rm.db'}")
    migrate(engine)
    project(engine, log)
    yield engine
    engine.dispose()


@pytest.fixture(scope="module")
def view(log: list[Envelope[Any]]) -> LiveView:
    view = LiveView(InMemorySubscriber(InMemoryBroker(), "api-view", VIEW_KINDS))
    view.feed(*log)
    return view


@pytest.fixture(scope="module")
def api(view: LiveView, engine: Engine) -> TestClient:
    publisher = InMemoryPublisher(InMemoryBroker())
    app = create_app(view, publisher, default_tokens(), clock=lambda: NOW, engine=engine)
    return TestClient(app)


def _forgotten(log: list[Envelope[Any]], view: LiveView) -> list[str]:
    ended = [e.data.workload_id for e in log if isinstance(e.data, WorkloadFinished)]
    gone = [w for w in dict.fromkeys(ended) if w not in view.state.cluster.workloads]
    assert gone, "two weeks of history: the first week's work has left the view"
    return gone


def test_a_forgotten_workload_is_answered_from_the_read_models(
    log: list[Envelope[Any]], view: LiveView, api: TestClient
) -> None:
    workload_id = _forgotten(log, view)[0]
    answer = api.get(f"/workloads/{workload_id}", headers=ADMIN)
    assert answer.status_code == 200, answer.text
    shown = answer.json()
    assert shown["archived"] is True
    assert shown["status"] in ("succeeded", "failed")
    charged = sum(
        e.data.signed_gpu_seconds
        for e in log
        if isinstance(e.data, LedgerCharge)
        and e.data.workload_id == workload_id
        and e.data.kind == "allocated"
    )
    assert shown["charged_gpu_s"] == charged
    assert api.get("/workloads/never-submitted", headers=ADMIN).status_code == 404


def test_history_reaches_past_the_view_without_a_workload_twice(
    log: list[Envelope[Any]], view: LiveView, api: TestClient
) -> None:
    answer = api.get("/history", params={"limit": 100_000}, headers=ADMIN)
    assert answer.status_code == 200, answer.text
    listed = answer.json()
    ids = [w["workload_id"] for w in listed["workloads"]]
    assert len(ids) == len(set(ids)), "no workload both in the view and archived"
    assert listed["total"] == len(ids)
    assert set(_forgotten(log, view)) <= set(ids)
    archived = [w for w in listed["workloads"] if w["archived"]]
    assert archived
    assert listed["workloads"][-len(archived) :] == archived, "the forgotten come last"
    recent = api.get(
        "/history",
        params={"since": (HISTORY_END - timedelta(days=2)).isoformat(), "limit": 100_000},
        headers=ADMIN,
    ).json()
    assert not any(w["archived"] for w in recent["workloads"])


def test_a_forgotten_workload_id_cannot_be_submitted_again(
    log: list[Envelope[Any]], view: LiveView, api: TestClient
) -> None:
    workload_id = _forgotten(log, view)[0]
    body = {
        "workload_id": workload_id,
        "budget": "lab/vision",
        "pools": ["sim"],
        "gpus": 1,
        "min_runtime_s": 600,
    }
    answer = api.post("/workloads", json=body, headers=ADMIN)
    assert answer.status_code == 409, answer.text
    assert "already submitted" in answer.text
