"""Churn control: when taking GPUs from a running job is worth what the job loses.

A run past its contract may be stopped for an allocated preemptor of another budget for one of
two reasons, judged where the two budgets' paths part (``preemption.py`` applies them):

* **Entitlement.** A budget holding less than its entitlement right now (``share x capacity``
  GPUs of allocated work), short of it by more than ``owed_tolerance`` of it, is *owed*. It
  may take from a budget that holds more than its own entitlement as much as that budget can
  give while keeping its entitlement; or, beyond that, as long as that budget keeps at least
  the fraction of its entitlement the owed one will then hold. Neither move can be undone by
  the same rule (the victim's budget is left with no claim, or a smaller one than the
  preemptor's), so two budgets never bounce a job between them. A budget a few GPUs short of a
  large entitlement is not worth a stop: the order (budgets below their entitlement first)
  hands it the next GPUs that come free.
* **Catch-up.** Any budget may take from a budget that keeps its entitlement and ranks behind
  it in the 7-day order (after the preemptor's request is counted) by a **margin**: the
  victim's usage ratio must exceed the preemptor's by ``margin`` relative, plus
  ``margin_per_wasted_gpu_hour`` for every GPU-hour the stop would waste (``work_at_risk.py``).
  Fair share over a week moves slowly and budgets near parity swap ranks all the time: without
  the margin every swap would stop a job and change nobody's week. A run that has just
  checkpointed needs only the base margin; a large gang deep into its checkpoint interval
  needs a budget far behind. An owed gang that needs whole nodes and has waited
  ``starving_after_s`` may catch up even where the victim's budget does not keep its
  entitlement: whole nodes whose every run belongs to a budget with GPUs to spare are rare in a
  full pool, and such a gang would otherwise wait however far below its entitlement it is.

The margin depends only on the victim and the instant, and what may be taken only shrinks as
the preemptor's request grows, so a bigger request can never find a victim a smaller one of the
same budget could not (the pass's failed-search memo relies on that).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from events.times import HOUR
from projections.cluster_types import WorkloadState
from scheduling.fairshare_order import FairShareOrder

#: A job is preempted at most this many times by the policy (cancellations not counted): once
#: it has been, no rule chooses it as a victim again (fair share, the debug lane, unallocated
#: work's bumps). Without a bound a long job of an over-served budget was stopped after every
#: contract it ran (128 times in three weeks with nodes sent for repair): each stop costs it
#: progress and a restart, and changed nobody's week. Its budget is still charged for every
#: second, so its other work ranks behind.
MAX_PREEMPTIONS = 8

#: A drain stops a run past its contract while the run has been stopped fewer times than this
#: (drains included): the policy's bound leaves room for two, so that a node sent for repair
#: empties even under a job the policy may no longer preempt, and no job is stopped more than
#: this many times in all. A drain that waited for every job at the policy's bound took the
#: full 8 hours on real weeks with 2% of nodes a day sent for repair (the node then goes down
#: with the run on it, which costs the job more than one more stop).
MAX_STOPS = 10


def preemptions_left(workload: WorkloadState, bound: int = MAX_PREEMPTIONS) -> bool:
    """Whether the policy may still preempt ``workload`` (``ChurnControl.max_preemptions``)."""
    return workload.preemptions < bound


@dataclass(frozen=True)
class ChurnControl:
    #: Base relative margin of the catch-up rule. ``inf`` turns catch-up off.
    margin: float = 0.5
    #: Added to the catch-up margin per GPU-hour a stop would waste.
    margin_per_wasted_gpu_hour: float = 0.1
    #: A budget is owed GPUs (may take them by entitlement) while it is short of its
    #: entitlement by more than this fraction of it.
    owed_tolerance: float = 0.1
    #: How long nodes may be held free for a gang that is owed GPUs (reservation.py).
    hold_horizon_s: float = 15 * 60
    #: After this long, an owed gang that needs whole nodes may take from any budget that
    #: ranks behind it: whole nodes whose every run has room to give are rare in a full pool.
    starving_after_s: float = 3600
    #: The most times the policy preempts one job (``MAX_PREEMPTIONS``).
    max_preemptions: int = MAX_PREEMPTIONS
    #: A drain stops a run only while it has been preempted fewer times than this
    #: (``MAX_STOPS``); logs decided before drains went past the policy's bound state none and
    #: replay with ``max_preemptions``.
    drain_bound: int = MAX_STOPS
    #: How far ahead a gang over several nodes may hold nodes whose runs end by their time
    #: limits (``reservation.py``); 0 turns holds by time limits off, which is the default
    #: since 2026-12-07: switched off on two real traces and the synthetic scenario, they
    #: changed no figure of any (docs/benchmarks.md). Logs stated before then hold by limits
    #: for 15 minutes (``RESERVE_HORIZON_S``) and replay with it.
    limit_hold_horizon_s: float = 0.0
    #: What each earlier stop of a run counts as, in GPU-seconds per GPU of the run, when the
    #: victim search weighs what a stop wastes: stops spread over many runs instead of
    #: spending the bound of the few that were just restarted (cheapest to stop, since they
    #: have little progress to lose). Concentrated, they left hundreds of month-long runs that
    #: no rule could stop any more by the third week of a real trace, where owed gangs then
    #: waited. 0: the waste alone.
    earlier_stop_cost_s: float = 3600.0
    #: How far ahead a gang whose budget is due its turn (``gang_turn.py``) and that has
    #: starved (``starving_after_s``) may hold nodes by contracts: the 15 minutes of
    #: ``hold_horizon_s`` let a gang that needs most of a busy pool hold only where every
    #: contract there happens to end within a quarter of an hour, which a pool running
    #: hour-long contracts rarely gives, and such a gang waited however much it was owed.
    #: Held nodes take no new work, so once held, the nodes' contracts run out and the gang
    #: starts. An hour since 2026-12-07 (docs/benchmarks.md "Holds for a gang's turn"); logs
    #: stated before then state none and replay with 0: as ``hold_horizon_s``.
    turn_hold_horizon_s: float = 3600.0
    #: Whether a budget whose gang is bigger than what it is owed now is due its turn
    #: (``gang_turn.py``); off, such a budget waits in the plain order.
    gang_turn: bool = True

    def __post_init__(self) -> None:
        if min(self.margin, self.margin_per_wasted_gpu_hour, self.hold_horizon_s) < 0 or (
            min(self.starving_after_s, self.limit_hold_horizon_s, self.earlier_stop_cost_s) < 0
            or self.turn_hold_horizon_s < 0
        ):
            raise ValueError("churn margins and the hold horizons must not be negative")
        if not 1 <= self.max_preemptions <= self.drain_bound:
            raise ValueError("max_preemptions must be at least 1 and at most drain_bound")
        if not 0.0 <= self.owed_tolerance < 1.0:
            raise ValueError("owed_tolerance must be in [0, 1)")

    def starving(self, workload: WorkloadState, node_size: int, now: float) -> bool:
        """A gang that needs a whole node or more and has waited ``starving_after_s`` since it
        was submitted."""
        waited = now - workload.submitted_at
        return needs_a_node(workload, node_size) and waited >= self.starving_after_s

    def hold_horizon_for(self, starving_turn: bool) -> float:
        """How far ahead a gang may hold nodes by contracts: further for a starving gang whose
        budget is due its turn (``turn_hold_horizon_s``)."""
        if starving_turn:
            return max(self.hold_horizon_s, self.turn_hold_horizon_s)
        return self.hold_horizon_s

    def owed(self, order: FairShareOrder, leaf: str) -> bool:
        """Whether ``leaf`` is short of its entitlement by more than the tolerance."""
        entitled = order.entitled(leaf)
        return entitled > 0 and order.held.get(leaf, 0.0) < entitled * (1.0 - self.owed_tolerance)

    def victim_margin(self, wasted_gpu_s: float) -> float:
        return self.margin + self.margin_per_wasted_gpu_hour * max(0.0, wasted_gpu_s) / HOUR

    def waste_allowed(self, slack: float) -> float:
        """The most GPU-seconds a stop may waste (exclusive) for a victim whose budget ranks
        behind by ``slack`` (relative); negative when no victim of that budget may be stopped."""
        if slack <= self.margin:
            return -1.0
        if self.margin_per_wasted_gpu_hour == 0 or slack == math.inf:
            return math.inf
        return (slack - self.margin) / self.margin_per_wasted_gpu_hour * HOUR


def needs_a_node(workload: WorkloadState, node_size: int) -> bool:
    """Work that only fits where a whole node is free: the shape that can starve."""
    return workload.gang == "whole-nodes" or workload.gpus >= node_size > 0


@dataclass(frozen=True, slots=True)
class Room:
    """What a preemptor may take from one victim budget."""

    #: The preemptor's side holds less than its entitlement.
    owed: bool
    #: GPUs the victim's side holds beyond its entitlement (may be negative).
    keep: float
    #: GPUs an owed preemptor may take from the victim's side in all (entitlement rule).
    most: float


NO_ROOM = Room(owed=False, keep=-math.inf, most=-math.inf)


def room(
    order: FairShareOrder,
    victim_leaf: str,
    preemptor_leaf: str,
    gained: float,
    tolerance: float = 0.0,
) -> Room:
    """Where the budgets of a victim and of a preemptor that gains ``gained`` GPUs stand
    against their entitlements (where their paths part)."""
    if victim_leaf == preemptor_leaf or preemptor_leaf not in order.shares:
        return NO_ROOM
    if victim_leaf not in order.shares:
        return Room(owed=True, keep=math.inf, most=math.inf)  # no share: it keeps nothing
    sides = order.side_of(victim_leaf, preemptor_leaf)
    if sides is None:
        return NO_ROOM
    victim_side, preemptor_side = sides
    entitled_v, entitled_p = order.entitled(victim_side), order.entitled(preemptor_side)
    held_v, held_p = order.held[victim_side], order.held[preemptor_side]
    keep = held_v - entitled_v
    owed = entitled_p > 0 and held_p < entitled_p * (1.0 - tolerance)
    if not owed:
        return Room(owed=False, keep=keep, most=-math.inf)
    if entitled_v <= 0:
        return Room(owed=True, keep=math.inf, most=math.inf)
    no_crossing = held_v - (held_p + gained) / entitled_p * entitled_v
    return Room(owed=True, keep=keep, most=max(keep, no_crossing))
