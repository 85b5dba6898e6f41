"""A report's buckets tile time exactly; number formatting is exact and deterministic."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime
from fractions import Fraction

import pytest

from services.reports import buckets, times
from services.reports.writers import hours, to_decimal


def ts(*parts: int) -> int:
    return int(datetime(*parts, tzinfo=UTC).timestamp())  # type: ignore[misc]


@pytest.mark.parametrize("bucket", buckets.BUCKETS)
def test_buckets_tile_without_gaps_or_overlaps(bucket: buckets.Bucket) -> None:
    start, end = ts(2026, 1, 30, 17, 12), ts(2026, 4, 2, 3)
    tiles = buckets.tiles(start, end, bucket)
    assert tiles[0][0] <= start
    assert tiles[-1][1] >= end
    for (a, b), (c, _d) in itertools.pairwise(tiles):
        assert a < b == c
    for a, b in tiles:
        assert buckets.floor(a, bucket) == a
        assert buckets.following(a, bucket) == b
        assert buckets.floor(b - 1, bucket) == a


def test_weeks_start_on_monday_and_months_are_calendar_months() -> None:
    assert times.iso(buckets.floor(ts(2026, 11, 5, 13), "week")) == "2026-11-02T00:00:00Z"
    assert times.iso(buckets.floor(ts(2026, 11, 2), "week")) == "2026-11-02T00:00:00Z"
    assert times.iso(buckets.following(ts(2026, 12, 1), "month")) == "2027-01-01T00:00:00Z"
    feb = buckets.tiles(ts(2028, 2, 10), ts(2028, 2, 11), "month")
    assert feb == [(ts(2028, 2, 1), ts(2028, 3, 1))]
    assert buckets.ceil(ts(2026, 1, 1), "day") == ts(2026, 1, 1)


def test_parse_time_accepts_dates_times_and_epoch_seconds() -> None:
    assert times.parse_time("2026-11-02") == ts(2026, 11, 2)
    assert times.parse_time("2026-11-02T09:30") == ts(2026, 11, 2, 9, 30)
    assert times.parse_time("2026-11-02T10:30:00+01:00") == ts(2026, 11, 2, 9, 30)
    assert times.parse_time("2026-11-02T09:30:00Z") == ts(2026, 11, 2, 9, 30)
    assert times.parse_time(str(ts(2026, 1, 1))) == ts(2026, 1, 1)
    with pytest.raises(ValueError, match="Invalid isoformat"):
        times.parse_time("yesterday")


def test_hours_are_rounded_half_to_even_exactly() -> None:
    assert str(hours(5400)) == "1.500000"
    assert str(hours(1)) == "0.000278"
    assert str(hours(-600)) == "-0.166667"
    assert str(to_decimal(Fraction(1, 2_000_000))) == "0.000000"  # half: to even
    assert str(to_decimal(Fraction(3, 2_000_000))) == "0.000002"
    assert str(to_decimal(Fraction(-1, 3))) == "-0.333333"
