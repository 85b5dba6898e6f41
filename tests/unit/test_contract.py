"""One rule for when a run's contract ends (``projections/contract.py``), and every reader
holding to it: the fold's contract-end index and node bounds, ``WorkloadState.contract_over``,
the preemption eligibility (a fresh victim index and one caught up from an earlier instant),
the next wake-up, the reservation's readiness, why-pending's holds, the API's figures and the
simulator's contract check. Instants are drawn where floats round differently: microseconds at
epoch scale, contracts that cross a power of two (2038), small instants where a subtraction is
not exact, and ``now`` at, just before and just after the end and the rounded sum."""

from __future__ import annotations

import math

from hypothesis import given, settings
from hypothesis import strategies as st

from events.times import fold_instant
from events.types import MAX_MIN_RUNTIME_S
from projections.contract import contract_end, inside_contract
from projections.live_state import LiveState
from scheduling.preemption import PreemptionMemo, VictimIndex, victim_index
from scheduling.reservation import _ready_at
from scheduling.scheduling_pass import next_contract_expiry
from scheduling.why_pending import Contract, PoolQueue
from services.api.queries import workload_view
from services.api.sentences import iso
from services.api.waiting import _why_summary
from services.simulator.engine import PreemptionRecord
from tests.unit.scheduling_fixtures import POOL, Scenario

MICRO = 10**6
TWO_31 = float(2**31)

STARTS = st.one_of(
    # the log's own instants: whole seconds
    st.integers(1_000_000_000, 4_000_000_000).map(float),
    # microseconds at epoch scale
    st.integers(1_000_000_000 * MICRO, 4_000_000_000 * MICRO).map(lambda us: us / MICRO),
    # a contract that crosses 2**31 s (2038), where the sum rounds to a coarser float
    st.integers(0, MAX_MIN_RUNTIME_S * MICRO).map(lambda us: (2**31 * MICRO - us) / MICRO),
    st.floats(min_value=TWO_31 - MAX_MIN_RUNTIME_S, max_value=TWO_31),
    # small instants: ``now - started_at`` is not exact there
    st.floats(min_value=20.0, max_value=1e6),
)
MIN_RUNTIMES = st.one_of(
    st.sampled_from((1, 60, 600, 3600, MAX_MIN_RUNTIME_S)),
    st.integers(1, MAX_MIN_RUNTIME_S),
)


def _around(x: float) -> list[float]:
    return [math.nextafter(x, -math.inf), x, math.nextafter(x, math.inf)]


@st.composite
def cases(draw: st.DrawFn) -> tuple[float, int, float]:
    started_at, min_runtime_s = draw(STARTS), draw(MIN_RUNTIMES)
    summed = started_at + min_runtime_s
    edges = [
        started_at,
        *_around(contract_end(started_at, min_runtime_s)),
        *_around(summed),
        fold_instant(summed),
        summed - 1e-6,
        summed + 1e-6,
    ]
    now = draw(
        st.one_of(
            st.sampled_from(edges),
            st.floats(min_value=started_at, max_value=summed + 60),
        )
    )
    return started_at, min_runtime_s, max(now, started_at)


@settings(max_examples=1000, deadline=None)
@given(cases())
def test_every_reader_of_a_contract_agrees_with_contract_end(
    case: tuple[float, int, float],
) -> None:
    started_at, min_runtime_s, now = case
    end = contract_end(started_at, min_runtime_s)
    inside = now < end
    assert inside_contract(started_at, min_runtime_s, now) == inside
    # The measure the pass has always decided with: how long the run has run.
    assert inside == (max(0.0, now - started_at) < min_runtime_s)

    s = Scenario(nodes=(("n0", 4), ("n1", 4)))
    s.submit("r", "b", gpus=4, min_runtime_s=min_runtime_s, at=started_at)
    s.place("r", (("n0", (0, 1, 2, 3)),), started_at)
    s.start("r", started_at)
    # placed, not started: its contract would count from now at the earliest
    s.submit("q", "b", gpus=4, min_runtime_s=min_runtime_s, at=started_at)
    s.place("q", (("n1", (0, 1, 2, 3)),), started_at)
    s.submit("w", "a", gpus=2, min_runtime_s=600, at=started_at)
    cluster = s.cluster
    run = cluster.workloads["r"]
    assert run.started_at == started_at

    # the fold's index of contract ends, and the node's contract bound
    assert list(cluster.indexes.contract_ends[POOL]) == [(end, "r")]
    assert cluster.indexes.contract_bounds["n0"] == end
    assert next_contract_expiry(cluster, now) == (end if inside else None)

    # the contract predicate, and the preemption eligibility built on it
    assert run.contract_over(now) == (not inside)
    assert ("r" in cluster.preemptible(POOL, now)) == (not inside)
    fresh = VictimIndex(cluster, POOL, now)
    assert bool(fresh.nodes_of(frozenset({"r"}))) == (not inside)
    memo = PreemptionMemo()
    victim_index(cluster, POOL, started_at, memo)
    caught_up = victim_index(cluster, POOL, now, memo)
    assert caught_up.content() == fresh.content()

    # reservation: when the node is ready for a gang that may not take the run
    assert _ready_at(cluster, ["r"], frozenset(), now) == (end if inside else math.inf)
    not_started = contract_end(now, min_runtime_s)
    assert _ready_at(cluster, ["q"], frozenset(), now) == max(now, not_started)

    # why pending: a run inside its contract holds until its end
    queue = PoolQueue(cluster, s.tree, POOL, now, s.usage_source(POOL))
    position = [w.workload_id for w in queue.ordered].index("w") + 1
    holds = [
        hold
        for reason in queue.reasons(position)
        if isinstance(reason, Contract)
        for hold in reason.holds
        if hold.workload_id == "r"
    ]
    assert [hold.ends_at for hold in holds] == ([end] if inside else [])

    # the API: the figure shown, and the sentence
    state = LiveState(cluster=cluster, tree=s.tree)
    view = workload_view(state, run, now)
    assert view.contract_ends_at == iso(end)
    assert view.contract_left_s == max(0, round(end - now))
    summary = _why_summary(state, "r", [], [], now)
    assert ("its contract protects it until" in summary) == inside
    assert ("its contract is over" in summary) == (not inside)

    # the simulator's count of contract violations, at the whole second the log dates a stop
    record = PreemptionRecord(now, "r", "b", "preempt-for", started_at, min_runtime_s, True)
    assert record.violates_contract == (fold_instant(now) < end)


@given(STARTS)
def test_without_a_contract_no_instant_is_inside_it(started_at: float) -> None:
    assert contract_end(started_at, 0) == -math.inf
    assert not inside_contract(started_at, 0, started_at - 1)
