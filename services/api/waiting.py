"""The queue and "why": pending work in the order a pass considers it, the reason that decides
for each workload, and the decision records of what was done to it.

The order and the reasons are the scheduling core's (:mod:`~scheduling.
why_pending`), the words :mod:`services.api.sentences`'; this module puts them into the answers
of ``/queue`` and ``/workloads/{id}/why``. Nothing here changes the state it reads.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from events.models import PreemptCommand
from events.times import DEFAULT_WINDOW_S
from projections.cluster_types import WorkloadState
from projections.contract import contract_end
from projections.live_state import CommandRecord, LiveState
from scheduling import why_pending as why
from services.api import models as m
from services.api.sentences import (
    clock_time,
    iso,
    pending_summary,
    preempt_message,
    ratio,
    reason_views,
)


def pending_queue(
    state: LiveState, pool: str, now: float, window_s: int = DEFAULT_WINDOW_S
) -> why.PoolQueue:
    return why.PoolQueue(
        state.cluster, state.tree, pool, now, state.usage_in_window(pool, now), window_s
    )


def workload_name(spec: dict[str, Any]) -> str | None:
    """A job's name (``fairshare submit -J``) lives in its spec: the scheduler never reads it."""
    name = spec.get("name")
    return name if isinstance(name, str) and name else None


def pool_queue(
    state: LiveState,
    pool: str,
    now: float,
    window_s: int = DEFAULT_WINDOW_S,
    *,
    reasons: bool = True,
    keep: Callable[[WorkloadState], bool] | None = None,
) -> m.PoolQueueView:
    """``pool``'s pending work in order, with position (1-based) and, if asked, reasons and
    the one that decides; ``keep``: only the entries it keeps."""
    queue = pending_queue(state, pool, now, window_s)
    entries = []
    listed = (
        queue.each(keep)
        if reasons
        else (
            (position, workload, ())
            for position, workload in enumerate(queue.ordered, start=1)
            if keep is None or keep(workload)
        )
    )
    for position, workload, found in listed:
        code, summary = pending_summary(found, now) if reasons else (None, None)
        entries.append(
            m.QueueEntry(
                position=position,
                workload_id=workload.workload_id,
                budget=workload.budget,
                submitter=workload.submitter,
                gpus=workload.gpus,
                gang=workload.gang,
                min_runtime_s=workload.min_runtime_s,
                allocated=workload.allocated,
                priority=workload.priority,
                submitted_at=iso(workload.submitted_at),
                budget_rank=queue.rank(workload.budget),
                usage_ratio=ratio(queue.usage_ratio(workload.budget)),
                reasons=reason_views(found, now) if reasons else None,
                name=workload_name(workload.spec),
                reason=code,
                summary=summary,
                array_id=workload.array_id,
                array_index=workload.array_index,
            )
        )
    nodes = [n for n in state.cluster.nodes.values() if n.pool == pool]
    usable = [n for n in nodes if n.schedulable]
    return m.PoolQueueView(
        pool=pool,
        capacity=state.cluster.capacity(pool),
        free_gpus=sum(n.free for n in usable),
        largest_free_gpus=max((n.free for n in usable), default=0),
        cordoned_nodes=sorted(n.name for n in nodes if n.cordoned),
        queue_length=len(queue.ordered),
        pending=entries,
    )


def queue_view(
    state: LiveState,
    now: float,
    window_s: int,
    pools: list[str],
    *,
    budget: str | None,
    submitter: str | None,
    reasons: bool,
    array: str | None = None,
) -> m.QueueView:
    """The queues of ``pools``, entries filtered by budget subtree, submitter and array
    (positions stay those of the whole queue)."""

    def keep(workload: WorkloadState) -> bool:
        return (
            (
                budget is None
                or workload.budget == budget
                or workload.budget.startswith(budget + "/")
            )
            and (submitter is None or workload.submitter == submitter)
            and (array is None or workload.array_id == array)
        )

    result = [pool_queue(state, name, now, window_s, reasons=reasons, keep=keep) for name in pools]
    return m.QueueView(as_of=iso(now), window_s=window_s, pools=result)


