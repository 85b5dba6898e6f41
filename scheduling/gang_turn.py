"""A gang's turn: what a budget was owed and not given carries forward.

Fair share hands out GPUs as they come free, in order, and a budget holding less than its
entitlement is served first. That works while the unit of work is small next to what a budget
is owed. Where it is not (a team owed half an 8-GPU node whose every job is an 8-GPU gang, or
a large tenant whose gangs need 128 GPUs), the budget's next run costs more than it is owed
right now: counting that request against it (the catch-up rule asks the victim to rank behind
the preemptor *after* the request) puts it behind everyone, the entitlement rule lets it take
only up to its entitlement, and it waits while what it is owed is lost hour by hour. On a
datacenter trace a team of 8-GPU gangs got none of its 4.4 owed GPU-hours in a week.

So a budget whose smallest pending allocated gang does not fit in what it is owed now
(entitlement minus what it holds), and that holds less than that gang, is **due its turn**
while it has been given less than it was owed in the window since it started waiting:

    usage in the window  <  entitlement x min(window, now - oldest pending submit)

A due budget ranks among the budgets below their entitlement, its request is not counted
against it when it catches up with a budget that keeps its entitlement (the owed GPU-seconds
it carries stand for it), and it may hold nodes for its gang (``reservation.py``). Its turn
ends as soon as it holds the gang or has used what it was owed: the run it gets is charged
like any other, so the window then ranks it behind until that usage leaves the window, and it
waits again. Over a window a due budget gets about what it was owed, in whole gangs: a team
owed less than one run of its gang a week gets one run about once a week. The victims keep
their entitlement (the catch-up rule), so no budget is pushed below its share for it, and the
due budget cannot bounce the work back (once served it is not due).
"""

from __future__ import annotations

from projections.cluster_state import ClusterState
from projections.queue_heads import Waiting

__all__ = ["Waiting", "due", "waiting_by_leaf"]


def waiting_by_leaf(cluster: ClusterState, pool: str) -> dict[str, Waiting]:
    """Per leaf with pending allocated work in ``pool``: its smallest gang and since when it
    has waited, as the fold keeps them (``ClusterIndexes.heads``). A copy: the pass that reads
    it at its start places work, and the fold's summaries change with every placement."""
    return {
        leaf: heads.waiting
        for leaf, heads in cluster.indexes.heads.get(pool, {}).items()
        if heads.waiting is not None
    }


def due(
    waiting: Waiting | None,
    entitled: float,
    held: float,
    used_gpu_s: float,
    now: float,
    window_s: float,
) -> bool:
    """Whether a leaf is due its gang's turn (module docstring): its smallest pending gang
    does not fit in what it is owed now, it holds less than that gang, and it was given less
    than it was owed while it waited."""
    if waiting is None or entitled <= 0:
        return False
    gang = waiting.smallest_gpus
    if gang <= entitled - held or held >= gang:
        return False
    waited = min(window_s, max(0.0, now - waiting.since))
    return used_gpu_s < entitled * waited
