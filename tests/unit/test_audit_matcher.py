"""The audit's charge matcher: pairs recorded and recomputed charges in one pass, in any
interleaving, and reports every kind of difference."""

from __future__ import annotations

import random
from datetime import UTC, datetime

from hypothesis import given, settings
from hypothesis import strategies as st

from events.models import LedgerCharge
from events.models.ledger import charge_id
from events.times import HOUR
from services.audit.replay import ChargeMatcher, compare

T0 = 1_700_000_000 - 1_700_000_000 % HOUR


def charge(workload: str, bucket: int, seconds: int = 3600, budget: str = "lab/a") -> LedgerCharge:
    return LedgerCharge(
        charge_id=charge_id(workload, 1, T0 // HOUR + bucket),
        workload_id=workload,
        budget=budget,
        pool="p",
        bucket_start=datetime.fromtimestamp(T0 + bucket * HOUR, UTC),
        kind="allocated",
        debit_account=f"budget:{budget}",
        credit_account="capacity:p",
        gpu_seconds=seconds,
        amount=seconds,
    )


def ledger_of(workloads: int, hours: int) -> list[LedgerCharge]:
    return [charge(f"w{w}", h) for h in range(hours) for w in range(workloads)]


def interleave(
    recorded: list[LedgerCharge], recomputed: list[LedgerCharge], seed: int
) -> list[str]:
    """Offer both sides to a matcher in a random interleaving (each side keeps its order)."""
    rng = random.Random(seed)
    matcher = ChargeMatcher()
    left, right = list(recorded), list(recomputed)
    while left or right:
        if left and (not right or rng.random() < 0.5):
            matcher.offer_recorded(left.pop(0))
        else:
            matcher.offer_recomputed(right.pop(0))
    return matcher.differences()


@settings(max_examples=60, deadline=None)
@given(
    workloads=st.integers(1, 6),
    hours=st.integers(1, 6),
    seed=st.integers(0, 10_000),
)
def test_the_same_charges_in_any_interleaving_are_identical(
    workloads: int, hours: int, seed: int
) -> None:
    charges = ledger_of(workloads, hours)
    # Another global order that keeps each workload's order (an export interleaves partitions).
    by_workload = sorted(charges, key=lambda c: (c.workload_id, c.bucket_start))
    assert interleave(charges, by_workload, seed) == []


@settings(max_examples=60, deadline=None)
@given(
    workloads=st.integers(1, 4),
    hours=st.integers(2, 6),
    seed=st.integers(0, 10_000),
    data=st.data(),
)
def test_any_swap_within_a_workload_is_reported_in_any_interleaving(
    workloads: int, hours: int, seed: int, data: st.DataObject
) -> None:
    charges = ledger_of(workloads, hours)
    victim = f"w{data.draw(st.integers(0, workloads - 1))}"
    positions = [i for i, c in enumerate(charges) if c.workload_id == victim]
    i, j = sorted(
        data.draw(st.lists(st.sampled_from(positions), min_size=2, max_size=2, unique=True))
    )
    swapped = list(charges)
    swapped[i], swapped[j] = swapped[j], swapped[i]
    assert interleave(swapped, charges, seed) == [f"charges of {victim} are in another order"]


def test_missing_unsupported_different_and_duplicated_charges_are_all_listed() -> None:
    facts = ledger_of(2, 3)
    log = [c for c in facts if c.charge_id != facts[0].charge_id]  # one dropped
    changed = facts[3].model_copy(update={"gpu_seconds": 10, "amount": 10})
    log = [changed if c.charge_id == changed.charge_id else c for c in log]
    invented = charge("nobody", 0)
    log += [invented, log[0]]  # an invented charge and a duplicate
    differences = interleave(log, facts, seed=1)
    assert differences[0] == "recorded: duplicate charge ids"
    assert f"missing in the log: {facts[0].charge_id} (3600 GPU-s)" in differences
    assert f"not supported by the facts: {invented.charge_id} (3600 GPU-s)" in differences
    assert any(
        d.startswith(f"differs: {changed.charge_id}: gpu_seconds: log 10 != facts 3600")
        for d in differences
    )
    totals = [d for d in differences if d.startswith("total ")]
    # Hour 0: -3600 (dropped) +3600 (invented) +3600 (duplicate of log[0], hour 0) = +3600;
    # hour 1: the changed charge, 10 instead of 3600.
    assert totals == [
        "total lab/a in p, hour 2023-11-14T22:00:00+00:00: the log charges +3600 GPU-s "
        "against the facts",
        "total lab/a in p, hour 2023-11-14T23:00:00+00:00: the log charges -3590 GPU-s "
        "against the facts",
    ]


def test_compare_of_complete_lists_agrees_with_the_streaming_matcher() -> None:
    facts = ledger_of(3, 4)
    assert compare(facts, list(reversed(facts)), check_order=False) == []
    assert compare(list(reversed(facts)), facts) == [
        f"charges of w{w} are in another order" for w in range(3)
    ]
    assert compare(facts[1:], facts, check_order=False)[0].startswith("missing in the log")


def _reversal(of: LedgerCharge) -> LedgerCharge:
    hour = int(of.bucket_start.timestamp()) // HOUR
    return of.model_copy(
        update={
            "charge_id": charge_id(of.workload_id, 1, hour, 1),
            "debit_account": of.credit_account,
            "credit_account": of.debit_account,
            "corrects": of.charge_id,
        }
    )


def test_revisions_of_an_hour_that_net_to_the_same_are_no_difference_when_asked() -> None:
    """A run's hour posted then reversed by a late loss (one reading order) against never
    posted (the other): the same GPU-seconds, other revisions."""
    posted = charge("w", 3, 3600)
    for net_revisions, expected in ((True, []), (False, 2)):
        matcher = ChargeMatcher(check_order=False, net_revisions=net_revisions)
        matcher.offer_recorded(posted)
        matcher.offer_recorded(_reversal(posted))
        found = matcher.differences()
        assert (len(found) if isinstance(expected, int) else found) == expected, found


def test_revisions_that_do_not_net_to_the_same_are_still_reported() -> None:
    posted = charge("w", 3, 3600)
    matcher = ChargeMatcher(check_order=False, net_revisions=True)
    matcher.offer_recorded(posted)
    matcher.offer_recorded(_reversal(charge("w", 3, 1800)))
    matcher.offer_recomputed(charge("w", 3, 600).model_copy(update={"charge_id": "charge:w:1:x:9"}))
    assert any("not supported by the facts" in d for d in matcher.differences())
