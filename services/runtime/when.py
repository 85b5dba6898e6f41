"""Times a person types: ``2h``, ``3d``, ``1w ago``, ``yesterday``, ``today``, ``now``, as well
as the ISO dates and times every command takes.

Slurm's ``sacct -S`` takes ``now-2hours`` and ``today``; git takes ``2.days.ago``. People type
``--since yesterday`` and got a 422. A relative time is resolved here, on the caller's clock,
to an ISO time in UTC, and sent as one: the API and the reports stay clock-free, and what was
asked for is what the request says. Anything else is passed on unchanged, for the receiving
side to parse or refuse with its own message."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86_400, "w": 7 * 86_400}
_AGO = re.compile(
    r"^(?:now\s*-\s*)?(\d+(?:\.\d+)?)\s*(s|sec|secs|seconds?|m|min|mins|minutes?|h|hours?|"
    r"d|days?|w|weeks?)(?:\s+ago)?$"
)
#: Plain words and the day they start.
_DAYS = {"today": 0, "yesterday": 1}


def resolve(text: str, now: datetime | None = None) -> str:
    """``text`` as an ISO time in UTC if it is a relative time, else ``text`` unchanged."""
    moment = resolve_relative(text, now or datetime.now(UTC))
    return text if moment is None else moment.isoformat().replace("+00:00", "Z")


def resolve_relative(text: str, now: datetime) -> datetime | None:
    """The instant a relative time names at ``now`` (UTC), or None if ``text`` is not one:
    ``now``; ``today`` / ``yesterday`` (their UTC midnight); ``N`` units ago, units ``s``,
    ``m`` (minutes), ``h``, ``d``, ``w`` or their words, optionally after ``now-`` or before
    ``ago``."""
    word = text.strip().lower()
    if word == "now":
        return now.astimezone(UTC)
    if word in _DAYS:
        midnight = now.astimezone(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
        return midnight - timedelta(days=_DAYS[word])
    match = _AGO.match(word)
    if match is None:
        return None
    amount, unit = float(match.group(1)), match.group(2)
    seconds = _UNITS["m" if unit.startswith("mi") else unit[0]] * amount
    return now.astimezone(UTC) - timedelta(seconds=seconds)
