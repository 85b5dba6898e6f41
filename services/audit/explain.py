"""``fairshare audit explain WORKLOAD``: the causal chain of one workload, from the log.

Submission, every placement with its decision record, starts, charges, preemptions and why
(and preemptions it caused), requeues, the end: each with its event time and log line.
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
    WorkloadSubmitted,
)
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


def explain(log: Iterable[Envelope[Any] | BadLine], workload_id: str) -> Iterator[str]:
    charged = 0
    found = False
    for item in log:
        if isinstance(item, BadLine):
            continue
        data = item.data
        mine = getattr(data, "workload_id", None) == workload_id
        caused = isinstance(data, PreemptCommand) and data.decision.preemptor == workload_id
        if not (mine or caused):
            continue
        found = True
        when = item.time.isoformat()
        kind = item.type.removeprefix("fairshare.").rsplit(".", 1)[0]
        if isinstance(data, WorkloadSubmitted):
            yield (
                f"{when} submitted by {data.submitter} to {data.budget}: {data.gpus} GPU(s), "
                f"contract {data.min_runtime_s}s, priority {data.priority}, pools "
                f"{', '.join(data.pools)}"
            )
        elif isinstance(data, PlaceCommand):
            nodes = ", ".join(f"{p.node}{list(p.gpus)}" for p in data.placement.nodes)
            yield f"{when} placed (attempt {data.attempt}) on {nodes}: {_decision(data.decision)}"
        elif isinstance(data, PreemptCommand) and caused and not mine:
            yield f"{when} caused the preemption of {data.workload_id}: {_decision(data.decision)}"
        elif isinstance(data, PreemptCommand):
            yield (
                f"{when} preempt command (attempt {data.attempt}, grace {data.grace_period_s}s, "
                f"requeue {data.requeue}): {_decision(data.decision)}"
            )
        elif isinstance(data, LedgerCharge):
            charged += data.signed_amount
            yield (
                f"{when} charge {data.charge_id}: {data.gpu_seconds} GPU-s "
                f"({data.kind}) {data.debit_account} -> {data.credit_account}"
            )
        elif kind.startswith("workload."):
            details = {
                k: v
                for k, v in data.model_dump(mode="json").items()
                if k not in ("workload_id", "placement")
            }
            yield f"{when} {kind.removeprefix('workload.')}: {details}"
    if not found:
        yield f"no event names {workload_id!r}"
    else:
        yield f"total charged to its budget: {charged} GPU-s ({charged / 3600:.2f} GPU-hours)"
