"""A starving gang due its turn holds nodes further ahead (``ChurnControl.turn_hold_horizon_s``).

Holds by contracts look 15 minutes ahead: a gang that needs most of a busy pool then holds only
where every contract there happens to end within a quarter of an hour, which a pool running
hour-long contracts rarely gives; each node that came free took new work with a new contract,
and the gang waited however much it was owed (on generated big-gang scenarios a tenant owed
1,213 GPU-hours in three days, whose every job needed the whole pool, got none)."""

from __future__ import annotations

from dataclasses import replace

import orjson
import pytest

from events.models import SchedulerSettings
from events.times import HOUR
from scheduling.churn import ChurnControl
from scheduling.scheduling_pass import PassContext
from scheduling.settings import settings_of, with_settings
from tests.unit.scheduling_fixtures import T0, Scenario, placed_ids, placements, preempted_ids

WEEK = 7 * 24 * HOUR
GANG = "team-gang"
MINUTE = 60


def _pool_of_staggered_contracts() -> Scenario:
    """Eight 8-GPU nodes, each running one run of "big" whose contract ends 5, 10, ... 40
    minutes after "team"'s whole-pool gang has starved an hour; "team" has used nothing."""
    s = Scenario(budgets=(("team", 1.0), ("big", 3.0)), nodes=[(f"n{i}", 8) for i in range(8)])
    for i in range(8):
        ends = T0 + HOUR + (i + 1) * 5 * MINUTE
        s.running(
            f"big-{i}",
            "big",
            ((f"n{i}", tuple(range(8))),),
            started_at=ends - 3 * HOUR,
            min_runtime_s=3 * HOUR,
        )
    s.set_usage({"big": 64 * WEEK * 0.5, "team": 0.0})
    s.submit(GANG, "team", gpus=64, min_runtime_s=HOUR, at=T0, gang="whole-nodes")
    s.submit("big-next", "big", gpus=8, min_runtime_s=2 * HOUR, at=T0 + HOUR)
    return s


def _churn(turn_hold_horizon_s: float) -> ChurnControl:
    return replace(ChurnControl(), turn_hold_horizon_s=turn_hold_horizon_s)


def test_a_starving_gang_due_its_turn_holds_the_pool_until_its_contracts_run_out() -> None:
    s = _pool_of_staggered_contracts()
    churn = _churn(HOUR)
    assert preempted_ids(s.run(T0 + HOUR + 10, churn=churn)) == []  # every run in contract
    s.finished("big-0", T0 + HOUR + 6 * MINUTE)
    freed = s.run(T0 + HOUR + 6 * MINUTE + 1, churn=churn)
    assert "big-next" not in placed_ids(freed), "the held node took new work"
    done = s.run(T0 + HOUR + 41 * MINUTE, churn=churn)
    assert sorted(preempted_ids(done)) == [f"big-{i}" for i in range(1, 8)]
    assert list(placements(done)) == [GANG]


def test_with_the_quarter_hour_horizon_the_freed_node_takes_new_work_and_the_gang_waits() -> None:
    """The rule before (``turn_hold_horizon_s`` 0): the same pool, and the gang never starts
    while runs with fresh contracts keep coming."""
    s = _pool_of_staggered_contracts()
    churn = _churn(0.0)
    assert preempted_ids(s.run(T0 + HOUR + 10, churn=churn)) == []
    s.finished("big-0", T0 + HOUR + 6 * MINUTE)
    freed = s.run(T0 + HOUR + 6 * MINUTE + 1, churn=churn)
    assert placed_ids(freed) == ["big-next"]
    s.start("big-next", T0 + HOUR + 6 * MINUTE + 2)
    done = s.run(T0 + HOUR + 41 * MINUTE, churn=churn)
    assert preempted_ids(done) == []
    assert GANG not in placements(done)


def test_a_gang_not_due_its_turn_holds_by_the_quarter_hour() -> None:
    churn = _churn(HOUR)
    assert churn.hold_horizon_for(starving_turn=True) == HOUR
    assert churn.hold_horizon_for(starving_turn=False) == churn.hold_horizon_s == 15 * MINUTE
    assert _churn(0.0).hold_horizon_for(starving_turn=True) == 15 * MINUTE
    with pytest.raises(ValueError, match="must not be negative"):
        _churn(-1.0)


def test_settings_stated_before_the_rule_replay_without_it() -> None:
    """A leader states its settings before it decides; a log stated before this rule has no
    ``turn_hold_horizon_s`` and its passes re-derive with the quarter hour."""
    stated = settings_of(PassContext(now=T0)).model_dump(mode="json")
    assert stated["churn"]["turn_hold_horizon_s"] == HOUR
    del stated["churn"]["turn_hold_horizon_s"]
    old = SchedulerSettings.model_validate_json(orjson.dumps(stated))
    assert with_settings(PassContext(now=T0), old).churn.turn_hold_horizon_s == 0.0
