"""Demand over time and what it makes a budget owed: min(entitled GPUs, demand), integrated."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from projections.demand import DemandHistory


def test_owed_is_capped_by_demand_and_by_the_entitlement_moment_by_moment() -> None:
    history = DemandHistory()
    history.change("lab/a", 100, {}, {"p": 2})  # 2 GPUs wanted from t=100
    history.change("lab/a", 200, {"p": 2}, {"p": 8})  # 8 from t=200
    history.change("lab/a", 300, {"p": 8}, {})  # nothing from t=300

    def entitled(at: float) -> dict[str, float]:
        return {"lab": 8.0, "lab/a": 4.0 if at < 250 else 6.0}

    owed = history.owed("p", 0, 400, entitled, breaks=[250])
    assert owed == {"lab/a": 2 * 100 + 4 * 50 + 6 * 50}


def test_a_late_fact_shifts_every_later_level() -> None:
    history = DemandHistory()
    history.change("b", 100, {}, {"p": 1})
    history.change("b", 300, {"p": 1}, {})
    history.change("b", 200, {}, {"p": 4})  # read late: another workload from t=200
    assert [history.level("p", "b", t) for t in (50, 150, 250, 350)] == [0, 1, 5, 4]


@settings(max_examples=100, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(0, 1000), st.integers(1, 300), st.integers(1, 8)),
        min_size=1,
        max_size=12,
    ),
    st.permutations(range(24)),
)
def test_owed_equals_a_second_by_second_sum_in_any_reading_order(
    workloads: list[tuple[int, int, int]], order: list[int]
) -> None:
    """Each workload wants ``gpus`` over [start, start + length); the steps are read in any
    order; owed is min(5, demand) summed second by second."""
    changes = []
    for start, length, gpus in workloads:
        changes += [(start, {}, {"p": gpus}), (start + length, {"p": gpus}, {})]
    history = DemandHistory()
    for i in [i for i in order if i < len(changes)]:
        at, before, after = changes[i]
        history.change("t", at, before, after)
    owed = history.owed("p", 0, 1400, lambda _at: {"t": 5.0}, [])
    expected = 0
    for second in range(1400):
        demand = sum(g for s, n, g in workloads if s <= second < s + n)
        expected += min(5, demand)
    assert owed.get("t", 0) == expected
