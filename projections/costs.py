"""What the GPU-hours cost: the ledger's charges priced with the prices in force, line by line.

Pure: the FOCUS export, the statements, the forecast and the dashboard's money all come from
:func:`cost_lines`, so one log gives one figure everywhere (docs/reports.md, "Costs").

- **Usage**: allocated GPU-seconds, billed to their budget at its effective rate (a negotiated
  rate of its subtree, else the list price); the list cost beside it.
- **Burst**: unallocated GPU-seconds, billed 0; their list value is shown.
- **Lost to preemption**: the part of a preempted or lost run that its work did not keep (its
  own lines, carved out of that run's usage or burst, so nothing is counted twice): who paid
  for work thrown away.
- **Idle**: capacity times the list price, less what was billed (idle GPUs, burst given free,
  discounts), when positive, allocated by a named method: ``share`` (by each budget's
  entitlement in that hour), ``use`` (by what each was billed in that pool and hour) or
  ``platform`` (kept as the platform's cost, on its own account).
- **Corrections**: a late charge for an hour of a closed period is billed in the period that
  holds it (``projections.periods.held_by``), on its own line.

An hour no list price covers is not priced: its lines carry no money and say so
(``priced`` False), and idle is not computed for it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from decimal import Decimal
from fractions import Fraction
from typing import Literal

from events.times import DAY, HOUR
from projections.money import as_decimal, cost, largest_remainder
from projections.price_book import PriceBook

IdleMethod = Literal["share", "use", "platform"]
IDLE_METHODS: tuple[IdleMethod, ...] = ("share", "use", "platform")
LineKind = Literal["usage", "burst", "lost", "idle"]
#: The account idle cost is kept on with the ``platform`` method.
PLATFORM = "(platform)"


@dataclass(frozen=True, slots=True)
class Charged:
    """One ledger entry as billing sees it."""

    workload_id: str
    attempt: int
    budget: str
    pool: str
    #: The hour bucket's start (epoch seconds).
    hour: int
    allocated: bool
    #: As it adds to the budget: a reversal is negative.
    gpu_s: int
    #: A late charge for an hour of a closed period, billed in this one.
    correction: bool = False


@dataclass(frozen=True, slots=True)
class CostLine:
    kind: LineKind
    budget: str
    pool: str
    #: The workload (None for idle lines).
    workload_id: str | None
    #: Funded work (burst: False; idle lines: True).
    allocated: bool
    #: The hours the line covers, [start, end).
    start: int
    end: int
    gpu_s: int
    correction: bool
    #: A list price covered its hours (else it carries no money).
    priced: bool
    currency: str
    list_unit_price: Decimal
    effective_unit_price: Decimal
    list_cost: Decimal
    effective_cost: Decimal
    billed_cost: Decimal
    #: How idle was allocated ("" for other lines).
    method: str = ""


@dataclass(frozen=True, slots=True)
class Capacity:
    """A pool's GPU-seconds in one hour, and the weights idle is shared by in it."""

    gpu_s: int
    #: Leaf budget -> its entitlement that hour (share x capacity), for the ``share`` method.
    entitled: Mapping[str, float]


@dataclass
class _Line:
    """A line before its money is rounded: exact fractions."""

    kind: LineKind
    budget: str
    pool: str
    workload_id: str | None
    allocated: bool
    day: int
    correction: bool
    list_price: Decimal | None
    effective_price: Decimal | None
    start: int
    end: int
    gpu_s: int = 0
    list_cost: Fraction = Fraction(0)
    billed: Fraction = Fraction(0)
    method: str = ""

    def key(self) -> tuple[object, ...]:
        return (
            self.day,
            self.pool,
            self.budget,
            self.workload_id or "",
            self.correction,
            self.kind,
            self.allocated,
            str(self.list_price),
            str(self.effective_price),
        )

    @property
    def priced(self) -> bool:
        return self.list_price is not None and self.effective_price is not None

    def price(self) -> None:
        """Its exact money: burst is billed nothing, funded work at its effective rate."""
        if self.list_price is None or self.effective_price is None or self.kind == "idle":
            return
        self.list_cost = cost(self.gpu_s, self.list_price)
        self.billed = cost(self.gpu_s, self.effective_price) if self.allocated else Fraction(0)


