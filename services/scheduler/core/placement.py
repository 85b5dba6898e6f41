"""Where a gang fits: one node when it can, else as few whole nodes as possible.

Single-node gangs go to the node with the fewest free GPUs that suffice (best fit keeps whole
nodes free for big gangs), ties by node name; GPUs are the lowest free indices. A GPU is never
handed out twice: only GPUs the state shows unassigned are used.
"""

from __future__ import annotations

from projections.cluster_state import ClusterState, NodeState, PlacementSpec


def largest_node(cluster: ClusterState, pool: str) -> int:
    return max((n.gpus for n in cluster.nodes.values() if n.pool == pool), default=0)


def needs_whole_nodes(gpus: int, gang: str, node_size: int) -> bool:
    return gang == "whole-nodes" or gpus > node_size


def find_placement(
    cluster: ClusterState,
    pool: str,
    gpus: int,
    gang: str,
    node_size: int,
    exclude: frozenset[str] | set[str] = frozenset(),
) -> PlacementSpec | None:
    """``exclude``: nodes held for another workload in this pass (a gang's reservation)."""
    index = cluster.indexes.pools.get(pool)
    if index is None:
        return None
    if not needs_whole_nodes(gpus, gang, node_size):
        name = _best_fit(cluster, pool, gpus, exclude)
        if name is None:
            return None
        return ((name, tuple(cluster.nodes[name].free_indices()[:gpus])),)
    chosen: list[NodeState] = []
    total = 0
    for free in sorted(index.by_free, reverse=True):
        for name in index.by_free[free]:
            node = cluster.nodes[name]
            if node.free == node.gpus and name not in exclude:
                chosen.append(node)
                total += node.gpus
                if total >= gpus:
                    return spread(chosen, gpus)
    return None


def _best_fit(
    cluster: ClusterState, pool: str, gpus: int, exclude: frozenset[str] | set[str]
) -> str | None:
    index = cluster.indexes.pools[pool]
    if not exclude:
        return index.best_fit(gpus)
    for free in sorted(index.by_free):
        if free >= gpus:
            for name in index.by_free[free]:
                if name not in exclude:
                    return str(name)
    return None


def spread(nodes: list[NodeState], gpus: int) -> PlacementSpec:
    """Fill whole nodes in order; the last one takes the remainder (lowest indices)."""
    parts: list[tuple[str, tuple[int, ...]]] = []
    remaining = gpus
    for node in nodes:
        take = min(node.gpus, remaining)
        parts.append((node.name, tuple(range(take))))
        remaining -= take
        if remaining == 0:
            break
    return tuple(parts)
