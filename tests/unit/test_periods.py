"""Closed periods (issue 23): a period's seal chains to the previous one, tampering with a
charge or a balance breaks it, a late charge for a closed period counts in the open one, and
the periods' names and bounds are what the operator types."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from events.models import LedgerCharge
from events.models.ledger import charge_id
from events.times import HOUR
from projections.periods import (
    balances,
    check_chain,
    check_seal,
    close_due,
    held_by,
    parse_period,
    period_end,
    period_name,
    period_start,
    seal,
)

NOV = int(datetime(2026, 11, 1, tzinfo=UTC).timestamp())


def _charge(workload: str, hour: int, seconds: int, revision: int = 0) -> LedgerCharge:
    return LedgerCharge(
        charge_id=charge_id(workload, 1, hour // HOUR, revision),
        workload_id=workload,
        budget="lab/a",
        pool="p",
        bucket_start=datetime.fromtimestamp(hour, UTC),
        kind="allocated",
        debit_account="budget:lab/a",
        credit_account="capacity:p",
        gpu_seconds=seconds,
        amount=seconds,
    )


def test_periods_are_named_and_bounded_in_utc() -> None:
    assert period_name(NOV) == "2026-11"
    assert parse_period("2026-11") == (NOV, period_end(NOV), "month")
    assert period_end(NOV) - NOV == 30 * 24 * HOUR
    december = period_end(NOV)
    assert period_end(december) == int(datetime(2027, 1, 1, tzinfo=UTC).timestamp())
    assert period_start(NOV + 12 * 24 * HOUR + 5) == NOV
    assert parse_period("2026-11-05")[2] == "day"
    assert parse_period("2026-11-05T13") == (NOV + 4 * 24 * HOUR + 13 * HOUR,) * 1 + (
        NOV + 4 * 24 * HOUR + 14 * HOUR,
        "hour",
    )
    with pytest.raises(ValueError, match="YYYY-MM"):
        parse_period("November")


def test_a_period_closes_once_the_horizon_passed_its_end() -> None:
    end = period_end(NOV)
    assert not close_due(end, None)
    assert not close_due(end, end - 1)
    assert close_due(end, end)


def test_a_late_charge_for_a_closed_period_counts_in_the_open_one_never_in_its_own() -> None:
    late = _charge("w", NOV - HOUR, 60, revision=1)  # October's hour, posted after its cut
    december = period_end(NOV)
    october = period_start(NOV - 1)
    assert not held_by(late, october, NOV, before_cut=False, after_previous_cut=True)
    assert held_by(late, NOV, december, before_cut=True, after_previous_cut=True)
    # an October charge posted before October's cut is October's, not November's
    assert held_by(late, october, NOV, before_cut=True, after_previous_cut=True)
    assert not held_by(late, NOV, december, before_cut=True, after_previous_cut=False)
    # a December hour is never November's
    assert not held_by(_charge("w", december, 60), NOV, december, True, True)


amounts = st.lists(st.integers(1, 3600), min_size=0, max_size=8)


@settings(max_examples=60, deadline=None)
@given(st.lists(amounts, min_size=1, max_size=5), st.data())
def test_the_seal_chain_verifies_and_any_tampering_breaks_it(
    periods: list[list[int]], data: st.DataObject
) -> None:
    seals, charges_of = [], []
    opening: dict[str, int] = {}
    previous = ""
    start = NOV
    for n, seconds in enumerate(periods):
        end = start + 24 * HOUR
        charges = [_charge(f"w{n}-{i}", start + i * HOUR, s) for i, s in enumerate(seconds)]
        sealed = seal(period_name(start, "day"), start, end, opening, charges, previous)
        assert sealed.closing == balances(opening, charges)
        seals.append(sealed)
        charges_of.append(charges)
        opening, previous, start = sealed.closing, sealed.digest, end
    assert check_chain(seals) == []
    for n, sealed in enumerate(seals):
        assert check_seal(sealed, charges_of[n], seals[n - 1] if n else None) == []

    n = data.draw(st.integers(0, len(seals) - 1), label="period tampered with")
    if charges_of[n]:
        forged = [
            c.model_copy(update={"amount": c.amount + 1, "gpu_seconds": c.amount + 1})
            for c in charges_of[n]
        ]
        assert check_seal(seals[n], forged), "a changed charge breaks its period's seal"
    changed = dict(seals[n].closing) | {"budget:lab/a": seals[n].closing.get("budget:lab/a", 0) - 1}
    tampered = [*seals[:n], _replace(seals[n], closing=changed), *seals[n + 1 :]]
    assert check_chain(tampered), "a changed balance breaks the chain"


def _replace(sealed, **changes):  # type: ignore[no-untyped-def]
    from dataclasses import replace

    return replace(sealed, **changes)
