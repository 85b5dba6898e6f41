"""Times a person types (services/runtime/when.py): relative ones resolved on the caller's
clock to ISO UTC, anything else passed on unchanged."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from hypothesis import given
from hypothesis import strategies as st

from services.runtime.when import resolve, resolve_relative

NOW = datetime(2026, 12, 7, 13, 45, 30, tzinfo=UTC)


@pytest.mark.parametrize(
    ("typed", "meant"),
    [
        ("now", "2026-12-07T13:45:30Z"),
        ("today", "2026-12-07T00:00:00Z"),
        ("yesterday", "2026-12-06T00:00:00Z"),
        ("Yesterday ", "2026-12-06T00:00:00Z"),
        ("2h", "2026-12-07T11:45:30Z"),
        ("90m", "2026-12-07T12:15:30Z"),
        ("30 minutes ago", "2026-12-07T13:15:30Z"),
        ("3d", "2026-12-04T13:45:30Z"),
        ("1w ago", "2026-11-30T13:45:30Z"),
        ("now-2hours", "2026-12-07T11:45:30Z"),
        ("1.5h", "2026-12-07T12:15:30Z"),
    ],
)
def test_relative_times_resolve_on_the_callers_clock(typed: str, meant: str) -> None:
    assert resolve(typed, NOW) == meant


@pytest.mark.parametrize("text", ["2026-12-01", "2026-12-01T09:00:00Z", "1796000000", "soon", ""])
def test_anything_else_passes_unchanged_for_the_receiver_to_judge(text: str) -> None:
    assert resolve(text, NOW) == text


@given(st.integers(0, 10_000), st.sampled_from(["s", "m", "h", "d", "w"]))
def test_n_units_ago_is_n_units_before_now(amount: int, unit: str) -> None:
    seconds = {"s": 1, "m": 60, "h": 3600, "d": 86_400, "w": 604_800}[unit]
    moment = resolve_relative(f"{amount}{unit}", NOW)
    assert moment is not None
    assert (NOW - moment).total_seconds() == amount * seconds


def test_history_since_yesterday_asks_the_api_for_yesterdays_midnight(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``fairshare history --since yesterday`` was a 422 (the API takes ISO times)."""
    from typer.testing import CliRunner

    from services.cli import app
    from services.client.api import FairshareClient

    asked: dict[str, object] = {}

    def history(self: FairshareClient, **filters: object) -> object:
        asked.update(filters)
        raise SystemExit(0)

    monkeypatch.setattr(FairshareClient, "history", history)
    result = CliRunner().invoke(app, ["history", "--since", "yesterday", "--token", "t"])
    assert result.exit_code == 0, result.output
    since = str(asked["since"])
    assert since.endswith("T00:00:00Z")
    assert datetime.fromisoformat(since.replace("Z", "+00:00")).date() < datetime.now(UTC).date()
