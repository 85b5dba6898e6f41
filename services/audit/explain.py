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


def chain_of(log: Iterable[Envelope[Any] | BadLine], workload_id: str) -> list[Envelope[Any]]:
    """The events that concern ``workload_id``, in event-time order to the microsecond (the
    time each line prints); at equal times in the order one causes the next, then log order."""
    chain = sorted(
        (
            (item.time, _causal(item), index, item)
            for index, item in enumerate(log)
            if not isinstance(item, BadLine) and _concerns(item, workload_id)
        ),
        key=lambda entry: entry[:3],
    )
    return [item for *_order, item in chain]


def explain(log: Iterable[Envelope[Any] | BadLine], workload_id: str) -> Iterator[str]:
    """The chain as sentences, one per event, then what it was charged in all."""
    chain = chain_of(log, workload_id)
    for item in chain:
        line = _line(item, workload_id)
        if line is not None:
            yield line
    if not chain:
        yield f"no event names {workload_id!r}"
    else:
        charged = _charged(chain)
        yield f"total charged to its budget: {charged} GPU-s ({charged / 3600:.2f} GPU-hours)"


def explain_json(log: Iterable[Envelope[Any] | BadLine], workload_id: str) -> dict[str, Any]:
    """The chain for machines: each event's time, type, id, sentence and payload."""
    chain = chain_of(log, workload_id)
    return {
        "workload_id": workload_id,
        "events": [
            {
                "time": item.time.isoformat(),
                "type": item.type,
                "id": item.id,
                "sentence": _line(item, workload_id),
                "data": item.data.model_dump(mode="json"),
            }
            for item in chain
        ],
        "charged_gpu_s": _charged(chain),
    }


def _charged(chain: list[Envelope[Any]]) -> int:
    return sum(item.data.signed_amount for item in chain if isinstance(item.data, LedgerCharge))


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
    return _run_sentence(when, data)


def _nodes(placement: Any) -> str:
    return ", ".join(f"{p.node} GPUs {', '.join(map(str, p.gpus))}" for p in placement.nodes)


def _run_sentence(when: str, data: Any) -> str | None:
    """What happened to a run, in words (None: not a fact about a run)."""
    if isinstance(data, WorkloadPlaced):
        funded = "funded by its budget" if data.allocated else "burst (unallocated, free)"
        return (
            f"{when} placement recorded (attempt {data.attempt}) in pool {data.pool} on "
            f"{_nodes(data.placement)}, {funded}"
        )
    if isinstance(data, WorkloadStarted):
        return f"{when} started (attempt {data.attempt}) on {_nodes(data.placement)}"
    if isinstance(data, WorkloadPreempted):
        return f"{when} stopped by its preemption (attempt {data.attempt}) after {data.ran_s} s"
    if isinstance(data, WorkloadLost):
        return (
            f"{when} lost (attempt {data.attempt}) with node {data.node}: charged up to its last "
            f"heartbeat, {data.last_heartbeat.isoformat()}"
        )
    if isinstance(data, WorkloadFinished):
        code = "" if data.exit_code is None else f", exit code {data.exit_code}"
        message = f": {data.message}" if data.message else ""
        return f"{when} ended (attempt {data.attempt}): {data.outcome}{code}{message}"
    if isinstance(data, WorkloadRequeued):
        return (
            f"{when} requeued after attempt {data.attempt} ({data.reason}): it waits again "
            f"with its first submission time, {data.original_submit_time.isoformat()}"
        )
    if isinstance(data, WorkloadCancelled):
        why = f": {data.reason}" if data.reason else ""
        return f"{when} cancelled by {data.cancelled_by}{why}"
    return None
