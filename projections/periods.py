"""Closed periods of the ledger: which charges a period holds, its balances, and the seal that
chains it to the period before.

**Length.** A month by default; a day or an hour for tests and benches. Periods are UTC and
named ``2026-11``, ``2026-11-05`` or ``2026-11-05T13``.

**The close rule.** A period's charges can no longer change once every run that could still
post for its hours has left charging's fold: the fold's horizon (``ChargingState.horizon``: a
week behind the slowest workloads partition) has passed the period's end. Runs that end later
have, by then, posted every hour of the period they were confirmed through; what they post
later for those hours comes from a late fact.

**Which charges a period holds** (:func:`held_by`). A seal names the cut: per ledger partition,
the first offset after it. A period holds the charges for its hours that lie before its cut. A
charge for an hour of a closed period that lies after its cut (a late fact's correction) is a
fact of the period open when it was posted: it counts in that period's balances, and the
closed period is never edited. So a period is the charges for its hours before its cut plus
the late charges between the previous cut and its own; all lie after the ledger's end when
charging's fold first passed the period's start, which the previous seal also names, so an
audit of the period reads the period and one horizon of the log, whatever came before.

**The seal.** Opening and closing balances per account, the count and a digest of the
period's charges (sorted by id, every field that moves money), and a digest over all of that
and the previous seal's digest. Changing one charge or one balance of any period breaks its
seal and, through the chain, every later one. The previous seal's closing balances are the
next period's opening, so an audit of one period starts from them and from the cut positions
the previous seal names, and reads only that period's part of the log.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from itertools import pairwise

import orjson

from events.models import InputPosition, LedgerCharge, PeriodClosed
from events.models.periods import AccountBalance
from events.positions import TopicPartition
from events.times import DAY, HOUR

LENGTHS = ("month", "day", "hour")
Balances = dict[str, int]


def period_start(t: float, length: str = "month") -> int:
    """The start (epoch s) of the period of ``length`` that holds ``t``."""
    moment = datetime.fromtimestamp(int(t), UTC)
    if length == "month":
        return int(datetime(moment.year, moment.month, 1, tzinfo=UTC).timestamp())
    if length == "day":
        return int(t) // DAY * DAY
    if length == "hour":
        return int(t) // HOUR * HOUR
    raise ValueError(f"a period is a {', '.join(LENGTHS)}: {length!r}")


def period_end(start: int, length: str = "month") -> int:
    """The end (exclusive) of the period that starts at ``start``."""
    if length == "month":
        moment = datetime.fromtimestamp(start, UTC)
        year, month = divmod(moment.month, 12)
        return int(datetime(moment.year + year, month + 1, 1, tzinfo=UTC).timestamp())
    return start + (DAY if length == "day" else HOUR)


def period_name(start: int, length: str = "month") -> str:
    fmt = {"month": "%Y-%m", "day": "%Y-%m-%d", "hour": "%Y-%m-%dT%H"}[length]
    return datetime.fromtimestamp(start, UTC).strftime(fmt)


def parse_period(name: str) -> tuple[int, int, str]:
    """(start, end, length) of a period named as :func:`period_name` names it."""
    for length, fmt in (("hour", "%Y-%m-%dT%H"), ("day", "%Y-%m-%d"), ("month", "%Y-%m")):
        try:
            start = int(datetime.strptime(name, fmt).replace(tzinfo=UTC).timestamp())
        except ValueError:
            continue
        return start, period_end(start, length), length
    raise ValueError(f"a period is YYYY-MM, YYYY-MM-DD or YYYY-MM-DDTHH: {name!r}")


def close_due(end: int, horizon: int | None) -> bool:
    """Whether a period that ends at ``end`` can be closed: the fold's horizon passed it."""
    return horizon is not None and horizon >= end


def held_by(
    charge: LedgerCharge, start: int, end: int, before_cut: bool, after_previous_cut: bool
) -> bool:
    """Whether the period [start, end) holds ``charge``, given where it lies on its ledger
    partition: before this period's cut, after the previous period's."""
    hour = int(charge.bucket_start.timestamp())
    return hour_held(hour, start, end, before_cut, after_previous_cut)


def hour_held(hour: int, start: int, end: int, before_cut: bool, after_previous_cut: bool) -> bool:
    """The rule of :func:`held_by` on a charge's hour: an hour of the period before its cut;
    or a late charge for an hour of a closed period between the two cuts. (The cost reports
    bill by it: a month's FOCUS rows are the charges its period holds.)"""
    if not before_cut or hour >= end:
        return False
    return hour >= start or after_previous_cut


def held(
    charges: Iterable[tuple[TopicPartition, int, LedgerCharge]],
    start: int,
    end: int,
    previous_cut: Mapping[TopicPartition, int],
    cut: Mapping[TopicPartition, int],
) -> list[LedgerCharge]:
    """The charges the period [start, end) holds, of ``charges`` read from the ledger with
    their (topic, partition) and offset, given the previous seal's cut (empty for the first
    period: every offset lies after it) and its own. Charging seals what this returns; the
    audit of the period checks the seal against it."""
    return [
        charge
        for key, offset, charge in charges
        if held_by(charge, start, end, offset < cut.get(key, 0), offset >= previous_cut.get(key, 0))
    ]


def balances(opening: Mapping[str, int], charges: Iterable[LedgerCharge]) -> Balances:
    """``opening`` moved by ``charges``: each debits its debit account and credits its credit
    account by its amount (unallocated charges move nothing)."""
    result = dict(opening)
    for charge in charges:
        if charge.amount:
            result[charge.debit_account] = result.get(charge.debit_account, 0) - charge.amount
            result[charge.credit_account] = result.get(charge.credit_account, 0) + charge.amount
    return result


