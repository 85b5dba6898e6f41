"""Placement by topology: a gang that spans nodes goes to the fewest blocks that fit it, the
tightest of those (big holes stay whole), then the fewest racks, then the fewest nodes."""

from __future__ import annotations

import itertools

from hypothesis import given, settings
from hypothesis import strategies as st

from events.models import NodeRegistered
from projections.cluster_state import ClusterState
from projections.cluster_types import NodeState, PlacementSpec
from scheduling.placement import (
    blocks_used,
    fewest_blocks_possible,
    fewest_groups,
    find_placement,
    groups_needed,
)
from tests.unit.scheduling_fixtures import T0

POOL = "p"


def cluster_of(
    nodes: list[tuple[str, int, str, str]], busy: frozenset[str] | set[str] = frozenset()
) -> ClusterState:
    """Nodes ``(name, gpus, block, rack)``; those in ``busy`` have GPU 0 assigned."""
    cluster = ClusterState()
    for name, gpus, block, rack in nodes:
        cluster.apply(
            NodeRegistered(
                node=name,
                cluster="c",
                pool=POOL,
                gpus=gpus,
                gpu_type="h100",
                block=block,
                rack=rack,
            ),
            T0,
        )
    for name in sorted(busy):
        node = cluster.nodes[name]
        index = cluster.indexes.pools[POOL]
        index.remove(node, node.free)
        node.assigned[0] = "someone"
        index.add(node)
    return cluster


def nodes_of(placement: PlacementSpec | None) -> list[str]:
    assert placement is not None
    return [name for name, _gpus in placement]


def blocks_of(cluster: ClusterState, placement: PlacementSpec | None) -> set[str]:
    return {cluster.nodes[name].block for name in nodes_of(placement)}


def grid(blocks: dict[str, int], gpus: int = 8) -> list[tuple[str, int, str, str]]:
    """``blocks``: nodes per block, named ``<block>-n<i>``, two nodes per rack."""
    return [
        (f"{block}-n{i}", gpus, block, f"{block}-r{i // 2}")
        for block, count in blocks.items()
        for i in range(count)
    ]


def test_a_gang_that_fits_one_block_goes_to_the_tightest_block_that_holds_it() -> None:
    cluster = cluster_of(grid({"a": 4, "b": 2, "c": 3}))
    placement = find_placement(cluster, POOL, 16, "whole-nodes", 8)
    assert blocks_of(cluster, placement) == {"b"}  # b holds exactly two nodes: a and c stay
    placement = find_placement(cluster, POOL, 24, "whole-nodes", 8)
    assert blocks_of(cluster, placement) == {"c"}


def test_a_gang_too_big_for_any_block_takes_the_fewest_blocks_leaving_the_big_hole() -> None:
    # 12 nodes: blocks of 8, 7, 7, 5 free nodes. Two blocks are needed; 7 + 5 leaves 8 and 7.
    cluster = cluster_of(grid({"a": 8, "b": 7, "c": 7, "d": 5}))
    placement = find_placement(cluster, POOL, 96, "whole-nodes", 8)
    assert len(nodes_of(placement)) == 12
    assert blocks_of(cluster, placement) == {"b", "d"}


def test_within_the_block_it_partly_fills_it_takes_the_fewest_racks() -> None:
    # Block a: racks of 2 free nodes, one with only 1 free (its other node is busy).
    cluster = cluster_of(grid({"a": 6}), busy={"a-n1"})
    placement = find_placement(cluster, POOL, 16, "whole-nodes", 8)
    assert sorted(nodes_of(placement)) == ["a-n2", "a-n3"]  # one rack, not a-n0 + a-n2
    single = find_placement(cluster, POOL, 8, "whole-nodes", 8)
    assert nodes_of(single) == ["a-n0"]  # the rack with one free node: the pairs stay


def test_busy_and_excluded_nodes_do_not_count_towards_a_block() -> None:
    cluster = cluster_of(grid({"a": 2, "b": 3}), busy={"b-n0"})
    placement = find_placement(cluster, POOL, 16, "whole-nodes", 8, exclude={"a-n1"})
    assert sorted(nodes_of(placement)) == ["b-n1", "b-n2"]


def test_a_pool_without_topology_places_as_before_fewest_nodes_then_name() -> None:
    cluster = cluster_of([(f"n{i}", 8, "", "") for i in range(5)], busy={"n1"})
    assert find_placement(cluster, POOL, 20, "whole-nodes", 8) == (
        ("n0", tuple(range(8))),
        ("n2", tuple(range(8))),
        ("n3", (0, 1, 2, 3)),
    )


def test_nodes_of_no_stated_block_are_each_a_block_of_their_own() -> None:
    cluster = cluster_of([("x0", 8, "", ""), ("x1", 8, "", ""), *grid({"a": 2})])
    placement = find_placement(cluster, POOL, 16, "whole-nodes", 8)
    assert blocks_of(cluster, placement) == {"a"}  # the stated block, not two lone nodes
    assert blocks_used(cluster.nodes[n] for n in ("x0", "x1")) == 2


