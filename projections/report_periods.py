"""Where a report's periods start: hours, days, weeks (from Monday 00:00 UTC) and calendar
months, in UTC epoch seconds.

Pure, so both sides of a report agree on it: the projector files each ledger entry under the
hour, day, week and month it falls in (:mod:`projections.period_usage`), and the reports cut
their ranges into the same periods (:mod:`services.reports.periods`, which re-exports this).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Literal, get_args

from events.times import DAY, HOUR

Period = Literal["hour", "day", "week", "month"]
PERIODS: tuple[Period, ...] = get_args(Period)


def to_datetime(ts: int) -> datetime:
    return datetime.fromtimestamp(ts, UTC)


def to_ts(moment: datetime) -> int:
    return int(moment.timestamp())


def floor(ts: int, period: Period) -> int:
    """Start of the period containing ``ts``."""
    if period == "hour":
        return ts // HOUR * HOUR
    if period == "day":
        return ts // DAY * DAY
    day = to_datetime(ts // DAY * DAY)
    if period == "week":
        return to_ts(day - timedelta(days=day.weekday()))
    if period == "month":
        return to_ts(day.replace(day=1))
    raise ValueError(f"period: one of {', '.join(PERIODS)}, not {period!r}")
