"""Time limits: the one rule (``time_limits.py``), the event fields (old events without them
decode), the fold carrying a declared limit, the settings a leader states, and the place
command stating each run's limit."""

from __future__ import annotations

import json

import pytest
from pydantic import ValidationError

from events.models import PlaceCommand, SchedulerSettings, TimeLimitSettings, WorkloadSubmitted
from events.types import DEFAULT_MAX_TIME_LIMIT_S, DEFAULT_TIME_LIMIT_S
from scheduling.scheduling_pass import PassContext
from scheduling.settings import settings_of, time_limits_of, with_settings
from scheduling.time_limits import (
    TimeLimit,
    TimeLimits,
    expected_end,
    limit_s,
    refusal,
    resolve,
)
from tests.unit.scheduling_fixtures import T0, Scenario, place_commands

POOL_LIMIT = TimeLimit(default_s=3600, max_s=4 * 3600)


@pytest.mark.parametrize(
    ("requested", "min_runtime_s", "expected"),
    [
        (None, 0, 3600),  # the pool's default
        (7200, 0, 7200),  # its own
        (10 * 3600, 0, 4 * 3600),  # at most the pool's maximum
        (None, 5400, 5400),  # never below its contract
        (600, 1200, 1200),
    ],
)
def test_the_rule(requested: int | None, min_runtime_s: int, expected: int) -> None:
    assert resolve(requested, min_runtime_s, POOL_LIMIT) == expected


def test_system_defaults_and_bad_limits() -> None:
    assert TimeLimit() == TimeLimit(DEFAULT_TIME_LIMIT_S, DEFAULT_MAX_TIME_LIMIT_S)
    assert (DEFAULT_TIME_LIMIT_S, DEFAULT_MAX_TIME_LIMIT_S) == (86400, 7 * 86400)
    with pytest.raises(ValueError, match="default"):
        TimeLimit(default_s=7200, max_s=3600)
    limits = TimeLimits(pools=(("short", POOL_LIMIT),))
    assert limits.of("short") is POOL_LIMIT
    assert limits.of("other") == TimeLimit()


def test_refusals_name_the_pool_or_the_contract() -> None:
    limits = TimeLimits(pools=(("short", POOL_LIMIT),))
    assert refusal(None, 600, ("short",), limits) is None
    assert refusal(4 * 3600, 600, ("short", "long"), limits) is None
    too_long = refusal(5 * 3600, 600, ("long", "short"), limits)
    assert too_long is not None
    assert "'short'" in too_long
    assert "14400" in too_long
    too_short = refusal(300, 600, ("long",), limits)
    assert too_short is not None
    assert "min_runtime_s" in too_short


def test_an_old_submission_decodes_without_a_limit_and_the_fold_keeps_a_new_one() -> None:
    old = WorkloadSubmitted.model_validate_json(
        b'{"workload_id":"w","budget":"a","pools":["p"],"gpus":1,"min_runtime_s":0,"submitter":"x"}'
    )
    assert old.time_limit_s is None
    with pytest.raises(ValidationError):
        WorkloadSubmitted(
            workload_id="w",
            budget="a",
            pools=("p",),
            gpus=1,
            min_runtime_s=0,
            submitter="x",
            time_limit_s=0,
        )
    s = Scenario(budgets=(("a", 1.0),))
    s.submit("w1", "a", time_limit_s=5400)
    s.submit("w2", "a")
    assert s.cluster.workloads["w1"].time_limit_s == 5400
    assert s.cluster.workloads["w2"].time_limit_s is None


def test_expected_end_is_the_start_plus_the_limit() -> None:
    s = Scenario(budgets=(("a", 1.0),))
    s.running("r", "a", (("n0", (0,)),), started_at=T0, time_limit_s=5400)
    s.submit("w", "a")
    limits = TimeLimits()
    assert expected_end(s.cluster.workloads["r"], limits, T0 + 10) == T0 + 5400
    assert expected_end(s.cluster.workloads["r"], limits, T0 + 9999) == T0 + 9999  # overdue
    assert expected_end(s.cluster.workloads["w"], limits, T0) is None
    assert limit_s(s.cluster.workloads["w"], "p", limits) == DEFAULT_TIME_LIMIT_S


def test_settings_state_the_limits_and_old_settings_read_as_the_defaults() -> None:
    limits = TimeLimits(pools=(("short", POOL_LIMIT),))
    ctx = PassContext(now=T0, time_limits=limits)
    stated = settings_of(ctx)
    assert stated.time_limits == (
        TimeLimitSettings(),
        TimeLimitSettings(pool="short", default_s=3600, max_s=4 * 3600),
    )
    assert with_settings(PassContext(now=T0), stated).time_limits == limits
    assert time_limits_of(stated) == limits
    assert time_limits_of(None) == TimeLimits()
    before = stated.model_dump(mode="json")
    del before["time_limits"]
    old = SchedulerSettings.model_validate_json(json.dumps(before))
    assert time_limits_of(old) == TimeLimits()
    with pytest.raises(ValidationError, match="time_limits"):
        SchedulerSettings.model_validate_json(
            json.dumps({**before, "time_limits": [{"pool": "short"}]})
        )


def test_the_place_command_states_the_runs_limit() -> None:
    s = Scenario(budgets=(("a", 1.0),), nodes=(("n0", 4),))
    s.submit("own", "a", time_limit_s=7200)
    s.submit("default", "a")
    s.submit("capped", "a", time_limit_s=10 * 3600)
    result = s.run(T0, time_limits=TimeLimits(pools=(("p", POOL_LIMIT),)))
    stated = {c.workload_id: c.time_limit_s for c in place_commands(result)}
    assert stated == {"own": 7200, "default": 3600, "capped": 4 * 3600}
    assert isinstance(place_commands(result)[0], PlaceCommand)
