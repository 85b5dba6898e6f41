"""Where a report's buckets start: hours, days, weeks (from Monday 00:00 UTC) and calendar
months, in UTC epoch seconds.

A bucket is the stretch of time one row of a report covers (``fairshare report --bucket``): not
a billing period, the sealed month of ``projections.periods``. Pure, so both sides of a report
agree on it: the projector files each ledger entry under the hour, day, week and month it falls
in (:mod:`projections.bucket_usage`), and the reports cut their ranges into the same buckets
(:mod:`services.reports.buckets`, which re-exports this).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Literal, get_args

from events.times import DAY, HOUR

Bucket = Literal["hour", "day", "week", "month"]
BUCKETS: tuple[Bucket, ...] = get_args(Bucket)


def to_datetime(ts: int) -> datetime:
    return datetime.fromtimestamp(ts, UTC)


def to_ts(moment: datetime) -> int:
    return int(moment.timestamp())


def floor(ts: int, bucket: Bucket) -> int:
    """Start of the bucket containing ``ts``."""
    if bucket == "hour":
        return ts // HOUR * HOUR
    if bucket == "day":
        return ts // DAY * DAY
    day = to_datetime(ts // DAY * DAY)
    if bucket == "week":
        return to_ts(day - timedelta(days=day.weekday()))
    if bucket == "month":
        return to_ts(day.replace(day=1))
    raise ValueError(f"bucket: one of {', '.join(BUCKETS)}, not {bucket!r}")
