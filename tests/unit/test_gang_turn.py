"""A gang's turn (scheduling/gang_turn.py, docs/design.md section 2.6): a budget
whose smallest gang costs more than it is owed now carries what it was owed and not given, so
it still gets its turn; once served it is not due, so it cannot bounce the work back."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from events.times import HOUR
from scheduling.gang_turn import Waiting, due
from tests.unit.scheduling_fixtures import T0, Scenario, placements, preempted_ids

WEEK = 7 * 24 * HOUR


def test_due_only_while_the_gang_does_not_fit_what_it_is_owed_and_it_was_given_less() -> None:
    waiting = Waiting(smallest_gpus=8, since=T0)
    owed_a_day = 0.5 * 24 * HOUR  # entitled to half a GPU, waited a day
    assert due(waiting, 0.5, 0, 0.0, T0 + 24 * HOUR, WEEK)
    assert due(waiting, 0.5, 0, owed_a_day - 1, T0 + 24 * HOUR, WEEK)
    assert not due(waiting, 0.5, 0, owed_a_day, T0 + 24 * HOUR, WEEK), "given what it was owed"
    assert not due(waiting, 0.5, 8, 0.0, T0 + 24 * HOUR, WEEK), "it holds its gang already"
    assert not due(waiting, 12.0, 0, 0.0, T0 + 24 * HOUR, WEEK), "the gang fits its entitlement"
    assert not due(waiting, 0.0, 0, 0.0, T0 + 24 * HOUR, WEEK), "no share, nothing owed"
    assert not due(None, 0.5, 0, 0.0, T0, WEEK)
    # owed counts no further back than the window
    assert not due(Waiting(8, T0 - 3 * WEEK), 0.5, 0, 0.5 * WEEK, T0, WEEK)


@settings(max_examples=300, deadline=None)
@given(
    st.integers(1, 160),
    st.floats(0.0, 64.0),
    st.integers(0, 200),
    st.floats(0.0, 1e7),
    st.floats(0.0, 2 * WEEK),
)
def test_a_budget_given_what_it_was_owed_or_holding_its_gang_is_never_due(
    gang: int, entitled: float, held: int, used: float, waited: float
) -> None:
    waiting = Waiting(gang, T0)
    now = T0 + waited
    is_due = due(waiting, entitled, held, used, now, WEEK)
    if is_due:
        assert held < gang
        assert gang > entitled - held
        assert used < entitled * min(WEEK, now - T0)
    # more usage never makes a budget due
    assert not (due(waiting, entitled, held, used + 3600, now, WEEK) and not is_due)


def _tiny_and_big() -> Scenario:
    """64 GPUs; "tiny" is entitled to 64/4001 of a GPU (owed 2.7 GPU-hours a week), every job
    of its an 8-GPU gang; "big" holds every GPU, its runs past their contracts."""
    s = Scenario(budgets=(("tiny", 1.0), ("big", 4000.0)), nodes=[(f"n{i}", 8) for i in range(8)])
    for i in range(8):
        s.running(
            f"big-{i}", "big", ((f"n{i}", tuple(range(8))),), started_at=T0 - 7200, min_runtime_s=60
        )
    s.set_usage({"big": 64 * WEEK * 0.9, "tiny": 0.0})
    return s


def test_a_team_owed_less_than_one_gang_a_week_still_gets_its_turn() -> None:
    """Counting the 8-GPU gang's contract (8 GPU-hours) against a team owed 2.7 GPU-hours a
    week ranked it behind everyone: it waited forever. Due its turn, it catches up (once it
    has starved an hour, as any owed gang of a whole node may where no budget keeps room)."""
    s = _tiny_and_big()
    s.submit("tiny-gang", "tiny", gpus=8, min_runtime_s=3600, at=T0)
    s.submit("tiny-next", "tiny", gpus=8, min_runtime_s=3600, at=T0 + 1)
    assert preempted_ids(s.run(T0 + 10)) == []
    taken = s.run(T0 + HOUR + 10)
    assert len(preempted_ids(taken)) == 1
    assert list(placements(taken)) == ["tiny-gang"]


def test_once_served_a_team_is_not_due_again_until_it_was_owed_that_much() -> None:
    """Its second gang waits: tiny holds its gang now, and its usage in the window (charged
    as it runs) keeps it behind until it was owed as much again."""
    s = _tiny_and_big()
    s.submit("tiny-gang", "tiny", gpus=8, min_runtime_s=3600, at=T0)
    s.submit("tiny-next", "tiny", gpus=8, min_runtime_s=3600, at=T0 + 1)
    s.run(T0 + HOUR + 10)
    s.start("tiny-gang", T0 + HOUR + 20)
    later = s.run(T0 + 3 * HOUR)
    assert preempted_ids(later) == []
    # the first gang ended after 2 hours: 16 GPU-hours in the window, owed 2.7 a week
    s.finished("tiny-gang", T0 + 3 * HOUR + 60)
    s.set_usage({"big": 64 * WEEK * 0.9, "tiny": 16 * HOUR})
    assert preempted_ids(s.run(T0 + 5 * HOUR)) == []
