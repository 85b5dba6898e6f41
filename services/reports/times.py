"""The times a report may name, as it reads and writes them: epoch seconds in UTC throughout,
read from ISO dates and times (or epoch seconds) and written in one ISO form."""

from __future__ import annotations

from datetime import UTC, date, datetime

from projections.report_buckets import to_datetime as _dt
from projections.report_buckets import to_ts as _ts

#: The times a report may name: 1970-01-01 up to 2100-01-01 (UTC). Outside, there is no data,
#: and calendar arithmetic on year 9999 overflows.
EARLIEST = 0
LATEST = 4_102_444_800


class ReportTooLargeError(ValueError):
    """A report naming a time outside the range, or over
    :data:`~services.reports.buckets.MAX_BUCKETS` buckets."""


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
