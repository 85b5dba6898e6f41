"""The windowed usage fold (docs/design.md sections 2.5 and 2.8)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from events.times import DEFAULT_WINDOW_S, HOUR
from projections.usage_window import (
    UsageWindow,
    bucket_of,
    split_by_hour,
)

#: An hour-aligned instant; bucket B0 starts here.
T = 1_699_999_200.0
B0 = int(T // HOUR)
WEEK_BUCKETS = DEFAULT_WINDOW_S // HOUR


def test_default_window_is_seven_days() -> None:
    assert UsageWindow().window_s == 7 * 24 * 3600
    assert WEEK_BUCKETS == 168


def test_bucket_of_is_the_hour_containing_the_instant() -> None:
    assert bucket_of(T) == B0
    assert bucket_of(T + 3599.9) == B0
    assert bucket_of(T + 3600) == B0 + 1
    assert bucket_of(T - 0.5) == B0 - 1


def test_split_by_hour_cuts_at_boundaries_and_keeps_every_second() -> None:
    pieces = split_by_hour(T + 1800, T + 2 * HOUR + 600)
    assert pieces == [(B0, 1800.0), (B0 + 1, 3600.0), (B0 + 2, 600.0)]
    assert split_by_hour(T + 10, T + 20) == [(B0, 10.0)]
    assert split_by_hour(T, T + HOUR) == [(B0, 3600.0)]
    assert split_by_hour(T + 5, T + 5) == []


def test_interval_is_recorded_per_hour_bucket_times_gpus() -> None:
    window = UsageWindow()
    window.add_interval("p", "a", 4, T + 1800, T + HOUR + 900, allocated=True)
    allocated, unallocated = window.hourly("p", "a")
    assert allocated == {B0: 4 * 1800.0, B0 + 1: 4 * 900.0}
    assert unallocated == {}
    assert window.allocated("p", "a", T + HOUR + 900) == 4 * 2700.0


def test_allocated_and_unallocated_are_kept_apart() -> None:
    window = UsageWindow()
    window.add_interval("p", "a", 2, T, T + 600, allocated=True)
    window.add_interval("p", "a", 8, T, T + 600, allocated=False)
    allocated, unallocated = window.hourly("p", "a")
    assert allocated == {B0: 1200.0}
    assert unallocated == {B0: 4800.0}
    # Only allocated occupancy counts in fair share.
    assert window.allocated("p", "a", T + 600) == 1200.0
    assert window.allocated_by_budget("p", T + 600) == {"a": 1200.0}


def test_unallocated_only_budget_has_zero_allocated_usage() -> None:
    window = UsageWindow()
    window.add_interval("p", "burst", 8, T, T + HOUR, allocated=False)
    assert window.allocated("p", "burst", T + HOUR) == 0.0
    assert window.allocated_by_budget("p", T + HOUR) == {"burst": 0.0}


def test_pools_and_budgets_are_separate_series() -> None:
    window = UsageWindow()
    window.add_interval("p", "a", 1, T, T + 100, allocated=True)
    window.add_interval("q", "a", 1, T, T + 300, allocated=True)
    window.add_interval("p", "b", 2, T, T + 100, allocated=True)
    assert window.allocated("p", "a", T + 300) == 100.0
    assert window.allocated("q", "a", T + 300) == 300.0
    assert window.allocated_by_budget("p", T + 300) == {"a": 100.0, "b": 200.0}
    assert window.budgets("p") == ["a", "b"]
    assert window.budgets("q") == ["a"]
    assert window.allocated("p", "unknown", T) == 0.0
    assert window.hourly("p", "unknown") == ({}, {})


def test_empty_or_inverted_intervals_and_zero_gpus_record_nothing() -> None:
    window = UsageWindow()
    window.add_interval("p", "a", 1, T + 10, T + 10, allocated=True)
    window.add_interval("p", "a", 1, T + 20, T + 10, allocated=True)
    window.add_interval("p", "a", 0, T, T + 10, allocated=True)
    assert window.allocated("p", "a", T + 100) == 0.0
    assert window.hourly("p", "a") == ({}, {})


def test_window_covers_the_168_buckets_ending_with_the_current_one() -> None:
    window = UsageWindow()
    window.add_interval("p", "a", 1, T + 100, T + 200, allocated=True)  # bucket B0
    last_in = T + (WEEK_BUCKETS - 1) * HOUR  # first second of bucket B0 + 167
    assert window.allocated("p", "a", T + 200) == 100.0
    assert window.allocated("p", "a", last_in) == 100.0
    assert window.allocated("p", "a", last_in + HOUR - 0.001) == 100.0
    assert window.allocated("p", "a", last_in + HOUR) == 0.0  # bucket B0 + 168: B0 slid out


def test_sliding_window_drops_old_buckets_one_by_one() -> None:
    window = UsageWindow(window_s=3 * HOUR)
    seen = []
    for hour in range(10):
        if hour < 6:  # bucket B0+h holds 10*(h+1) GPU-seconds
            start = T + hour * HOUR
            window.add_interval("p", "a", 1, start, start + 10 * (hour + 1), allocated=True)
        seen.append(window.allocated("p", "a", T + hour * HOUR + 1000))
    assert seen == [10, 30, 60, 90, 120, 150, 110, 60, 0, 0]


def test_querying_an_earlier_time_after_a_later_one_recomputes() -> None:
    window = UsageWindow(window_s=2 * HOUR)
    window.add_interval("p", "a", 1, T, T + 100, allocated=True)
    window.add_interval("p", "a", 1, T + HOUR, T + HOUR + 10, allocated=True)
    assert window.allocated("p", "a", T + 5 * HOUR) == 0.0
    assert window.allocated("p", "a", T + HOUR + 20) == 110.0


def test_usage_after_the_queried_instant_is_not_in_its_window() -> None:
    """An audit asks for the usage at a past instant: occupancy from later hours (folded in
    already) must not count, since the window is the buckets *ending* with the current one."""
    window = UsageWindow()
    window.add_interval("p", "a", 1, T, T + 100, allocated=True)
    window.add_interval("p", "a", 1, T + 10 * HOUR, T + 10 * HOUR + 500, allocated=True)
    assert window.allocated("p", "a", T + HOUR) == 100.0
    assert window.allocated_by_budget("p", T + HOUR) == {"a": 100.0}


def test_late_report_lands_in_the_bucket_where_it_happened() -> None:
    window = UsageWindow()
    now = T + 5 * HOUR + 100
    window.add_interval("p", "a", 1, T + 5 * HOUR, now, allocated=True)
    assert window.allocated("p", "a", now) == 100.0
    # Reported now, happened three hours ago.
    window.add_interval("p", "a", 2, T + 2 * HOUR, T + 2 * HOUR + 50, allocated=True)
    allocated, _ = window.hourly("p", "a")
    assert allocated == {B0 + 5: 100.0, B0 + 2: 100.0}
    assert window.allocated("p", "a", now) == 200.0


def test_late_report_older_than_the_window_does_not_count() -> None:
    window = UsageWindow(window_s=2 * HOUR)
    now = T + 10 * HOUR + 1
    assert window.allocated("p", "a", now) == 0.0
    window.add_interval("p", "a", 1, T + 10 * HOUR, now, allocated=True)
    assert window.allocated("p", "a", now) == 1.0
    window.add_interval("p", "a", 5, T + 3 * HOUR, T + 3 * HOUR + 60, allocated=True)
    assert window.allocated("p", "a", now) == 1.0
    assert window.hourly("p", "a")[0][B0 + 3] == 300.0


@pytest.mark.parametrize("window_s", [0, -HOUR, HOUR // 2, HOUR + 1, 5400])
def test_window_must_be_a_positive_whole_number_of_hours(window_s: int) -> None:
    with pytest.raises(ValueError, match="whole number of hours"):
        UsageWindow(window_s)


_interval = st.tuples(
    st.sampled_from(["a", "b"]),
    st.integers(1, 8),
    st.integers(0, 6 * HOUR),  # how far before "now" it started
    st.integers(1, 2 * HOUR),  # how long it ran
    st.booleans(),
)


@settings(max_examples=60, deadline=None, database=None)
@given(
    steps=st.lists(
        st.tuples(st.integers(0, 2 * HOUR), st.lists(_interval, max_size=4)),
        min_size=1,
        max_size=12,
    ),
    window_hours=st.integers(1, 4),
)
def test_running_window_sum_equals_a_recount(
    steps: list[tuple[int, list[tuple[str, int, int, int, bool]]]], window_hours: int
) -> None:
    """Queries at advancing times, with late reports in between, always agree with a recount
    over the buckets the window covers."""
    window = UsageWindow(window_s=window_hours * HOUR)
    recorded: list[tuple[str, int, float, float, bool]] = []
    now = T
    for advance, intervals in steps:
        now += advance
        for budget, gpus, ago, length, allocated in intervals:
            start = now - ago
            end = min(now, start + length)
            window.add_interval("p", budget, gpus, start, end, allocated)
            recorded.append((budget, gpus, start, end, allocated))
        first = bucket_of(now) - window_hours + 1
        for budget in ("a", "b"):
            expected = sum(
                gpus * seconds
                for b, gpus, start, end, allocated in recorded
                if b == budget and allocated
                for bucket, seconds in split_by_hour(start, end)
                if first <= bucket <= bucket_of(now)
            )
            assert window.allocated("p", budget, now) == pytest.approx(expected, abs=1e-6)
