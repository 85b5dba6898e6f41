"""``fairshare audit explain WORKLOAD``: the causal chain of one workload, from the log.

Submission (an array element's: its array's, on the array's partition), every placement with
its decision record, starts, charges, preemptions and why (and preemptions it caused), requeues,
the end: each with its event time and log line, in event-time order. A log is not in that order
as a file or a read of the topics gives it (one topic after another: every charge after every
fact), so the chain is sorted by event time; at equal times, in the order one causes the next
(a submission before its placement before its start ...), then in log order.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

from events.envelope import Envelope
from events.models import (
    DecisionRecord,
    LedgerCharge,
    PlaceCommand,
    PreemptCommand,
    WorkloadArraySubmitted,
    WorkloadCancelled,
    WorkloadFinished,
    WorkloadLost,
    WorkloadPlaced,
    WorkloadPreempted,
    WorkloadRequeued,
    WorkloadStarted,
    WorkloadSubmitted,
)
from events.models.arrays import element_index
from events.ndjson import BadLine


def _decision(record: DecisionRecord) -> str:
    ranks = ", ".join(
        f"{b.budget} rank {b.rank} ratio {b.usage_ratio:.3f} share {b.share:.3f}"
        for b in record.budgets
    )
    text = f"reason {record.reason}, pass {record.pass_id}"
    if record.preemptor:
        text += f", for {record.preemptor}"
    if ranks:
        text += f"; {ranks}"
    if record.detail:
        text += f"; {record.detail}"
    return text


#: At equal event times, the order in which one fact leads to the next.
_CAUSAL = (
    WorkloadSubmitted,
    WorkloadArraySubmitted,
    WorkloadCancelled,
    PlaceCommand,
    WorkloadPlaced,
    WorkloadStarted,
    PreemptCommand,
    WorkloadPreempted,
    WorkloadLost,
    WorkloadFinished,
    LedgerCharge,  # the end of a run posts its last charge
    WorkloadRequeued,
)


def _causal(item: Envelope[Any]) -> int:
    kind = type(item.data)
    return _CAUSAL.index(kind) if kind in _CAUSAL else len(_CAUSAL)


def explain(log: Iterable[Envelope[Any] | BadLine], workload_id: str) -> Iterator[str]:
    chain = sorted(
        (
            (item.epoch_seconds, _causal(item), index, item)
            for index, item in enumerate(log)
            if not isinstance(item, BadLine) and _concerns(item, workload_id)
        ),
        key=lambda entry: entry[:3],
    )
    charged = 0
    for *_order, item in chain:
        data = item.data
        if isinstance(data, LedgerCharge):
            charged += data.signed_amount
        line = _line(item, workload_id)
        if line is not None:
            yield line
    if not chain:
        yield f"no event names {workload_id!r}"
    else:
        yield f"total charged to its budget: {charged} GPU-s ({charged / 3600:.2f} GPU-hours)"


def _concerns(item: Envelope[Any], workload_id: str) -> bool:
    data = item.data
    mine = getattr(data, "workload_id", None) == workload_id
    caused = isinstance(data, PreemptCommand) and data.decision.preemptor == workload_id
    element = (
        isinstance(data, WorkloadArraySubmitted) and element_index(data, workload_id) is not None
    )
    return mine or caused or element


def _line(item: Envelope[Any], workload_id: str) -> str | None:
    """One event of the chain, with its event time (None: nothing to say about it)."""
    data = item.data
    when = item.time.isoformat()
    kind = item.type.removeprefix("fairshare.").rsplit(".", 1)[0]
    mine = getattr(data, "workload_id", None) == workload_id
    if isinstance(data, WorkloadSubmitted):
        return (
            f"{when} submitted by {data.submitter} to {data.budget}: {data.gpus} GPU(s), "
            f"contract {data.min_runtime_s}s, priority {data.priority}, pools "
            f"{', '.join(data.pools)}"
        )
    if isinstance(data, WorkloadArraySubmitted):
        limit = f", at most {data.max_running} at once" if data.max_running else ""
        return (
            f"{when} submitted by {data.submitter} to {data.budget} as element "
            f"{element_index(data, workload_id)} of array {data.array_id} (indices "
            f"{data.indices}{limit}): {data.gpus} GPU(s), contract {data.min_runtime_s}s, "
            f"priority {data.priority}, pools {', '.join(data.pools)}"
        )
    if isinstance(data, PlaceCommand):
        nodes = ", ".join(f"{p.node}{list(p.gpus)}" for p in data.placement.nodes)
        return f"{when} placed (attempt {data.attempt}) on {nodes}: {_decision(data.decision)}"
    if isinstance(data, PreemptCommand) and not mine:
        return f"{when} caused the preemption of {data.workload_id}: {_decision(data.decision)}"
    if isinstance(data, PreemptCommand):
        return (
            f"{when} preempt command (attempt {data.attempt}, grace {data.grace_period_s}s, "
            f"requeue {data.requeue}): {_decision(data.decision)}"
        )
    if isinstance(data, LedgerCharge):
        return (
            f"{when} charge {data.charge_id}: {data.gpu_seconds} GPU-s "
            f"({data.kind}) {data.debit_account} -> {data.credit_account}"
        )
    if kind.startswith("workload."):
        details = {
            k: v
            for k, v in data.model_dump(mode="json").items()
            if k not in ("workload_id", "placement")
        }
        return f"{when} {kind.removeprefix('workload.')}: {details}"
    return None
