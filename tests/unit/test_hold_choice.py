"""The nodes a gang owed GPUs holds (``reservation.nodes_to_hold``) are looked at in contract
bound order and the scan stops once no later node can be chosen. Held against the definition,
every node of the pool scored and the fewest readiest taken, at every pass of random
histories, for every pending allocated workload and with or without victims it may take."""

from __future__ import annotations

from hypothesis import given

from projections.cluster_state import ClusterState
from projections.cluster_types import WorkloadState
from scheduling.placement import largest_node, needs_whole_nodes
from scheduling.preemption import victim_index
from scheduling.reservation import _ready_at, nodes_to_hold
from tests.unit.scheduling_fixtures import POOL
from tests.unit.test_scheduler_properties import (
    PROPERTY_SETTINGS,
    Observed,
    World,
    simulate,
    worlds,
)

HORIZON_S = 900.0


def _by_definition(
    cluster: ClusterState,
    workload: WorkloadState,
    eligible: frozenset[str],
    node_size: int,
    now: float,
    victims_by_node: dict[str, list[str]],
) -> tuple[frozenset[str], float]:
    whole = needs_whole_nodes(workload.gpus, workload.gang, node_size)
    scored = []
    for name, node in sorted(cluster.nodes.items()):
        if node.pool != POOL or not node.schedulable:
            continue
        if node.gpus - node.foreign < (node_size if whole else workload.gpus):
            continue
        if whole and node.foreign:
            continue
        if any(v not in eligible for v in victims_by_node.get(name, ())):
            continue
        ready = _ready_at(cluster, node.assigned.values(), eligible, now, now + HORIZON_S)
        if ready - now <= HORIZON_S:
            scored.append((ready, -node.gpus, name))
    scored.sort()
    chosen, total = [], 0
    for ready, neg_gpus, name in scored:
        chosen.append(name)
        total -= neg_gpus
        if not whole or total >= workload.gpus:
            return frozenset(chosen), ready
    return frozenset(), now


def _holds_as_defined(seen: Observed) -> None:
    cluster, now = seen.cluster, seen.now
    if POOL not in cluster.indexes.pools:
        return
    node_size = largest_node(cluster, POOL)
    victims = victim_index(cluster, POOL, now, seen.memos.of_pool(POOL))
    by_node = {n: [c.workload_id for c in found] for n, found in victims.by_node.items()}
    every_victim = frozenset(v for found in by_node.values() for v in found)
    for workload in cluster.workloads.values():
        if workload.status != "pending" or not workload.allocated:
            continue
        for eligible in (frozenset(), every_victim):
            kept = nodes_to_hold(
                cluster, POOL, workload, eligible, node_size, frozenset(), now, HORIZON_S, victims
            )
            assert kept == _by_definition(cluster, workload, eligible, node_size, now, by_node)


@PROPERTY_SETTINGS
@given(worlds())
def test_the_nodes_held_are_those_the_definition_chooses(world: World) -> None:
    simulate(world, (_holds_as_defined,))
