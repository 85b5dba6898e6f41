"""``/budgets``' demand now is read from the fold's indexes (queued, holding, awaiting a
requeue), not from every workload it remembers: the same figure as asking each workload."""

from __future__ import annotations

from projections.figures import wanted
from projections.live_state import LiveState
from services.api.queries import _demand
from services.devtools.demo_data import simulated_lab
from services.simulator.trace import DEVELOPMENT_TRACES


def test_demand_from_the_indexes_is_demand_from_every_workload() -> None:
    log = simulated_lab(DEVELOPMENT_TRACES, jobs=150, gpus=16)
    state = LiveState()
    checked = 0
    for i, envelope in enumerate(log):
        state.apply(envelope)
        if i % 97:
            continue
        for pool in state.cluster.pools:
            every: dict[str, int] = {}
            for workload in state.cluster.workloads.values():
                gpus = wanted(state.cluster, workload).get(pool)
                if gpus:
                    for ancestor in state.tree.ancestors(workload.budget):
                        every[ancestor] = every.get(ancestor, 0) + gpus
            assert _demand(state.cluster, state.tree, pool) == every
            checked += bool(every)
    assert checked > 10, "demand was there to compare"
