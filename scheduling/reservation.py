"""Holding nodes for a gang that is owed GPUs but cannot find room.

In a full cluster, GPUs come free one at a time and the next pick takes each at once, so a
gang that needs whole nodes (or a whole node's worth of GPUs) never sees them free; and
preemption cannot clear a node for it while any run there is inside its contract or belongs
to a budget it may not take from. Such a gang would wait however far its budget is below its
entitlement. So, once per pool and pass, the first allocated workload in fair-share order that
neither fits nor can preempt, and whose budget holds less than its entitlement, holds the
nodes that will be free for it soonest: nodes whose runs are all victims it may take, or runs
inside contracts that end within a horizon. Work after it in the pass is not placed there, and
no other preemptor takes them; once those contracts end, the gang preempts what is left and
fits. The price is the GPUs that sit free on those nodes meanwhile, which the horizon bounds,
and holding only for budgets below their entitlement keeps it to work that is owed.
The choice is recomputed every pass from the state alone, like every other decision.
"""

from __future__ import annotations

import math
from bisect import insort
from collections.abc import Iterable

from events.times import HOUR
from projections.cluster_state import ClusterState
from projections.cluster_types import WorkloadState
from projections.contract import contract_end
from scheduling.placement import needs_whole_nodes
from scheduling.preemption import VictimIndex
from scheduling.time_limits import TimeLimits, expected_end

#: How far ahead a gang that needs several whole nodes may hold nodes whose runs end by their
#: time limits (``time_limits.py``): a run no rule may stop is over by its limit at the latest,
#: so the nodes that free up soonest are known, and work whose own limit ends before the hold
#: starts may still run there (backfill). Fifteen minutes, as for holds by contracts: on the
#: synthetic big-gang scenario (296 GPUs, 14 days) holds of up to an hour cost 3.7 points of
#: occupancy where demand exceeded capacity (98.6% -> 94.9%) and 3.2 points of weekly
#: attainment (95.7% -> 92.5%, 2 -> 19 budget-weeks below 90%): GPUs held idle for a gang are
#: lost to everyone, and backfill fills few of them. The horizon logs stated before 2026-12-07
#: held by; off since (``ChurnControl.limit_hold_horizon_s`` 0), as it changed no figure on two
#: real traces and the synthetic scenario.
RESERVE_HORIZON_S = HOUR // 4


def nodes_to_hold(
    cluster: ClusterState,
    pool: str,
    workload: WorkloadState,
    eligible: frozenset[str],
    node_size: int,
    exclude: frozenset[str] | set[str],
    now: float,
    horizon_s: float,
    victims: VictimIndex | None = None,
    limits: TimeLimits | None = None,
    limit_horizon_s: float = RESERVE_HORIZON_S,
) -> tuple[frozenset[str], float]:
    """The nodes ``workload`` should wait for, or none. A node is ready when every run on it is
    a victim ``workload`` may take (``eligible``) or a run whose contract ends by then (it may
    be one afterwards); a node with a run that is neither is never ready. The nodes chosen
    are the fewest that hold the gang, readiest first (then most GPUs, then name), and only if
    they are all ready within ``horizon_s``: GPUs held free for longer would cost more than the
    gang is owed.

    With ``limits`` (time limits known), a gang that needs several nodes also counts every run
    over by its limit: the nodes that free up soonest within ``RESERVE_HORIZON_S`` are held,
    however their runs end (``limit_horizon_s``, ``ChurnControl.limit_hold_horizon_s``; 0:
    never). Returns the nodes and when the last of them is ready (the hold's
    start: work whose limit ends by then may still be placed there)."""
    whole = needs_whole_nodes(workload.gpus, workload.gang, node_size)
    by_limit = (
        limits is not None
        and limit_horizon_s > 0
        and workload.gpus > node_size > 0
        and horizon_s > 0
    )
    horizon = max(horizon_s, limit_horizon_s) if by_limit else horizon_s
    scored: list[tuple[float, int, str]] = []
    deadline = now + horizon
    if by_limit:
        candidates: Iterable[tuple[float, str]] = sorted(
            (-math.inf, name) for name, node in cluster.nodes.items() if node.pool == pool
        )
    else:
        # A node whose contract bound is past the deadline holds a run inside its contract
        # until then (no victim): only the others can be ready in time, and none before its
        # bound (``_chosen_before``).
        by_ready = cluster.indexes.by_ready.get(pool)
        candidates = () if by_ready is None else by_ready.irange(maximum=(deadline, "\U0010ffff"))
    need = workload.gpus if whole else 1
    for bound, name in candidates:
        if _chosen_before(scored, max(now, bound), need):
            break
        node = cluster.nodes[name]
        if (
            not node.schedulable
            or name in exclude
            or node.gpus - node.foreign < (node_size if whole else workload.gpus)
            or (whole and node.foreign)
        ):
            continue
        if (
            not by_limit
            and victims is not None
            and any(c.workload_id not in eligible for c in victims.by_node.get(name, ()))
        ):
            continue  # a run past its contract (or unallocated) it may not take: never
        ready = _ready_at(
            cluster, node.assigned.values(), eligible, now, deadline, limits if by_limit else None
        )
        if ready - now <= horizon:
            insort(scored, (ready, -node.gpus, name))
    chosen: list[str] = []
    total = 0
    for ready, neg_gpus, name in scored:
        chosen.append(name)
        total += -neg_gpus
        if not whole or total >= workload.gpus:
            return frozenset(chosen), ready
    return frozenset(), now


def _chosen_before(scored: list[tuple[float, int, str]], floor: float, need: int) -> bool:
    """Whether the nodes scored so far already settle the choice, when no node still to look
    at can be ready before ``floor``. Nodes are looked at by contract bound, and a node is
    never ready before its bound (its started runs inside their contracts end by then; one not
    started counts from now; one past its contract that may not be taken makes it never
    ready) nor before now: once the nodes that would be chosen are all ready strictly before
    that, no later node can displace one. The scan of a full pool stops after the few nodes
    it chooses instead of working out every node's ready time."""
    total = 0
    for ready, neg_gpus, _name in scored:
        if ready >= floor:
            return False
        total += -neg_gpus
        if total >= need:
            return True
    return False


def _ready_at(
    cluster: ClusterState,
    holders: Iterable[str],
    eligible: frozenset[str],
    now: float,
    deadline: float = math.inf,
    limits: TimeLimits | None = None,
) -> float:
    """When every run on the node is one ``eligible`` holds, has ended its contract, or (with
    ``limits``) has reached its time limit; inf when never, or (all the caller needs to know)
    later than ``deadline``."""
    ready = now
    for holder in sorted(set(holders)):
        if holder in eligible:
            continue
        run = cluster.workloads[holder]
        over = expected_end(run, limits, now) if limits is not None else None
        if not run.allocated or run.contract_over(now):
            if over is None:
                return math.inf  # past its contract and still no victim: no telling when
            ready = max(ready, over)
        else:
            # Not started yet: its contract would count from now at the earliest.
            started = run.started_at if run.started_at is not None else now
            end = contract_end(started, run.min_runtime_s)
            ready = max(ready, end if over is None else min(end, over))
        if ready > deadline:
            return math.inf
    return ready
