"""Reporting periods: half-open ``[start, end)`` intervals in UTC that tile time exactly.

Hours and days are fixed lengths; weeks start on Monday 00:00 UTC (ISO weeks); months are
calendar months. Times are integer epoch seconds throughout.
"""

from __future__ import annotations

from datetime import UTC, date, datetime

from events.times import DAY, HOUR, WEEK
from projections.report_periods import PERIODS as PERIODS
from projections.report_periods import Period as Period
from projections.report_periods import floor as floor
from projections.report_periods import to_datetime as _dt
from projections.report_periods import to_ts as _ts

#: The times a report may name: 1970-01-01 up to 2100-01-01 (UTC). Outside, there is no data,
#: and calendar arithmetic on year 9999 overflows.
EARLIEST = 0
LATEST = 4_102_444_800
#: The most periods one report may cover: a year and a bit of hours, 27 years of days. Rows
#: are periods x budgets x pools, so this is what bounds a report's time and memory.
MAX_PERIODS = 10_000


class ReportTooLargeError(ValueError):
    """A report over :data:`MAX_PERIODS` periods, or naming a time outside the range."""


def check_span(start: int, end: int, period: Period) -> None:
    """Refuse a range outside [EARLIEST, LATEST] or longer than MAX_PERIODS periods, before
    anything is loaded or computed."""
    for moment in (start, end):
        if not EARLIEST <= moment <= LATEST:
            raise ReportTooLargeError(
                f"{moment} is outside the times a report may cover "
                f"({iso(EARLIEST)} to {iso(LATEST)})"
            )
    length = {"hour": HOUR, "day": DAY, "week": WEEK, "month": 28 * DAY}[period]
    count = (end - start) // length
    if count > MAX_PERIODS:
        raise ReportTooLargeError(
            f"from..to covers about {count} {period}s; a report covers at most {MAX_PERIODS} "
            "periods: narrow from/to or choose a longer period"
        )


def following(start: int, period: Period) -> int:
    """Start of the period after the one starting at ``start`` (``start`` is on a boundary)."""
    if period == "hour":
        return start + HOUR
    if period == "day":
        return start + DAY
    if period == "week":
        return start + WEEK
    if period == "month":
        moment = _dt(start)
        year, month = (
            (moment.year + 1, 1) if moment.month == 12 else (moment.year, moment.month + 1)
        )
        return _ts(moment.replace(year=year, month=month))
    raise ValueError(f"period: one of {', '.join(PERIODS)}, not {period!r}")


def ceil(ts: int, period: Period) -> int:
    """The first period boundary at or after ``ts``."""
    start = floor(ts, period)
    return start if start == ts else following(start, period)


def tiles(start: int, end: int, period: Period) -> list[tuple[int, int]]:
    """The periods covering ``[start, end)``: ``start`` is floored and ``end`` ceiled to
    period boundaries, so consecutive periods share their boundary (no gap, no overlap)."""
    out: list[tuple[int, int]] = []
    at = floor(start, period)
    last = ceil(end, period)
    while at < last:
        nxt = following(at, period)
        out.append((at, nxt))
        at = nxt
    return out


def parse_time(value: str) -> int:
    """``2026-11-02``, ``2026-11-02T09:00``, ``2026-11-02T09:00:00Z`` or ``...+01:00`` (a
    naive time is UTC), or epoch seconds, as epoch seconds; refuses times outside
    [EARLIEST, LATEST] (:class:`ReportTooLargeError`, a ValueError)."""
    moment = _parse(value)
    if not EARLIEST <= moment <= LATEST:
        raise ReportTooLargeError(
            f"{value!r} is outside the times a report may cover ({iso(EARLIEST)} to {iso(LATEST)})"
        )
    return moment


def _parse(value: str) -> int:
    text = value.strip()
    if text.lstrip("-").isdigit():
        if len(text) > 20:
            raise ReportTooLargeError(f"{text[:24]}... is not a time a report may cover")
        return int(text)
    if len(text) == 10:
        parsed = date.fromisoformat(text)
        return _ts(datetime(parsed.year, parsed.month, parsed.day, tzinfo=UTC))
    moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return _ts(moment)


def iso(ts: int) -> str:
    """``2026-11-02T09:00:00Z``: the one textual form of a time in every report."""
    return _dt(ts).strftime("%Y-%m-%dT%H:%M:%SZ")
