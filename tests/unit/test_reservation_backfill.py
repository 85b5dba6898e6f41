"""A gang that needs several whole nodes holds the nodes that free up soonest by the runs' time
limits, and other work backfills them only if its own limit ends before the hold starts
(scheduling/reservation.py, docs/design.md section 2.6). Holds by time limits are off by default
since they changed no figure on two real traces and the synthetic scenario; logs decided with
them on replay with them, so the rule is tested with it switched on."""

from __future__ import annotations

from events.times import HOUR
from scheduling.churn import ChurnControl
from scheduling.reservation import RESERVE_HORIZON_S
from tests.unit.scheduling_fixtures import T0, Scenario, placements

NOW = T0 + 2 * HOUR
MINUTE = 60
LIMIT_HOLDS = ChurnControl(limit_hold_horizon_s=RESERVE_HORIZON_S)


def _full_pool() -> Scenario:
    """Three nodes of 4 GPUs, each held by one 4-GPU run of b or c (both at their share, so
    no rule lets a take them), ending by their limits 5 min, 10 min and 5 hours from NOW; a's
    8-GPU gang (two whole nodes) waits, a is owed."""
    s = Scenario(
        budgets=(("a", 1.0), ("b", 1.0), ("c", 1.0)),
        nodes=(("n0", 4), ("n1", 4), ("n2", 4), ("n3", 4)),
    )
    ends = {"n0": 2 * HOUR + 5 * MINUTE, "n1": 2 * HOUR + 10 * MINUTE, "n2": 7 * HOUR}
    for i, (node, limit) in enumerate(sorted(ends.items())):
        budget = "b" if i % 2 == 0 else "c"
        s.running(
            f"{budget}-{node}",
            budget,
            ((node, (0, 1, 2, 3)),),
            started_at=T0,
            min_runtime_s=600,
            time_limit_s=limit,
        )
    s.running(
        "c-n3", "c", (("n3", (0, 1)),), started_at=T0, min_runtime_s=600, time_limit_s=HOUR * 9
    )
    s.set_usage({"a": 0.0, "b": 4 * 2 * HOUR, "c": 6 * 2 * HOUR})
    # submitted 10 minutes ago: not starving yet (it may not catch up regardless of room)
    s.submit("a-gang", "a", gpus=8, gang="whole-nodes", at=NOW - 600, min_runtime_s=3600)
    return s


def test_the_gang_holds_the_nodes_that_free_up_soonest() -> None:
    """n2 is free now, n0 frees by NOW+5min, n1 by NOW+10min: the gang holds n2 and n0, from
    NOW+5min. A job that would run 8 minutes may not take n2; one of 4 minutes may."""
    s = _full_pool()
    s.finished("b-n2", NOW - 1)
    s.submit("c-8min", "c", gpus=4, at=NOW - 5, min_runtime_s=60, time_limit_s=8 * MINUTE)
    assert "c-8min" not in placements(s.run(NOW, churn=LIMIT_HOLDS))
    s.submit("b-4min", "b", gpus=4, at=NOW + 1, min_runtime_s=60, time_limit_s=4 * MINUTE)
    assert placements(s.run(NOW + 2, churn=LIMIT_HOLDS)).get("b-4min") == (("n2", (0, 1, 2, 3)),)


def test_work_whose_limit_ends_after_the_hold_starts_does_not_take_a_held_node() -> None:
    s = _full_pool()
    s.finished("b-n0", NOW - 1)  # n0 is free now: held (the gang needs n1 as well)
    s.submit("c-long", "c", gpus=4, at=NOW - 5, min_runtime_s=600, time_limit_s=8 * HOUR)
    s.submit("b-short", "b", gpus=4, at=NOW - 4, min_runtime_s=60, time_limit_s=9 * MINUTE)
    placed = placements(s.run(NOW, churn=LIMIT_HOLDS))
    assert "c-long" not in placed, "it would still run when the gang's nodes are all free"
    # n0 is held from NOW+10min (when n1 frees): a job done in 9 minutes backfills it
    assert placed.get("b-short") == (("n0", (0, 1, 2, 3)),), "done before n1 frees: backfills"


def test_once_its_nodes_are_free_the_gang_starts_there() -> None:
    s = _full_pool()
    s.finished("b-n0", NOW - 1)
    s.finished("c-n1", NOW - 1)
    placed = placements(s.run(NOW, churn=LIMIT_HOLDS))
    assert sorted(node for node, _gpus in placed["a-gang"]) == ["n0", "n1"]