def why_view(state: LiveState, workload_id: str, now: float, window_s: int) -> m.WhyView:
    """Why a workload is pending (per acceptable pool) and its decision records, led by one
    sentence: where it waits and what decides, or what happened to it last."""
    workload = state.cluster.workloads[workload_id]
    pending = []
    if workload.status == "pending":
        for pool in workload.pools:
            queue = pending_queue(state, pool, now, window_s)
            for position, queued in enumerate(queue.ordered, start=1):
                if queued.workload_id != workload_id:
                    continue
                found = queue.reasons(position)
                code, summary = pending_summary(found, now)
                pending.append(
                    m.PendingInPool(
                        pool=pool,
                        position=position,
                        queue_length=len(queue.ordered),
                        budget_rank=queue.rank(queued.budget),
                        usage_ratio=ratio(queue.usage_ratio(queued.budget)),
                        reasons=reason_views(found, now),
                        reason=code,
                        summary=summary,
                    )
                )
    placements, preemptions = records(state, workload_id)
    return m.WhyView(
        workload_id=workload_id,
        status=workload.status,
        attempt=workload.attempt,
        as_of=iso(now),
        pending=pending,
        placements=placements,
        preemptions=preemptions,
        summary=_why_summary(state, workload_id, pending, preemptions, now),
    )


def _why_summary(
    state: LiveState,
    workload_id: str,
    pending: list[m.PendingInPool],
    preemptions: list[m.PreemptionRecord],
    now: float,
) -> str:
    workload = state.cluster.workloads[workload_id]
    if pending:
        first = pending[0]
        return (
            f"pending in {first.pool} (position {first.position} of {first.queue_length}): "
            f"{first.summary}"
        )
    if workload.status == "pending":
        return "pending: not in the queue of any of its pools yet"
    if workload.status in ("placed", "running"):
        where = ", ".join(node for node, _gpus in workload.placement)
        text = f"{workload.status} on {where}"
        if workload.allocated and workload.started_at is not None:
            end = contract_end(workload.started_at, workload.min_runtime_s)
            if now < end:  # inside its contract (projections.contract.inside_contract)
                text += f"; its contract protects it until {clock_time(end, now)}"
            else:
                text += "; its contract is over: work of budgets ranking ahead may preempt it"
        elif not workload.allocated:
            text += "; it runs as burst work and may be preempted at any time"
        return text
    if preemptions and workload.status in ("preempted", "lost", "cancelled"):
        return preemptions[-1].message
    return f"{workload.status}: it is not waiting"


# -- decision records ---------------------------------------------------------------------------
def records(
    state: LiveState, workload_id: str
) -> tuple[list[m.PlacementRecord], list[m.PreemptionRecord]]:
    """The place and preempt commands of a workload, with their decision records."""
    placements: list[m.PlacementRecord] = []
    preemptions: list[m.PreemptionRecord] = []
    for record in state.commands.get(workload_id, []):
        command = record.command
        if isinstance(command, PreemptCommand):
            preemptions.append(_preemption(state, record, command))
            continue
        placements.append(
            m.PlacementRecord(
                **_decision_fields(record),
                placement=[
                    m.PlacementPart(node=part.node, gpus=list(part.gpus))
                    for part in command.placement.nodes
                ],
            )
        )
    return placements, preemptions


def _decision_fields(record: CommandRecord) -> dict[str, Any]:
    command = record.command
    decision = command.decision
    return {
        "time": iso(record.time),
        "command_id": command.command_id,
        "attempt": command.attempt,
        "pool": command.pool,
        "reason": decision.reason,
        "detail": decision.detail,
        "pass_id": decision.pass_id,
        "input_position": [p.model_dump() for p in decision.input_position],
        "budgets": [b.model_dump() for b in decision.budgets],
    }


def _preemption(
    state: LiveState, record: CommandRecord, command: PreemptCommand
) -> m.PreemptionRecord:
    decision = command.decision
    preemptor = state.cluster.workloads.get(decision.preemptor or "")
    preemptor_budget = None if preemptor is None else preemptor.budget
    victim = state.cluster.workloads.get(command.workload_id)
    fields = _decision_fields(record)
    message = preempt_message(
        decision.reason,
        None if victim is None else victim.budget,
        victim is None or victim.allocated,
        decision.preemptor,
        preemptor_budget,
        fields["budgets"],
    )
    return m.PreemptionRecord(
        **fields,
        preemptor=decision.preemptor,
        preemptor_budget=preemptor_budget,
        requeue=command.requeue,
        grace_period_s=command.grace_period_s,
        message=message,
    )


def preemption_count(state: LiveState, workload_id: str) -> int:
    """Preempt commands against the workload, cancellations not counted (the charges report's
    ``preemptions`` counts the same)."""
    return sum(
        1
        for record in state.commands.get(workload_id, [])
        if record.preempts and record.reason != "cancel"
    )


def command_records(state: LiveState, workload_id: str) -> dict[str, list[dict[str, Any]]]:
    """The decision records as plain dicts, for readers that index them (the dashboard)."""
    placements, preemptions = records(state, workload_id)
    return {
        "placements": [r.model_dump() for r in placements],
        "preemptions": [r.model_dump() for r in preemptions],
    }
