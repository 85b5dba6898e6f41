"""Time limits through the API: a submission's limit is checked against its pools' maximum and
its own contract (422 naming ``time_limit_s``, nothing published); a workload shows its limit
and, while pending, when it should start; the queue shows starts when asked (``?start=true``)."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest

from events.models import SchedulerSettings, TimeLimitSettings
from scheduling.scheduling_pass import PassContext
from scheduling.settings import settings_of
from tests.unit.test_api import ANA, NOW, World, body, build_world


@pytest.fixture
def world() -> World:
    return build_world()


def _iso(at: datetime) -> str:
    return at.isoformat().replace("+00:00", "Z")


def test_a_limit_within_the_pool_is_published_and_shown(world: World) -> None:
    response = world.client.post("/workloads", json=body(time_limit_s=7200), headers=ANA)
    assert response.status_code == 201, response.text
    assert response.json()["time_limit_s"] == 7200
    [record] = world.records()
    assert record.data.time_limit_s == 7200


def test_no_limit_means_the_pool_default(world: World) -> None:
    response = world.client.post("/workloads", json=body(), headers=ANA)
    assert response.status_code == 201, response.text
    assert response.json()["time_limit_s"] is None
    [record] = world.records()
    assert record.data.time_limit_s is None


@pytest.mark.parametrize(
    ("limit", "needle"),
    [
        (8 * 86400, "above pool 'p''s maximum (604800 s)"),  # the system maximum: 7 days
        (300, "below min_runtime_s (600 s)"),
    ],
)
def test_a_limit_the_pool_would_not_grant_is_refused(world: World, limit: int, needle: str) -> None:
    response = world.client.post("/workloads", json=body(time_limit_s=limit), headers=ANA)
    assert response.status_code == 422, response.text
    [error] = response.json()["detail"]
    assert error["loc"] == ["body", "time_limit_s"]
    assert needle in error["msg"]
    assert world.records() == []


def test_the_stated_pool_maximum_is_the_one_checked(world: World) -> None:
    stated = settings_of(PassContext(now=0.0))
    short = SchedulerSettings(
        **{
            **stated.model_dump(),
            "time_limits": (
                TimeLimitSettings(),
                TimeLimitSettings(pool="p", default_s=3600, max_s=4 * 3600),
            ),
        }
    )
    world.fact(short, NOW - timedelta(minutes=1))
    refused = world.client.post("/workloads", json=body(time_limit_s=5 * 3600), headers=ANA)
    assert refused.status_code == 422, refused.text
    assert "maximum (14400 s)" in refused.json()["detail"][0]["msg"]
    ok = world.client.post("/workloads", json=body(time_limit_s=4 * 3600), headers=ANA)
    assert ok.status_code == 201, ok.text


def test_a_pending_workload_has_an_estimated_start(world: World) -> None:
    # r1 holds n1 from NOW-600 s, r2 half of n2 from NOW-100 s, both with a one-hour contract
    # and the default 24 h limit; no run has finished yet. pa1 (4 GPUs) waits for a whole
    # node: n1 is expected free when r1's contract ends (a guess: nothing is known yet), at
    # the latest at r1's start + 24 h (the limit is the bound, not the estimate).
    got = world.client.get("/workloads/pa1", headers=ANA).json()
    assert got["status"] == "pending"
    assert got["estimated_start"] == _iso(NOW + timedelta(seconds=3000))
    assert got["start_basis"] == "guess"
    assert got["latest_start"] == _iso(NOW - timedelta(seconds=600) + timedelta(days=1))
    running = world.client.get("/workloads/r1", headers=ANA).json()
    assert running["estimated_start"] is None
    assert running["run_time_limit_s"] == 86400
    assert running["time_limit_ends_at"] == _iso(NOW - timedelta(seconds=600) + timedelta(days=1))


def test_the_queue_shows_starts_when_asked(world: World) -> None:
    plain = world.client.get("/queue", headers=ANA).json()
    assert all(e["estimated_start"] is None for p in plain["pools"] for e in p["pending"])
    answer = world.client.get("/queue?start=true", headers=ANA).json()
    starts = {
        e["workload_id"]: (e["estimated_start"], e["start_basis"], e["latest_start"])
        for p in answer["pools"]
        for e in p["pending"]
    }
    assert starts["pb1"] == (_iso(NOW), "now", _iso(NOW))  # 1 GPU: n2 has two free now
    latest = _iso(NOW - timedelta(seconds=600) + timedelta(days=1))
    assert starts["pa1"] == (_iso(NOW + timedelta(seconds=3000)), "guess", latest)


def test_the_cli_submits_a_limit_and_shows_starts(world: World) -> None:
    from tests.unit.test_client import run

    code, _out, err = run(
        world, "submit", "-A", "lab/a", "-p", "p", "--time-limit", "2h", "--id", "j9", "--", "x"
    )
    assert code == 0, err
    [record] = world.records()
    assert record.data.time_limit_s == 7200
    code, out, _err = run(world, "queue", "--start")
    assert code == 0
    assert "START" in out
    pa1 = next(line for line in out.splitlines() if "pa1" in line)
    assert (NOW + timedelta(seconds=3000)).strftime("%Y-%m-%dT%H:%M:%S") in pa1
    assert "guess" in pa1
