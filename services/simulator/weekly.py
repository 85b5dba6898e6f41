"""Weekly attainment: what the policy promises, measured at the grain it promises it.

Fair share promises each budget its share over a 7-day window. Over a whole trace every good
policy reaches 100% of owed (the period is long enough to catch up), and hour by hour none can
(a budget served early is rightly held back later), so neither figure says whether the promise
was kept. Per budget and per week it can be: the period is cut into weeks of 168 whole hours
counted from the hour of the first arrival (the last week may be shorter), and each week a
budget wanted something it is owed what :func:`projections.owed.owed_pieces` says, hour by
hour, summed over the week.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from events.times import HOUR

WEEK_HOURS = 168
#: A budget-week is checked when its demand exceeded this fraction of the cluster's capacity:
#: below it, one job's luck decides the figure.
SIGNIFICANT_DEMAND = 0.01
#: The floor every checked budget-week must reach.
WEEKLY_FLOOR = 0.90


@dataclass(frozen=True)
class BudgetWeek:
    budget: str
    week: int
    owed_s: float
    delivered_s: float
    demand_s: float
    #: Seconds of this week inside the evaluation period.
    length_s: float

    @property
    def attainment(self) -> float:
        return min(1.0, self.delivered_s / self.owed_s) if self.owed_s > 0 else 1.0

    def checked(self, capacity_gpus: int) -> bool:
        return self.demand_s > SIGNIFICANT_DEMAND * capacity_gpus * self.length_s

    def as_dict(self, capacity_gpus: int) -> dict[str, Any]:
        return {
            "week": self.week,
            "owed_gpu_hours": self.owed_s / HOUR,
            "delivered_gpu_hours": self.delivered_s / HOUR,
            "demand_gpu_hours": self.demand_s / HOUR,
            "owed_delivered": self.attainment,
            "checked": self.checked(capacity_gpus),
        }


def budget_weeks(
    hours: Sequence[int],
    length: Callable[[int], float],
    owed: Mapping[str, Mapping[int, float]],
    delivered: Mapping[str, Mapping[int, float]],
    demand: Mapping[str, Mapping[int, float]],
) -> list[BudgetWeek]:
    """Every (budget, week) in which the budget was owed something, by budget then week.
    ``hours`` are the hour buckets of the period in order, ``length`` their seconds inside it;
    the three mappings are budget -> hour -> GPU-seconds."""
    if not hours:
        return []
    first = hours[0]
    week_length: dict[int, float] = {}
    for hour in hours:
        week = (hour - first) // WEEK_HOURS
        week_length[week] = week_length.get(week, 0.0) + length(hour)
    found: list[BudgetWeek] = []
    for budget in sorted(owed):
        sums: dict[int, list[float]] = {}
        for hour in hours:
            owed_s = owed[budget].get(hour, 0.0)
            if owed_s <= 0:
                continue
            row = sums.setdefault((hour - first) // WEEK_HOURS, [0.0, 0.0, 0.0])
            row[0] += owed_s
            row[1] += delivered.get(budget, {}).get(hour, 0.0)
            row[2] += demand.get(budget, {}).get(hour, 0.0)
        for week in sorted(sums):
            owed_s, delivered_s, demand_s = sums[week]
            found.append(BudgetWeek(budget, week, owed_s, delivered_s, demand_s, week_length[week]))
    return found


def weekly_summary(weeks: Sequence[BudgetWeek], capacity_gpus: int) -> dict[str, Any]:
    """The owed-weighted mean (``sum min(delivered, owed) / sum owed`` over budget-weeks), the
    worst budget-week, and how many checked budget-weeks fell below the floor."""
    owed = sum(w.owed_s for w in weeks)
    met = sum(min(w.delivered_s, w.owed_s) for w in weeks)
    checked = [w for w in weeks if w.checked(capacity_gpus)]
    worst = min(weeks, key=lambda w: (w.attainment, w.budget, w.week), default=None)
    worst_checked = min(checked, key=lambda w: (w.attainment, w.budget, w.week), default=None)
    return {
        "owed_delivered_weekly": met / owed if owed > 0 else 1.0,
        "worst_budget_week": _describe(worst),
        "worst_checked_budget_week": _describe(worst_checked),
        "weekly_checked": len(checked),
        "weekly_violations": sum(1 for w in checked if w.attainment < WEEKLY_FLOOR),
    }


def _describe(week: BudgetWeek | None) -> dict[str, Any] | None:
    if week is None:
        return None
    return {
        "budget": week.budget,
        "week": week.week,
        "value": week.attainment,
        "owed_gpu_hours": week.owed_s / HOUR,
    }
