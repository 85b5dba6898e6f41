"""Where a gang fits: one node when it can, else as few whole nodes as possible, in as few
blocks (then racks) of the network as possible.

Single-node gangs go to the node with the fewest free GPUs that suffice (best fit keeps whole
nodes free for big gangs), ties by node name; GPUs are the lowest free indices. A GPU is never
handed out twice: only GPUs the state shows unassigned are used.

A gang that spans nodes talks across them at every step, and traffic that leaves a block (the
nodes under one leaf switch) crosses the oversubscribed spine: it goes to the fewest blocks
that hold it, then, in the block it only partly fills, to the fewest racks, then the fewest
nodes (:func:`fewest_groups`). Among choices that use as few, it takes the tightest fit, so the
big holes stay whole for the next big gang. A node whose block (or rack) nobody stated is a
block (a rack) of its own: nothing says it is near any other, and a pool with no topology at
all places exactly as before (fewest nodes, tightest fit, then name).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

from projections.cluster_state import ClusterState
from projections.cluster_types import NodeState, PlacementSpec

#: Where a node sits at one level of the network, sortable: (stated name, "") or, when none was
#: stated, ("", node name), a group of its own.
GroupKey = tuple[str, str]


def block_of(node: NodeState) -> GroupKey:
    return (node.block, "") if node.block else ("", node.name)


def rack_of(node: NodeState) -> GroupKey:
    return (node.rack, "") if node.rack else ("", node.name)


def _node_of(node: NodeState) -> GroupKey:
    return ("", node.name)


#: The levels a multi-node gang is packed by, coarse to fine.
LEVELS: tuple[Callable[[NodeState], GroupKey], ...] = (block_of, rack_of, _node_of)


def largest_node(cluster: ClusterState, pool: str) -> int:
    index = cluster.indexes.pools.get(pool)
    return 0 if index is None else index.largest_node


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
    chosen = fewest_groups(free_whole_nodes(cluster, pool, exclude), gpus)
    return None if chosen is None else spread(chosen, gpus)


def free_whole_nodes(
    cluster: ClusterState, pool: str, exclude: frozenset[str] | set[str] = frozenset()
) -> list[NodeState]:
    """The pool's schedulable nodes with every GPU free, but those in ``exclude``."""
    index = cluster.indexes.pools.get(pool)
    if index is None:
        return []
    found: list[NodeState] = []
    for free in sorted(index.by_free, reverse=True):
        if free == 0:
            break
        for name in index.by_free[free]:
            node = cluster.nodes[name]
            if node.free == node.gpus and name not in exclude:
                found.append(node)
    return found


def fewest_groups(
    nodes: Iterable[NodeState],
    gpus: int,
    levels: Sequence[Callable[[NodeState], GroupKey]] = LEVELS,
) -> list[NodeState] | None:
    """Whole ``nodes`` that hold ``gpus``: in the fewest groups of ``levels[0]`` (blocks), and
    within the one group it only partly fills, the same again one level down; None when all
    of them together are too few.

    Groups are chosen one at a time: the smallest group (free GPUs, then key) that, with the
    largest of the others, can still finish in the fewest groups. So every group but the last
    is used whole, and the last is the tightest that fits what is left: the big holes stay.
    """
    level, rest = levels[0], levels[1:]
    groups: dict[GroupKey, list[NodeState]] = {}
    for node in nodes:
        groups.setdefault(level(node), []).append(node)
    caps = {key: sum(n.gpus for n in members) for key, members in groups.items()}
    count = groups_needed(caps.values(), gpus)
    if count is None:
        return None
    chosen: list[NodeState] = []
    need = gpus
    left = sorted(caps, key=lambda k: (caps[k], k))
    largest = sorted(caps.values(), reverse=True)
    for remaining in range(count, 0, -1):
        top, top_but_one = sum(largest[:remaining]), sum(largest[: remaining - 1])
        floor = largest[remaining - 1]
        # The first group that, with the largest ``remaining - 1`` of the others, finishes.
        key = next(
            k
            for k in left
            if caps[k] + (top - caps[k] if caps[k] >= floor else top_but_one) >= need
        )
        left.remove(key)
        largest.remove(caps[key])
        members = sorted(groups[key], key=lambda n: n.name)
        if caps[key] < need:
            chosen.extend(members)
            need -= caps[key]
        elif rest:
            inner = fewest_groups(members, need, rest)
            assert inner is not None  # the group holds ``need``
            return _trim(chosen + inner, gpus)
        else:
            return _trim(chosen + members, gpus)
    return None  # unreachable: ``count`` groups hold the gang


def _trim(chosen: list[NodeState], gpus: int) -> list[NodeState]:
    """Without the nodes the gang does not need (smallest first): with nodes of mixed sizes, a
    group used whole may hold a node that the others make up for. Fewer nodes never span more
    groups."""
    total = sum(n.gpus for n in chosen)
    spare: set[str] = set()
    for node in sorted(chosen, key=lambda n: (n.gpus, n.name)):
        if total - node.gpus >= gpus:
            total -= node.gpus
            spare.add(node.name)
    return [n for n in chosen if n.name not in spare]


def groups_needed(capacities: Iterable[int], gpus: int) -> int | None:
    """The fewest groups of these free capacities that hold ``gpus`` (largest first is
    optimal for a count); None when all of them are too few."""
    total = 0
    for used, cap in enumerate(sorted(capacities, reverse=True), start=1):
        total += cap
        if total >= gpus:
            return used
    return None


def blocks_used(nodes: Iterable[NodeState]) -> int:
    """How many blocks ``nodes`` span (a node of no stated block is one of its own)."""
    return len({block_of(node) for node in nodes})


def fewest_blocks_possible(nodes: Iterable[NodeState], gpus: int) -> int | None:
    """The fewest blocks any placement of ``gpus`` on these whole nodes could use."""
    caps: dict[GroupKey, int] = {}
    for node in nodes:
        key = block_of(node)
        caps[key] = caps.get(key, 0) + node.gpus
    return groups_needed(caps.values(), gpus)


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