def cost_lines(
    charged: Iterable[Charged],
    book: PriceBook,
    *,
    lost: Mapping[tuple[str, int], int] | None = None,
    capacity: Mapping[tuple[str, int], Capacity] | None = None,
    idle_method: IdleMethod = "share",
) -> list[CostLine]:
    """Every cost line of ``charged`` (one billing period's charges) and, given ``capacity``
    per (pool, hour), its idle lines; sorted, money rounded so lines add up exactly."""
    groups: dict[tuple[object, ...], _Line] = {}
    billed_by_hour: dict[tuple[str, int], dict[str, Fraction]] = {}
    for kind, entry in _carve_lost(list(charged), lost or {}):
        list_price = book.list_price(entry.pool, entry.hour)
        own = book.effective_price(entry.pool, entry.budget, entry.hour)
        effective = own.per_gpu_hour if own is not None and list_price is not None else None
        line = _Line(
            kind=kind,
            budget=entry.budget,
            pool=entry.pool,
            workload_id=entry.workload_id,
            allocated=entry.allocated,
            day=entry.hour - entry.hour % DAY,
            correction=entry.correction,
            list_price=None if list_price is None else list_price.per_gpu_hour,
            effective_price=effective,
            start=entry.hour,
            end=entry.hour + HOUR,
        )
        found = groups.setdefault(line.key(), line)
        found.gpu_s += entry.gpu_s
        found.start = min(found.start, entry.hour)
        found.end = max(found.end, entry.hour + HOUR)
        if effective is not None and entry.allocated and not entry.correction:
            paid = billed_by_hour.setdefault((entry.pool, entry.hour), {})
            paid[entry.budget] = paid.get(entry.budget, Fraction(0)) + cost(entry.gpu_s, effective)
    lines = sorted(groups.values(), key=_Line.key)
    for line in lines:
        line.price()
    if capacity:
        lines += _idle(capacity, book, billed_by_hour, idle_method)
    return _rounded(lines, book.currency or "")


def lost_gpu_s(
    charged_gpu_s: int, gpus: int, ran_s: int, resumable: bool, checkpoint_every_s: int | None
) -> int:
    """GPU-seconds of a preempted or lost run its work did not keep: all of it, unless the
    work resumes and says how often it checkpoints (its spec's ``checkpoint_every_s``); then
    what it ran since its last checkpoint. Never more than was charged."""
    if not resumable or not checkpoint_every_s or checkpoint_every_s <= 0:
        return max(0, charged_gpu_s)
    return max(0, min(charged_gpu_s, gpus * (ran_s % checkpoint_every_s)))


# -- the parts ---------------------------------------------------------------------------------


def _carve_lost(
    entries: list[Charged], lost: Mapping[tuple[str, int], int]
) -> list[tuple[LineKind, Charged]]:
    """Each entry as usage or burst, with a run's lost GPU-seconds carved from its last hours
    (the work done since the last checkpoint is the latest work). Corrections are not carved:
    they adjust hours already billed."""
    left = dict(lost)
    order = sorted(
        range(len(entries)),
        key=lambda i: (entries[i].workload_id, entries[i].attempt, -entries[i].hour, i),
    )
    carved: dict[int, list[tuple[LineKind, Charged]]] = {}
    for i in order:
        entry = entries[i]
        kind: LineKind = "usage" if entry.allocated else "burst"
        key = (entry.workload_id, entry.attempt)
        take = 0 if entry.correction else max(0, min(left.get(key, 0), entry.gpu_s))
        parts: list[tuple[LineKind, Charged]] = []
        if take:
            left[key] -= take
            parts.append(("lost", replace(entry, gpu_s=take)))
        if entry.gpu_s != take:
            parts.append((kind, replace(entry, gpu_s=entry.gpu_s - take)))
        carved[i] = parts
    return [part for i in range(len(entries)) for part in carved[i]]


