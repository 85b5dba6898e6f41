"""Recent preemptions as the dashboard lists them: one short phrase per row, the decision
record behind it on expand."""

from __future__ import annotations

from typing import Any

from projections.live_state import LiveState
from services.api.models import Answer, PositionView, RecentPreemption, StandingView
from services.api.waiting import command_records


class PreemptionRow(RecentPreemption):
    """A recent preemption as the page shows it: ``summary`` for its row, the rest on expand
    (``message`` is the API's sentence, positions included)."""

    summary: str
    detail: str
    pass_id: int
    grace_period_s: int
    input_position: list[PositionView]
    budgets: list[StandingView]


class PreemptionRows(Answer):
    as_of: str
    preemptions: list[PreemptionRow]


#: One short phrase per reason code, for the row (the decision record is in the details).
_SUMMARIES = {
    "drain": "its node was cordoned and its contract was over",
    "node-lost": "its node stopped sending heartbeats",
    "cancel": "cancelled by its submitter",
}


def preemption_summary(reason: str, preemptor: str | None, preemptor_budget: str | None) -> str:
    if reason == "preempt-for":
        return f"made room for {preemptor}" + (f" ({preemptor_budget})" if preemptor_budget else "")
    return _SUMMARIES.get(reason, reason)


def recent_preemptions(state: LiveState, limit: int) -> list[dict[str, Any]]:
    found: list[tuple[float, str, str]] = []
    for workload_id, records in state.commands.items():
        for record in records:
            if record.preempts:
                found.append((record.time, record.command_id, workload_id))
    found.sort(key=lambda item: (-item[0], item[1]))
    out = []
    for _time, command_id, workload_id in found[:limit]:
        listed = command_records(state, workload_id)["preemptions"]
        item = next(r for r in listed if r["command_id"] == command_id)
        workload = state.cluster.workloads.get(workload_id)
        out.append(
            {
                "workload_id": workload_id,
                "budget": None if workload is None else workload.budget,
                "submitter": None if workload is None else workload.submitter,
                "status": None if workload is None else workload.status,
                "summary": preemption_summary(
                    item["reason"], item["preemptor"], item["preemptor_budget"]
                ),
                **{
                    k: item[k]
                    for k in (
                        "time",
                        "pool",
                        "attempt",
                        "reason",
                        "preemptor",
                        "preemptor_budget",
                        "requeue",
                        "message",
                        "detail",
                        "pass_id",
                        "grace_period_s",
                        "input_position",
                        "budgets",
                    )
                },
            }
        )
    return out
