"""What a budget is owed: min(entitled GPUs, GPUs wanted), integrated piece by piece."""

from __future__ import annotations

from bisect import bisect_right

from hypothesis import given, settings
from hypothesis import strategies as st

from projections.owed import owed, owed_pieces


def _step(steps: list[tuple[int, int]]) -> dict[int, int]:
    """Every second of ``range(steps[0][0], steps[-1][0])`` -> the level of the step under it."""
    times = [t for t, _ in steps]
    return {s: steps[bisect_right(times, s) - 1][1] for s in range(times[0], times[-1])}


def test_a_piece_is_owed_the_lesser_of_its_entitlement_and_its_demand() -> None:
    levels = {0: 2, 100: 8, 200: 0}  # GPUs wanted from each instant on

    def wanted(a: int, b: int) -> dict[str, float]:
        return {"lab/a": levels[a] * (b - a)}

    def entitled(at: int) -> dict[str, float]:
        return {"lab/a": 4.0}

    pieces = list(owed_pieces([0, 100, 200, 300], wanted, entitled))
    # The idle piece [200, 300) is not a piece at all: nothing was wanted on it.
    assert pieces == [(0, 100, {"lab/a": 200.0}), (100, 200, {"lab/a": 400.0})]
    assert owed([0, 100, 200, 300], wanted, entitled) == {"lab/a": 600.0}


def test_keys_that_want_nothing_are_absent_and_the_entitlement_is_asked_only_when_needed() -> None:
    asked: list[float] = []

    def wanted(a: float, b: float) -> dict[str, float]:
        return {"busy": 3 * (b - a) if a >= 10 else 0.0, "idle": 0.0}

    def entitled(at: float) -> dict[str, float]:
        asked.append(at)
        return {"busy": 1.5}  # "idle" has no share: nothing would be owed to it anyway

    assert owed([0.0, 10.0, 20.0, 30.0], wanted, entitled) == {"busy": 30.0}
    assert asked == [10.0, 20.0]


def test_a_budget_without_an_entitlement_is_owed_nothing_for_its_demand() -> None:
    def wanted(a: int, b: int) -> dict[str, float]:
        return {"new": 5 * (b - a)}

    def entitled(at: int) -> dict[str, float]:
        return {}

    assert owed([0, 60], wanted, entitled) == {"new": 0.0}


def test_a_total_over_the_piece_stands_for_a_demand_known_only_as_such() -> None:
    """The simulator's hours: 4 GPUs entitled, 10,000 GPU-seconds wanted in a 3,600 s hour."""

    def wanted(a: float, b: float) -> dict[str, float]:
        return {"b": 10_000.0}

    def entitled(at: float) -> dict[str, float]:
        return {"b": 4.0}

    assert owed([0.0, 3600.0], wanted, entitled) == {"b": 10_000.0}
    assert owed([0.0, 1800.0], wanted, entitled) == {"b": 7_200.0}


_STEPS = st.lists(st.tuples(st.integers(1, 40), st.integers(0, 9)), min_size=1, max_size=10).map(
    lambda d: [(sum(x for x, _ in d[: i + 1]), level) for i, (_, level) in enumerate(d)]
)


@settings(max_examples=200, deadline=None)
@given(
    demand=_STEPS,
    entitlement=_STEPS,
    split=st.lists(st.integers(0, 400), max_size=8),
)
def test_owed_equals_a_second_by_second_sum_of_random_integer_step_functions(
    demand: list[tuple[int, int]], entitlement: list[tuple[int, int]], split: list[int]
) -> None:
    """Both sides are integer step functions (``(from, level)``, zero before the first step);
    cut at every step of either, and at arbitrary extra instants, the pieces add up to the sum
    of ``min(entitled, demand)`` over every second."""
    end = max(demand[-1][0], entitlement[-1][0])
    demand = [(0, 0), *demand, (end + 1, 0)]
    entitlement = [(0, 0), *entitlement, (end + 1, 0)]
    wants, gets = _step(demand), _step(entitlement)
    cuts = sorted(
        {*(t for t, _ in demand), *(t for t, _ in entitlement), *split} & {*wants, end + 1}
    )

    def wanted(a: int, b: int) -> dict[str, float]:
        return {"b": wants[a] * (b - a)}

    def entitled(at: int) -> dict[str, float]:
        return {"b": float(gets[at])}

    expected = sum(min(wants[s], gets[s]) for s in range(end + 1))
    assert owed(cuts, wanted, entitled).get("b", 0.0) == expected