def _idle(
    capacity: Mapping[tuple[str, int], Capacity],
    book: PriceBook,
    billed: Mapping[tuple[str, int], Mapping[str, Fraction]],
    method: IdleMethod,
) -> list[_Line]:
    """Per pool, day and budget: capacity at the list price less what was billed, allocated
    hour by hour by ``method``."""
    found: dict[tuple[str, int, str, str], _Line] = {}
    for (pool, hour), cap in sorted(capacity.items()):
        price = book.list_price(pool, hour)
        if price is None:
            continue
        paid = billed.get((pool, hour), {})
        unrecovered = cost(cap.gpu_s, price.per_gpu_hour) - sum(paid.values(), Fraction(0))
        if unrecovered <= 0:
            continue  # billed at least the capacity's list value (a rate above list)
        day = hour - hour % DAY
        for budget, amount in _allocate(unrecovered, method, cap, paid).items():
            key = (pool, day, budget, str(price.per_gpu_hour))
            line = found.get(key)
            if line is None:
                line = found[key] = _Line(
                    kind="idle",
                    budget=budget,
                    pool=pool,
                    workload_id=None,
                    allocated=True,
                    day=day,
                    correction=False,
                    list_price=price.per_gpu_hour,
                    effective_price=price.per_gpu_hour,
                    start=hour,
                    end=hour + HOUR,
                    method=method,
                )
            line.billed += amount
            line.start = min(line.start, hour)
            line.end = max(line.end, hour + HOUR)
    return [found[key] for key in sorted(found)]


def _allocate(
    amount: Fraction, method: IdleMethod, cap: Capacity, paid: Mapping[str, Fraction]
) -> dict[str, Fraction]:
    """``amount`` split by ``method``; to the platform when the method has no weights."""
    weights: Mapping[str, Fraction] = {}
    if method == "share":
        weights = {b: Fraction(w) for b, w in cap.entitled.items() if w > 0}
    elif method == "use":
        weights = {b: p for b, p in paid.items() if p > 0}
    total = sum(weights.values(), Fraction(0))
    if method == "platform" or total <= 0:
        return {PLATFORM: amount}
    return {b: amount * w / total for b, w in sorted(weights.items())}


def _rounded(lines: list[_Line], currency: str) -> list[CostLine]:
    """Each money column rounded by the largest remainder within each kind of line (and
    corrections apart), so every kind's lines add up to its exact total rounded once."""
    groups: dict[tuple[str, bool], list[int]] = {}
    for i, line in enumerate(lines):
        groups.setdefault((line.kind, line.correction), []).append(i)
    list_units = [0] * len(lines)
    billed_units = [0] * len(lines)
    for members in groups.values():
        for i, units in zip(
            members, largest_remainder([lines[i].list_cost for i in members]), strict=True
        ):
            list_units[i] = units
        for i, units in zip(
            members, largest_remainder([lines[i].billed for i in members]), strict=True
        ):
            billed_units[i] = units
    out: list[CostLine] = []
    for i, line in enumerate(lines):
        billed = as_decimal(billed_units[i])
        out.append(
            CostLine(
                kind=line.kind,
                budget=line.budget,
                pool=line.pool,
                workload_id=line.workload_id,
                allocated=line.allocated,
                start=line.start,
                end=line.end,
                gpu_s=line.gpu_s,
                correction=line.correction,
                priced=line.priced,
                currency=currency if line.priced else "",
                list_unit_price=line.list_price or Decimal(0),
                effective_unit_price=(line.effective_price or Decimal(0))
                if line.allocated
                else Decimal(0),
                list_cost=as_decimal(list_units[i]),
                effective_cost=billed,
                billed_cost=billed,
                method=line.method,
            )
        )
    return out
