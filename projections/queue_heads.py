"""What each budget's pending queues in a pool come to, kept by the fold as they change.

Every pass asks, of every budget with pending work, which kinds of work (allocated, GPUs, gang
shape) have someone queued, and, for the gang's turn (``scheduling/gang_turn.py``), its
smallest pending allocated gang and how long it has waited. Reading that off every queue of
every budget each pass cost a pass a fifth of its time at 500 budgets; a queue changes only
when a workload enters or leaves it, so the fold summarises the budget whose queue changed then
(``ClusterIndexes.heads``) and a pass reads the summaries.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from sortedcontainers import SortedList

from projections.cluster_types import QueueKey, QueueKind


@dataclass(frozen=True, slots=True)
class Waiting:
    """A leaf's pending allocated work in a pool: its smallest gang and its oldest submit."""

    smallest_gpus: int
    since: float


@dataclass(frozen=True, slots=True)
class QueueHeads:
    """One budget's pending work in one pool, summarised."""

    #: The kinds with someone queued, sorted (unallocated before allocated, then by GPUs).
    kinds: tuple[QueueKind, ...]
    #: Its pending allocated work; None when it has none.
    waiting: Waiting | None


def queue_heads(kinds: Mapping[QueueKind, SortedList[QueueKey]]) -> QueueHeads | None:
    """The summary of one budget's queues in a pool (None when all are empty): the oldest
    submit among the heads of its allocated queues (queues are in priority, then submit
    order), and its smallest allocated gang."""
    live: list[QueueKind] = []
    smallest: int | None = None
    since: float | None = None
    for kind, queue in kinds.items():
        if not queue:
            continue
        live.append(kind)
        allocated, gpus, _gang = kind
        if allocated:
            smallest = gpus if smallest is None else min(smallest, gpus)
            head = float(queue[0][1])
            since = head if since is None else min(since, head)
    if not live:
        return None
    waiting = None if smallest is None or since is None else Waiting(smallest, since)
    return QueueHeads(tuple(sorted(live)), waiting)
