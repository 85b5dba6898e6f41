"""A report's buckets: half-open ``[start, end)`` intervals in UTC that tile time exactly, one
row of a report per bucket (``--bucket hour|day|week|month``; not a billing period).

Hours and days are fixed lengths; weeks start on Monday 00:00 UTC (ISO weeks); months are
calendar months. Times are integer epoch seconds throughout (:mod:`services.reports.times`).
"""

from __future__ import annotations

from events.times import DAY, HOUR, WEEK
from projections.report_buckets import BUCKETS as BUCKETS
from projections.report_buckets import Bucket as Bucket
from projections.report_buckets import floor as floor
from projections.report_buckets import to_datetime as _dt
from projections.report_buckets import to_ts as _ts
from services.reports.times import EARLIEST, LATEST, ReportTooLargeError, iso

#: The most buckets one report may cover: a year and a bit of hours, 27 years of days. Rows
#: are buckets x budgets x pools, so this is what bounds a report's time and memory.
MAX_BUCKETS = 10_000


def check_span(start: int, end: int, bucket: Bucket) -> None:
    """Refuse a range outside [EARLIEST, LATEST] or longer than MAX_BUCKETS buckets, before
    anything is loaded or computed."""
    for moment in (start, end):
        if not EARLIEST <= moment <= LATEST:
            raise ReportTooLargeError(
                f"{moment} is outside the times a report may cover "
                f"({iso(EARLIEST)} to {iso(LATEST)})"
            )
    length = {"hour": HOUR, "day": DAY, "week": WEEK, "month": 28 * DAY}[bucket]
    count = (end - start) // length
    if count > MAX_BUCKETS:
        raise ReportTooLargeError(
            f"from..to covers about {count} {bucket}s; a report covers at most {MAX_BUCKETS} "
            "buckets: narrow from/to or choose a longer bucket"
        )


def following(start: int, bucket: Bucket) -> int:
    """Start of the bucket after the one starting at ``start`` (``start`` is on a boundary)."""
    if bucket == "hour":
        return start + HOUR
    if bucket == "day":
        return start + DAY
    if bucket == "week":
        return start + WEEK
    if bucket == "month":
        moment = _dt(start)
        year, month = (
            (moment.year + 1, 1) if moment.month == 12 else (moment.year, moment.month + 1)
        )
        return _ts(moment.replace(year=year, month=month))
    raise ValueError(f"bucket: one of {', '.join(BUCKETS)}, not {bucket!r}")


def ceil(ts: int, bucket: Bucket) -> int:
    """The first bucket boundary at or after ``ts``."""
    start = floor(ts, bucket)
    return start if start == ts else following(start, bucket)


def tiles(start: int, end: int, bucket: Bucket) -> list[tuple[int, int]]:
    """The buckets covering ``[start, end)``: ``start`` is floored and ``end`` ceiled to
    bucket boundaries, so consecutive buckets share their boundary (no gap, no overlap)."""
    out: list[tuple[int, int]] = []
    at = floor(start, bucket)
    last = ceil(end, bucket)
    while at < last:
        nxt = following(at, bucket)
        out.append((at, nxt))
        at = nxt
    return out