def charges_digest(charges: Iterable[LedgerCharge]) -> str:
    """A digest of a set of charges: every field that moves money, sorted by charge id."""
    digest = hashlib.sha256()
    for charge in sorted(charges, key=lambda c: c.charge_id):
        digest.update(
            orjson.dumps(
                [
                    charge.charge_id,
                    charge.budget,
                    charge.pool,
                    int(charge.bucket_start.timestamp()),
                    charge.kind,
                    charge.debit_account,
                    charge.credit_account,
                    charge.gpu_seconds,
                    charge.amount,
                    charge.corrects,
                ]
            )
        )
    return digest.hexdigest()


@dataclass(frozen=True)
class Seal:
    period: str
    start: int
    end: int
    opening: Balances
    closing: Balances
    charges: int
    charges_digest: str
    previous: str
    digest: str


def seal_digest(
    period: str,
    start: int,
    end: int,
    opening: Mapping[str, int],
    closing: Mapping[str, int],
    charges: int,
    digest_of_charges: str,
    previous: str,
) -> str:
    body = [
        period,
        start,
        end,
        sorted(opening.items()),
        sorted(closing.items()),
        charges,
        digest_of_charges,
        previous,
    ]
    return hashlib.sha256(orjson.dumps(body)).hexdigest()


def seal(
    period: str,
    start: int,
    end: int,
    opening: Mapping[str, int],
    charges: Sequence[LedgerCharge],
    previous: str = "",
) -> Seal:
    """The seal of a period that holds ``charges``, opening at ``opening``, after ``previous``
    (the previous seal's digest; "" for the first)."""
    closing = balances(opening, charges)
    of_charges = charges_digest(charges)
    digest = seal_digest(period, start, end, opening, closing, len(charges), of_charges, previous)
    return Seal(
        period, start, end, dict(opening), closing, len(charges), of_charges, previous, digest
    )


def seal_of(closed: PeriodClosed) -> Seal:
    """The seal a ``PeriodClosed`` event states."""
    return Seal(
        closed.period,
        int(closed.start.timestamp()),
        int(closed.end.timestamp()),
        {b.account: b.amount for b in closed.opening},
        {b.account: b.amount for b in closed.closing},
        closed.charges,
        closed.charges_digest,
        closed.previous_digest,
        closed.digest,
    )


def closed_event(
    sealed: Seal,
    as_of: Mapping[TopicPartition, int],
    inputs: Mapping[TopicPartition, int],
    opened: Mapping[TopicPartition, int],
    checkpoint: str,
) -> PeriodClosed:
    """The event that publishes ``sealed``, cut at ``as_of`` (ledger) and ``inputs``, opened
    at ``opened`` where the checkpoint ``checkpoint`` was kept."""

    def positions(of: Mapping[TopicPartition, int]) -> tuple[InputPosition, ...]:
        return tuple(
            InputPosition(topic=t, partition=p, offset=o) for (t, p), o in sorted(of.items())
        )

    def accounts(of: Mapping[str, int]) -> tuple[AccountBalance, ...]:
        return tuple(AccountBalance(account=a, amount=n) for a, n in sorted(of.items()))

    return PeriodClosed(
        period=sealed.period,
        start=datetime.fromtimestamp(sealed.start, UTC),
        end=datetime.fromtimestamp(sealed.end, UTC),
        opening=accounts(sealed.opening),
        closing=accounts(sealed.closing),
        charges=sealed.charges,
        charges_digest=sealed.charges_digest,
        previous_digest=sealed.previous,
        digest=sealed.digest,
        as_of=positions(as_of),
        inputs=positions(inputs),
        opened=positions(opened),
        checkpoint=checkpoint,
    )


def check_seal(
    recorded: Seal, charges: Sequence[LedgerCharge], previous: Seal | None = None
) -> list[str]:
    """What differs between a recorded seal and the one its charges (and the previous seal)
    give; empty when the seal holds."""
    problems = []
    if previous is not None:
        if recorded.previous != previous.digest:
            problems.append(f"{recorded.period}: does not chain to {previous.period}'s seal")
        if recorded.opening != previous.closing:
            problems.append(f"{recorded.period}: opening balances are not {previous.period}'s")
    again = seal(
        recorded.period, recorded.start, recorded.end, recorded.opening, charges, recorded.previous
    )
    if again.charges != recorded.charges or again.charges_digest != recorded.charges_digest:
        problems.append(
            f"{recorded.period}: {again.charges} charges in the log, the seal says "
            f"{recorded.charges} (or other charges)"
        )
    for account in sorted(again.closing.keys() | recorded.closing.keys()):
        log, sealed = again.closing.get(account, 0), recorded.closing.get(account, 0)
        if log != sealed:
            problems.append(f"{recorded.period}: {account} closes at {log}, sealed at {sealed}")
    if again.digest != recorded.digest:
        problems.append(f"{recorded.period}: the seal's digest does not match its contents")
    return problems


def check_chain(seals: Sequence[Seal]) -> list[str]:
    """Each seal's digest over its own contents, and each chained to the one before."""
    problems = []
    for before, after in pairwise(seals):
        if after.previous != before.digest:
            problems.append(f"{after.period}: does not chain to {before.period}'s seal")
        if after.opening != before.closing:
            problems.append(f"{after.period}: opening balances are not {before.period}'s")
    for one in seals:
        digest = seal_digest(
            one.period,
            one.start,
            one.end,
            one.opening,
            one.closing,
            one.charges,
            one.charges_digest,
            one.previous,
        )
        if digest != one.digest:
            problems.append(f"{one.period}: the seal's digest does not match its contents")
    return problems
