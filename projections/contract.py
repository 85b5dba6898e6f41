"""When a run's contract ends: the one rule behind the product's central promise.

The promise (docs/design.md section 2.3): an allocated run (``min_runtime_s > 0``) is never
preempted inside its contract. The contract counts from each start of the run
(``WorkloadState.started_at``, not its placement: a placed run may still wait for its GPUs)
and lasts ``min_runtime_s`` seconds. Instants are the log's: float seconds since the Unix
epoch, as the fold dates facts (whole seconds, ``events.times.fold_instant``), and the pass's
``now``; a contract is whole seconds.

Every reader asks the same question: the fold's sorted index of contract ends (which runs may
be victims, and when time alone next changes what a pass may do), a node's contract bound (when
it can be cleared for a gang), the preemption eligibility, the drain of cordoned nodes, the
audit, why-pending, and the figures the API shows. They all ask it here, so they cannot
disagree: :func:`contract_end` computes the end, and :func:`inside_contract` is defined
through it (``now < contract_end``), with nothing left to round differently.

How rounding is settled: floats do not add and subtract alike. ``started_at + min_runtime_s``
may round down to an instant at which ``now - started_at`` is still below ``min_runtime_s``
(the index once put such a run among the victims while the pass still protected it). The end
here is the first instant (the least float) at which the run has run ``min_runtime_s``
measured as the pass has always measured it, ``now - started_at >= min_runtime_s``
(``WorkloadState.ran_s``). That measure never decreases as ``now`` grows, so for every
``now``, ``now < contract_end`` exactly when it is below ``min_runtime_s``: the decisions the
pass made with it stay the same. For the log's own instants (whole seconds) the end is exactly
``started_at + min_runtime_s``; for others it may lie a float away from the rounded sum. Where
``now - started_at`` is exact, as it is for any two instants within a factor of two of each
other (any two since 1970 that a run could span), the end is the exact sum rounded up: never
before the run has really run its contract.
"""

from __future__ import annotations

import math


def contract_end(started_at: float, min_runtime_s: float) -> float:
    """The first instant at which a run started at ``started_at`` has run ``min_runtime_s``
    seconds (``now - started_at >= min_runtime_s``); -inf without a contract
    (``min_runtime_s <= 0``: unallocated work, which no instant protects)."""
    if min_runtime_s <= 0:
        return -math.inf
    end = started_at + min_runtime_s
    # ``end - started_at`` never decreases as ``end`` grows: step to the least float with
    # ``end - started_at >= min_runtime_s`` (at most a step or two from the rounded sum).
    while end - started_at < min_runtime_s:
        end = math.nextafter(end, math.inf)
    while (earlier := math.nextafter(end, -math.inf)) - started_at >= min_runtime_s:
        end = earlier
    return end


def inside_contract(started_at: float, min_runtime_s: float, now: float) -> bool:
    """Whether a run started at ``started_at`` is inside its contract at ``now``: then it is
    never a victim of preemption, nor drained off a cordoned node."""
    return now < contract_end(started_at, min_runtime_s)
