"""Exact money: amounts are computed as fractions and rounded once, so that rounded rows add
up to the rounded total exactly.

A GPU-second at 2.35 a GPU-hour costs 2.35/3600, which no decimal holds. Rounding each row on
its own lets a month of rows drift from the priced total by a fraction of a unit per row;
rounding by the largest remainder (Hamilton's method) gives each row its amount floored to the
unit, then the units the floors lost to the rows that lost the most, so the rows add up to the
total rounded once, and no row is off by a unit or more.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from decimal import Decimal
from fractions import Fraction

#: Decimals kept in every amount of money (a micro-unit of the currency).
PLACES = 6
UNIT = Fraction(1, 10**PLACES)


def cost(gpu_s: int, per_gpu_hour: Decimal) -> Fraction:
    """What ``gpu_s`` GPU-seconds cost at ``per_gpu_hour``, exactly."""
    return Fraction(gpu_s) * Fraction(per_gpu_hour) / 3600


def as_decimal(units: int) -> Decimal:
    """An amount of micro-units as a decimal with :data:`PLACES` places."""
    return Decimal(units).scaleb(-PLACES).quantize(Decimal(1).scaleb(-PLACES))


def rounded_total(amounts: Sequence[Fraction]) -> int:
    """The exact sum, in micro-units rounded half away from zero."""
    total = sum(amounts, Fraction(0)) / UNIT
    return _round_half_away(total)


def largest_remainder(amounts: Sequence[Fraction]) -> list[int]:
    """Each amount in micro-units, so that they add up to :func:`rounded_total` exactly and
    each is its exact value floored or ceiled. Ties go to the earlier amount (the caller's
    order is the rows' order, so the same rows always round the same way)."""
    scaled = [a / UNIT for a in amounts]
    floors = [math.floor(s) for s in scaled]
    left = rounded_total(amounts) - sum(floors)
    order = sorted(range(len(scaled)), key=lambda i: (-(scaled[i] - floors[i]), i))
    for i in order[:left]:
        floors[i] += 1
    return floors


def _round_half_away(value: Fraction) -> int:
    whole = math.floor(abs(value) + Fraction(1, 2))
    return whole if value >= 0 else -whole
