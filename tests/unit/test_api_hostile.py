"""Hostile and careless input, each a request that once got a 500, a hang, a 503 that no retry
could fix, or a 2xx it should not have: now a clear 4xx that publishes nothing."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import Engine

from services.api import create_app, default_tokens
from services.api.validation import MAX_REQUEST_BYTES
from tests.unit.test_api import ADMIN, ANA, CHEN, NOW, World, build_world


@pytest.fixture
def world() -> World:
    return build_world()


def _submission(**fields: object) -> dict[str, object]:
    return {
        "workload_id": "hostile-1",
        "budget": "lab/a",
        "pools": ["p"],
        "gpus": 1,
        "min_runtime_s": 0,
        **fields,
    }


def _raw(world: World, method: str, path: str, body: str, who: dict[str, str]) -> int:
    """Send ``body`` as it is: NaN, Infinity and lone-surrogate escapes are not what a JSON
    encoder writes, but Python's parser (the server's) accepts them."""
    before = len(world.records())
    response = world.client.request(
        method, path, content=body.encode(), headers={**who, "Content-Type": "application/json"}
    )
    assert len(world.records()) == before, f"{response.status_code} published an event"
    assert response.headers["content-type"].startswith("application/json")
    response.json()  # the error body itself is valid JSON
    return response.status_code


@pytest.mark.parametrize(
    "body",
    [
        '{"workload_id":"n1","budget":"lab/a","pools":["p"],"gpus":1,"min_runtime_s":0,'
        '"priority":NaN}',
        '{"workload_id":"n2","budget":"lab/a","pools":["p"],"gpus":1,"min_runtime_s":0,'
        '"priority":-Infinity}',
        '{"workload_id":"n3","budget":"lab/a","pools":["p"],"gpus":1,"min_runtime_s":0,'
        '"spec":{"lr":NaN}}',
        '{"workload_id":"a\\ud800b","budget":"lab/a","pools":["p"],"gpus":1,"min_runtime_s":0}',
        '{"workload_id":"n4","budget":"lab/a","pools":["p"],"gpus":1,"min_runtime_s":0,'
        '"spec":{"cmd":"\\ud800"}}',
        '{"workload_id":"n5","budget":"lab/a","pools":["p"],"gpus":1,"min_runtime_s":0,'
        '"spec":{"\\udfff":1}}',
    ],
)
def test_non_finite_numbers_and_lone_surrogates_in_a_submission_are_422(
    world: World, body: str
) -> None:
    assert _raw(world, "POST", "/workloads", body, ANA) == 422


@pytest.mark.parametrize("weight", ["Infinity", "-Infinity", "NaN", "1e999"])
def test_a_non_finite_weight_is_422(world: World, weight: str) -> None:
    assert _raw(world, "PUT", "/budgets/lab/a/weight", f'{{"weight": {weight}}}', CHEN) == 422


@pytest.mark.parametrize(
    "workload_id",
    ["relA-r1-nul\x00x", "relA-r1-esc\x1b[31mRED\x07", "tab\tid", "space id", "é", "x" * 129],
)
def test_ids_outside_the_documented_characters_are_422(world: World, workload_id: str) -> None:
    before = len(world.records())
    response = world.client.post(
        "/workloads", json=_submission(workload_id=workload_id), headers=ANA
    )
    assert response.status_code == 422, response.text
    assert response.json()["detail"][0]["loc"] == ["body", "workload_id"]
    assert len(world.records()) == before


@pytest.mark.parametrize("text", ["nul\x00", "bell\x07", "esc\x1b[2J", "del\x7f", "cr\r"])
def test_control_characters_in_free_text_are_422(world: World, text: str) -> None:
    before = len(world.records())
    cancel = world.client.post("/workloads/pa1/cancel", json={"reason": text}, headers=ADMIN)
    spec = world.client.post("/workloads", json=_submission(spec={"cmd": text}), headers=ANA)
    assert (cancel.status_code, spec.status_code) == (422, 422), (cancel.text, spec.text)
    assert len(world.records()) == before


def test_tab_and_newline_in_free_text_are_fine(world: World) -> None:
    response = world.client.post(
        "/workloads", json=_submission(spec={"script": "a\tb\nc"}), headers=ANA
    )
    assert response.status_code == 201, response.text


@pytest.mark.parametrize("size", [70_000, 1_000_000, 10_000_000])
def test_an_oversized_spec_or_body_is_413_naming_the_cap(world: World, size: int) -> None:
    before = len(world.records())
    response = world.client.post(
        "/workloads", json=_submission(spec={"blob": "x" * size}), headers=ANA
    )
    assert response.status_code == 413, response.text
    detail = response.json()["detail"]
    assert "65536" in detail or str(MAX_REQUEST_BYTES) in detail, detail
    assert len(world.records()) == before


def test_a_body_over_the_cap_without_a_content_length_is_413(world: World) -> None:
    chunks = (b"x" * 65536 for _ in range(4))
    response = world.client.post(
        "/workloads", content=chunks, headers={**ANA, "Content-Type": "application/json"}
    )
    assert response.status_code == 413


def test_a_weight_for_a_pool_that_does_not_exist_is_422(world: World) -> None:
    before = len(world.records())
    response = world.client.put(
        "/budgets/lab/a/weight", json={"weight": 2.0, "pool": "nopool"}, headers=CHEN
    )
    assert response.status_code == 422, response.text
    assert "nopool" in response.text
    assert len(world.records()) == before
    ok = world.client.put("/budgets/lab/a/weight", json={"weight": 2.0, "pool": "p"}, headers=CHEN)
    assert ok.status_code in (200, 202), ok.text


def test_a_member_that_no_token_names_is_422(world: World) -> None:
    before = len(world.records())
    response = world.client.post("/budgets/lab/b/members", json={"user": "dna"}, headers=CHEN)
    assert response.status_code == 422, response.text
    assert response.json()["detail"][0]["loc"] == ["body", "user"]
    assert len(world.records()) == before


def test_the_log_refusing_a_record_for_its_size_is_413_not_503(world: World) -> None:
    from services.bus.port import PublishError

    def too_large(_envelope: object) -> None:
        raise PublishError("KafkaError{code=MSG_SIZE_TOO_LARGE,val=10}")

    world.publisher.publish = too_large  # type: ignore[method-assign]
    response = world.client.post("/workloads", json=_submission(), headers=ANA)
    assert response.status_code == 413, response.text


# -- reports ------------------------------------------------------------------------------------
@pytest.fixture
def reports(tmp_path: Path) -> Iterator[TestClient]:
    from services.read_models.migrate import engine_for, migrate

    engine: Engine = engine_for(f"sqlite:///{tmp_path}/r.db")
    migrate(engine)
    world = World()
    app = create_app(world.view, world.publisher, default_tokens(), engine=engine)
    yield TestClient(app)
    engine.dispose()


@pytest.mark.parametrize(
    "query",
    [
        "from=9999-12-31T23:59:59Z&bucket=month",
        "from=9999-12-31T23:59:59Z&bucket=week",
        "from=9999-12-31T23:59:59Z&bucket=hour",
        "from=99999999999999",
        "from=0&to=4102444800&bucket=hour",
        "from=0&to=99999999999&bucket=hour",
        "from=-99999999999999&bucket=day",
        "from=" + "9" * 5000,
    ],
)
def test_unbounded_or_absurd_reports_are_422_at_once(reports: TestClient, query: str) -> None:
    started = time.perf_counter()
    response = reports.get(f"/reports/charges?{query}", headers=ADMIN)
    assert response.status_code == 422, response.text
    assert time.perf_counter() - started < 5  # the three that hung never answered at all
    assert "10000" in response.text or "outside" in response.text or "time" in response.text


def test_a_report_within_bounds_still_answers(reports: TestClient) -> None:
    response = reports.get(
        "/reports/charges?from=2026-01-01&to=2026-02-01&bucket=day", headers=ADMIN
    )
    assert response.status_code == 200, response.text


def test_period_is_still_understood_as_the_old_name_of_bucket(reports: TestClient) -> None:
    span = "/reports/charges?from=2026-01-01&to=2026-02-01&format=json"
    by_bucket = reports.get(f"{span}&bucket=week", headers=ADMIN)
    by_period = reports.get(f"{span}&period=week", headers=ADMIN)
    assert by_bucket.status_code == by_period.status_code == 200, by_period.text
    assert by_period.content == by_bucket.content
    assert by_period.json()["period"] == "week"  # the report's own field keeps its name
    both = reports.get(f"{span}&bucket=week&period=week", headers=ADMIN)
    assert both.status_code == 200, both.text
    differ = reports.get(f"{span}&bucket=week&period=day", headers=ADMIN)
    assert differ.status_code == 422, differ.text
    assert differ.json()["detail"][0]["loc"] == ["query", "bucket"]


def test_a_report_time_that_is_none_is_the_one_422_naming_the_query_field(
    reports: TestClient,
) -> None:
    response = reports.get("/reports/charges?from=yesterday-ish", headers=ADMIN)
    assert response.status_code == 422, response.text
    [detail] = response.json()["detail"]
    assert (detail["loc"], detail["type"]) == (["query", "from/to"], "value_error")


def test_an_unknown_report_is_the_one_404(reports: TestClient) -> None:
    response = reports.get("/reports/nonsense", headers=ADMIN)
    assert response.status_code == 404, response.text
    assert response.json() == {
        "detail": "unknown report 'nonsense' (known: charges, utilisation, users)"
    }


def test_a_history_since_that_is_no_time_is_the_one_422_naming_the_query_field(
    world: World,
) -> None:
    response = world.client.get("/history?since=last-tuesday", headers=ANA)
    assert response.status_code == 422, response.text
    [detail] = response.json()["detail"]
    assert (detail["loc"], detail["type"]) == (["query", "since"], "value_error")
    assert detail["msg"]


# -- crashes are logged --------------------------------------------------------------------------
def test_an_unexpected_error_is_a_500_with_its_traceback_in_one_log_line(
    world: World, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    from services.api import queries

    def broken(*_args: object, **_kwargs: object) -> None:
        raise RuntimeError("a bug")

    monkeypatch.setattr(queries, "workload_list", broken)
    client = TestClient(world.app, raise_server_exceptions=False)
    with caplog.at_level(logging.ERROR, logger="services.api.app"):
        response = client.get("/workloads", headers=ADMIN)
    assert response.status_code == 500
    assert response.json() == {"detail": "internal error (logged); please report it"}
    (record,) = [r for r in caplog.records if r.getMessage() == "request failed"]
    assert record.exc_info is not None
    assert "a bug" in str(record.exc_info[1])
    assert record.path == "/workloads"  # type: ignore[attr-defined]


def test_now_is_the_fixture_time() -> None:
    assert NOW.year == 2026