def test_mixed_node_sizes_use_the_fewest_nodes_and_waste_the_least() -> None:
    cluster = cluster_of([("big0", 8, "", ""), ("big1", 8, "", ""), ("small", 4, "", "")])
    assert sorted(nodes_of(find_placement(cluster, POOL, 12, "whole-nodes", 8))) == [
        "big0",
        "small",
    ]


def test_the_fewest_groups_count_is_largest_first() -> None:
    assert groups_needed([3, 8, 5], 9) == 2
    assert groups_needed([3, 8, 5], 17) is None
    assert groups_needed([], 1) is None


def node(name: str, block: str) -> NodeState:
    return NodeState(name, "c", POOL, 8, "h100", block=block)


def test_fewest_blocks_possible_counts_blocks_of_free_whole_nodes() -> None:
    free = [node("a0", "a"), node("a1", "a"), node("b0", "b"), node("z", "")]
    assert fewest_blocks_possible(free, 16) == 1
    assert fewest_blocks_possible(free, 24) == 2
    assert fewest_blocks_possible(free, 40) is None


# -- properties ------------------------------------------------------------------------------


@st.composite
def clusters(draw: st.DrawFn) -> tuple[list[tuple[str, int, str, str]], set[str], int]:
    count = draw(st.integers(1, 14))
    nodes = []
    for i in range(count):
        gpus = draw(st.sampled_from([4, 8]))
        block = draw(st.sampled_from(["", "a", "b", "c", "d"]))
        rack = draw(st.sampled_from(["", "r0", "r1"]))
        nodes.append((f"n{i:02d}", gpus, block, f"{block}-{rack}" if block and rack else rack))
    busy = draw(st.sets(st.sampled_from([n[0] for n in nodes])))
    gpus = draw(st.integers(1, 60))
    return nodes, busy, gpus


@settings(max_examples=300, deadline=None)
@given(clusters())
def test_a_gang_never_spans_more_blocks_than_needed_nor_takes_a_gpu_twice(
    drawn: tuple[list[tuple[str, int, str, str]], set[str], int],
) -> None:
    nodes, busy, gpus = drawn
    cluster = cluster_of(nodes, busy)
    free = [n for n in cluster.nodes.values() if n.free == n.gpus]
    placement = find_placement(cluster, POOL, gpus, "whole-nodes", 8)
    if sum(n.gpus for n in free) < gpus:
        assert placement is None
        return
    assert placement is not None
    used = [cluster.nodes[name] for name in nodes_of(placement)]
    pairs = [(name, g) for name, gs in placement for g in gs]
    assert len(pairs) == len(set(pairs)) == gpus  # every GPU once, exactly the gang's count
    assert all(n.free == n.gpus for n in used)  # only GPUs nobody holds
    assert all(g < cluster.nodes[name].gpus for name, g in pairs)
    # No placement on the free nodes, in fewer blocks, existed (brute force over subsets).
    fewest = min(
        blocks_used(subset)
        for size in range(1, len(free) + 1)
        for subset in itertools.combinations(free, size)
        if sum(n.gpus for n in subset) >= gpus
    )
    assert blocks_used(used) == fewest
    # And no node more than the gang needs: dropping any one leaves too few GPUs.
    assert all(sum(n.gpus for n in used) - n.gpus < gpus for n in used)


@settings(max_examples=200, deadline=None)
@given(clusters())
def test_fewest_groups_agrees_with_the_count_it_promises(
    drawn: tuple[list[tuple[str, int, str, str]], set[str], int],
) -> None:
    nodes, _busy, gpus = drawn
    states = [NodeState(n, "c", POOL, g, "h100", block=b, rack=r) for n, g, b, r in nodes]
    chosen = fewest_groups(states, gpus)
    assert (chosen is None) == (fewest_blocks_possible(states, gpus) is None)
    if chosen is not None:
        assert blocks_used(chosen) == fewest_blocks_possible(states, gpus)


def test_a_node_carries_its_topology_and_a_re_registration_may_move_it() -> None:
    cluster = cluster_of([("n0", 8, "a", "a-r0")])
    assert (cluster.nodes["n0"].block, cluster.nodes["n0"].rack) == ("a", "a-r0")
    version = cluster.indexes.layout_version.get(POOL, 0)
    cluster.apply(
        NodeRegistered(node="n0", cluster="c", pool=POOL, gpus=8, gpu_type="h100", block="b"),
        T0 + 1,
    )
    assert (cluster.nodes["n0"].block, cluster.nodes["n0"].rack) == ("b", "")
    assert cluster.indexes.layout_version[POOL] > version  # placements may differ now


def test_an_old_registration_without_topology_still_decodes() -> None:
    old = {"node": "n0", "cluster": "c", "pool": POOL, "gpus": 8, "gpu_type": "h100"}
    registered = NodeRegistered.model_validate(old)
    assert (registered.block, registered.rack) == ("", "")
