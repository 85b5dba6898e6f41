"""What the API says in words: the typed reasons of the scheduling core (why work is pending)
and the decision records (why it was preempted) as sentences, and the one sentence that leads
``why`` and fills the queue's REASON.

The decisions are the core's (:mod:`scheduling.why_pending`: the reasons, and
which one decides), and so are their codes (:class:`scheduling.pending_codes.PendingCode`, which
each reason carries and the API's models are typed from); this module only words them, so the
CLI, the dashboard and any other client print the same sentence instead of each composing its
own from the fields.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, overload

from events.times import utc_iso
from scheduling import why_pending as why
from services.api import models as m


@overload
def iso(ts: float) -> str: ...
@overload
def iso(ts: None) -> None: ...
def iso(ts: float | None) -> str | None:
    return None if ts is None else utc_iso(ts)


def ratio(value: float) -> float | None:
    """JSON has no infinity: a budget without a share has no ratio."""
    return None if value == float("inf") else value


def _fmt(value: float) -> str:
    return "none" if value == float("inf") else f"{value:.4g}"


def _rank(rank: int | None) -> str:
    return "-" if rank is None else str(rank)


def clock_time(ts: float, now: float) -> str:
    """``14:05 UTC (in 50 min)``: a time a reader can act on, with how far off it is."""
    at = datetime.fromtimestamp(ts, UTC).strftime("%H:%M UTC")
    return f"{at} ({_in(ts - now)})"


def _in(seconds: float) -> str:
    left = max(0, round(seconds))
    if left < 60:
        return f"in {left} s"
    if left < 2 * 3600:
        return f"in {round(left / 60)} min"
    return f"in {left / 3600:.1f} h"


# -- one sentence per pending workload ----------------------------------------------------------
def pending_summary(reasons: tuple[why.PendingReason, ...], now: float) -> tuple[str, str]:
    """The deciding reason's code and it in one sentence (``why``'s first line, the queue's
    REASON)."""
    decisive = why.primary(reasons)
    if decisive is None:
        return "", ""
    return decisive.code.value, _summary(decisive, reasons, now)


def _shape(gpus: int, offer: why.Offer) -> str:
    return f"{gpus} GPU(s) " + ("on whole nodes" if offer.needs_whole_nodes else "on one node")


def _offer_of(reasons: tuple[why.PendingReason, ...]) -> why.Offer | None:
    for reason in reasons:
        if isinstance(reason, why.TooLarge | why.FitsNow | why.InsufficientCapacity):
            return reason.offer
    return None


def _summary(
    decisive: why.PendingReason, reasons: tuple[why.PendingReason, ...], now: float
) -> str:
    offer = _offer_of(reasons)
    gpus = next(
        (r.gpus for r in reasons if isinstance(r, why.InsufficientCapacity | why.FitsNow)), 0
    )
    wants = f"waits for {_shape(gpus, offer)}" if offer is not None else "waits"
    match decisive:
        case why.NoNodes(pool=pool):
            return f"no node is registered in pool {pool}"
        case why.TooLarge():
            return "can never start: " + _too_large(decisive)
        case why.Contract():
            return f"{wants}; {_contract_summary(decisive, now)}"
        case why.Starting(workloads=workloads):
            return f"{wants}; the GPUs it could take belong to work still starting ({workloads[0]})"
        case why.RanksAhead(workloads=workloads):
            first = workloads[0]
            return (
                f"{wants}; the work holding them ({first.workload_id}, {first.budget}) belongs "
                "to budgets ranking ahead, so it is not preempted"
            )
        case why.Unallocated():
            return f"burst work: {wants} to be idle ({_free_block(offer)}); it never preempts"
        case why.InsufficientCapacity():
            return f"{wants} ({_free_block(offer)}); the next pass may preempt burst work for it"
        case why.FitsNow():
            where = decisive.offer.largest_free_node or "idle nodes"
            ahead = sum(
                r.workloads_ahead if isinstance(r, why.FairShare | why.FundedFirst) else 0
                for r in reasons
            ) + sum(len(r.workloads_ahead) for r in reasons if isinstance(r, why.BudgetQueue))
            tail = f", unless the {ahead} workload(s) ahead take them" if ahead else ""
            return f"{gpus} GPU(s) are free on {where}: the next scheduling pass places it{tail}"
        case _:
            return reason_view(decisive, now).message


def _free_block(offer: why.Offer | None) -> str:
    if offer is None:
        return "no GPU is free"
    if offer.needs_whole_nodes:
        return f"{offer.free_gpus_on_idle_nodes or 0} GPU(s) are on idle nodes"
    where = f" on {offer.largest_free_node}" if offer.largest_free_node else ""
    return f"the largest free block is {offer.largest_free_gpus}{where}"


def _contract_summary(reason: why.Contract, now: float) -> str:
    """Where and when room can be made: the first contract whose end alone frees enough on
    one node, else the first to end."""
    hold = next((h for h in reason.holds if h.frees), reason.waits_on)
    when = clock_time(hold.ends_at, now)
    if hold.frees and hold.preemptible:
        return f"{hold.frees} can free them at {when}, when {hold.workload_id}'s contract ends"
    if hold.frees:
        return (
            f"{hold.frees} frees them when {hold.workload_id} ends: its contract ends at "
            f"{when}, but {hold.budget} ranks ahead, so it will not be preempted"
        )
    return f"GPUs can be freed as contracts end, the first at {when} ({hold.workload_id})"


def _too_large(reason: why.TooLarge) -> str:
    if reason.limit == "pool":
        return (
            f"needs {reason.gpus} GPUs but {reason.pool} has only {reason.limit_gpus} GPUs "
            "on nodes that are up"
        )
    return (
        f"needs {reason.gpus} GPUs on one node; the largest node of {reason.pool} has "
        f"{reason.limit_gpus}"
    )


# -- every reason, in words (``why --verbose``, the queue's details) ---------------------------
def reason_views(reasons: tuple[why.PendingReason, ...], now: float) -> list[m.Reason]:
    return [reason_view(reason, now) for reason in reasons]


def reason_view(reason: why.PendingReason, now: float) -> m.Reason:
    """One typed reason of the core as the API says it (code, sentence, details)."""
    match reason:
        case why.NoShare(budget=budget, pool=pool):
            message = (
                f"{budget} has no share of {pool} (closed, or not in the tree): its work is "
                "considered last"
            )
            return m.PlainReason(code=reason.code, message=message)
        case why.NoNodes(pool=pool):
            message = f"no node is registered in pool {pool}"
            return m.PlainReason(code=reason.code, message=message)
        case why.Unallocated():
            message = (
                "it runs unallocated (min_runtime 0): it never preempts, and waits for idle GPUs"
            )
            return m.PlainReason(code=reason.code, message=message)
        case why.FairShare():
            return _fair_share(reason)
        case why.FundedFirst(workloads_ahead=count, budgets=budgets):
            message = (
                f"{count} funded workload(s) come first ({', '.join(budgets)}): burst work is "
                "considered only after all funded work, whatever the budgets' ranks"
            )
            return m.FundedFirstReason(
                code=reason.code, message=message, workloads_ahead=count, budgets=list(budgets)
            )
        case why.BudgetQueue(budget=budget, workloads_ahead=ahead):
            message = (
                f"{len(ahead)} workload(s) of {budget} come first (higher priority or submitted "
                "earlier)"
            )
            return m.BudgetQueueReason(
                code=reason.code, message=message, workloads_ahead=list(ahead[:20])
            )
        case why.TooLarge() | why.FitsNow() | why.InsufficientCapacity():
            return _capacity(reason)
        case why.Contract():
            return _contract(reason, now)
        case why.Starting(workloads=workloads):
            message = (
                "placed work has not started yet (its contract starts when it does): "
                + ", ".join(workloads[:10])
            )
            return m.WorkloadsReason(
                code=reason.code, message=message, workloads=list(workloads[:10])
            )
        case why.RanksAhead():
            return _ranks_ahead(reason)
        case why.CordonedNodes(pool=pool, nodes=nodes, gpus=gpus):
            message = (
                f"{len(nodes)} node(s) of {pool} are cordoned ({gpus} GPUs take no new work): "
                + ", ".join(nodes)
            )
            return m.CordonedReason(code=reason.code, message=message, nodes=list(nodes), gpus=gpus)
        case why.DownNodes(pool=pool, nodes=nodes):
            message = f"{len(nodes)} node(s) of {pool} are down: {', '.join(nodes)}"
            return m.DownReason(code=reason.code, message=message, nodes=list(nodes))
        case why.ArrayLimit(array_id=array_id, limit=limit, running=running):
            message = (
                f"array {array_id} runs at most {limit} element(s) at once and {running} "
                "hold GPUs: it is queued when one of them ends (JobArrayTaskLimit)"
            )
            return m.ArrayLimitReason(
                code=reason.code,
                message=message,
                array_id=array_id,
                max_running=limit,
                running=running,
            )


def _fair_share(reason: why.FairShare) -> m.FairShareReason:
    message = (
        f"{reason.workloads_ahead} workload(s) of other budgets come first in fair-share order "
        f"({reason.budget}: rank {_rank(reason.rank)}, usage ratio {_fmt(reason.usage_ratio)}; "
        "budgets take turns, each pick counting gpus x min_runtime against its budget): "
        + ", ".join(
            f"{b.budget} ({b.workloads_ahead}; rank {_rank(b.rank)}, usage ratio "
            f"{_fmt(b.usage_ratio)})"
            for b in reason.ahead
        )
    )
    return m.FairShareReason(
        code=reason.code,
        message=message,
        budget=reason.budget,
        budget_rank=reason.rank,
        budget_usage_ratio=ratio(reason.usage_ratio),
        budgets_ahead=[
            m.BudgetAheadView(
                budget=b.budget,
                rank=b.rank,
                usage_ratio=ratio(b.usage_ratio),
                workloads_ahead=b.workloads_ahead,
            )
            for b in reason.ahead
        ],
    )


def _capacity(reason: why.TooLarge | why.FitsNow | why.InsufficientCapacity) -> m.CapacityReason:
    fit = reason.offer
    shape = "on whole nodes" if fit.needs_whole_nodes else "on one node"
    if isinstance(reason, why.TooLarge):
        message = _too_large(reason)
    elif isinstance(reason, why.FitsNow):
        where = fit.largest_free_node if not fit.needs_whole_nodes else "idle nodes"
        message = (
            f"{reason.gpus} GPU(s) are free {shape} ({where}): the next scheduling pass should "
            "place it, unless work ahead of it takes them first"
        )
    else:
        message = (
            f"needs {reason.gpus} GPU(s) {shape}; {_free_block(fit)} "
            f"({fit.free_gpus} free in {reason.pool})"
        )
        if fit.foreign_gpus:
            message += f"; {fit.foreign_gpus} GPU(s) held by work Fairshare did not place"
    return m.CapacityReason(
        code=reason.code,
        message=message,
        fits_now=fit.fits_now,
        needs_whole_nodes=fit.needs_whole_nodes,
        free_gpus=fit.free_gpus,
        largest_free_node=fit.largest_free_node,
        largest_free_gpus=fit.largest_free_gpus,
        free_gpus_on_idle_nodes=fit.free_gpus_on_idle_nodes,
        capacity=fit.capacity,
        largest_node_gpus=fit.largest_node_gpus,
        foreign_gpus=fit.foreign_gpus,
    )


def _contract(reason: why.Contract, now: float) -> m.ContractReason:
    first = reason.waits_on
    end = first.ends_at
    message = (
        "preemption is blocked by a min_runtime: it waits on "
        f"{first.workload_id} ({first.budget}, {first.gpus} GPU(s), "
        f"min_runtime {first.min_runtime_s} s), "
        f"whose contract ends at {iso(end)} (in {max(0, round(end - now))} s)"
    )
    return m.ContractReason(
        code=reason.code,
        message=message,
        waits_on=first.workload_id,
        contract_ends_at=iso(end),
        contracts=[
            m.ContractView(
                workload_id=hold.workload_id,
                budget=hold.budget,
                gpus=hold.gpus,
                min_runtime_s=hold.min_runtime_s,
                contract_ends_at=iso(hold.ends_at),
            )
            for hold in reason.holds[:10]
        ],
    )


def _ranks_ahead(reason: why.RanksAhead) -> m.WorkloadsReason:
    shown = reason.workloads[:10]
    message = (
        "running work past its contract belongs to budgets that rank ahead of "
        f"{reason.budget} even after counting this request, so it may not be preempted: "
        + ", ".join(f"{w.workload_id} ({w.budget}, rank {_rank(w.rank)})" for w in shown)
    )
    return m.WorkloadsReason(
        code=reason.code, message=message, workloads=[w.workload_id for w in shown]
    )


# -- why it was preempted -----------------------------------------------------------------------
def preempt_message(
    reason: str,
    budget: str | None,
    allocated: bool,
    preemptor: str | None,
    preemptor_budget: str | None,
    standings: list[dict[str, Any]],
) -> str:
    """Why a preempt command was issued, in one sentence: for another workload, the two
    budgets' standings (each once); the pass and input positions are fields of the record."""
    if reason == "drain":
        return "preempted because its node was cordoned and its contract was over"
    if reason == "node-lost":
        return "lost: its node stopped sending heartbeats"
    if reason == "cancel":
        return "stopped because it was cancelled"
    if reason != "preempt-for":
        return reason
    text = f"preempted to make room for {preemptor}" + (
        f" ({preemptor_budget})" if preemptor_budget else ""
    )
    if not allocated:
        return text + ": it ran as burst work (min_runtime 0), which funded work may always preempt"
    by_budget = {s["budget"]: s for s in standings}
    mine, theirs = by_budget.get(budget or ""), by_budget.get(preemptor_budget or "")
    if mine is None or theirs is None or mine is theirs:
        return text + ": its contract was over"
    return (
        f"{text}: its contract was over and {budget} ranked behind {preemptor_budget} "
        f"(rank {mine['rank']} vs {theirs['rank']}, usage ratio {mine['usage_ratio']:.3g} vs "
        f"{theirs['usage_ratio']:.3g})"
    )
