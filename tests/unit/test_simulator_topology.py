"""The simulator's topology (services/simulator/topology.py): blocks and racks for the
simulated nodes, and blocks per gang against the fewest possible."""

from __future__ import annotations

import pytest

from events.models import NodeGpus, NodeRegistered, Placement
from projections.cluster_state import ClusterState
from scheduling.scheduling_pass import run_pass
from services.simulator.engine import Simulation, SimulationConfig
from services.simulator.metrics import compute_metrics
from services.simulator.preemption_cost import PreemptionCost
from services.simulator.topology import GangBlocks, TopologyConfig, topology_figures
from services.simulator.trace import TraceJob

T0 = 1_505_001_600.0


def test_the_option_parses_blocks_and_racks_and_refuses_what_does_not_nest() -> None:
    assert TopologyConfig.parse("none") == TopologyConfig()
    assert TopologyConfig.parse("4") == TopologyConfig(4, 0)
    assert TopologyConfig.parse("8:2") == TopologyConfig(8, 2)
    assert TopologyConfig(8, 2).place(9) == ("block-001", "rack-0004")
    assert TopologyConfig().place(9) == ("", "")
    assert TopologyConfig(8, 2).describe() == "blocks of 8 nodes, racks of 2"
    for bad in ("x", "8:3", "0:2", "-1"):
        with pytest.raises(ValueError, match="--topology"):
            TopologyConfig.parse(bad)


def on(nodes: list[str]) -> Placement:
    return Placement(nodes=tuple(NodeGpus(node=n, gpus=tuple(range(8))) for n in nodes))


def cluster(blocks: list[str]) -> ClusterState:
    state = ClusterState()
    for i, block in enumerate(blocks):
        state.apply(
            NodeRegistered(node=f"n{i}", cluster="c", pool="p", gpus=8, gpu_type="h", block=block),
            T0,
        )
    return state


def test_a_gang_counts_against_the_nodes_free_at_its_moment_in_the_pass() -> None:
    state = cluster(["a", "a", "b", "b", "b"])
    gangs = GangBlocks("p")
    gangs.before_pass(state)
    gangs.placed(state, "first", on(["n2", "n3"]), T0)  # one block: fewest
    gangs.placed(state, "second", on(["n0", "n4"]), T0)  # a and b: a alone held it
    gangs.placed(state, "single", on(["n1"]), T0)  # one node: not a gang over nodes
    assert [(r.workload_id, r.blocks, r.fewest) for r in gangs.records] == [
        ("first", 1, 1),
        ("second", 2, 1),
    ]
    figures = topology_figures(TopologyConfig(2), gangs)
    assert figures["gang_placements"] == 2
    assert figures["fewest_blocks_share"] == 0.5
    assert (figures["blocks_per_gang_p50"], figures["blocks_per_gang_p90"]) == (1, 2)


def test_after_an_earlier_placement_took_a_block_spanning_two_counts_as_fewest() -> None:
    state = cluster(["a", "a", "b", "c"])
    gangs = GangBlocks("p")
    gangs.before_pass(state)
    gangs.placed(state, "pair", on(["n0", "n1"]), T0)
    gangs.placed(state, "next", on(["n2", "n3"]), T0)
    assert [(r.blocks, r.fewest) for r in gangs.records] == [(1, 1), (2, 2)]


def test_without_a_topology_the_figures_are_empty() -> None:
    figures = topology_figures(TopologyConfig(), None)
    assert figures["topology"] == "no topology"
    assert figures["blocks_per_gang_p50"] is None
    assert figures["fewest_blocks_share"] is None


def test_a_simulation_with_blocks_places_gangs_in_the_fewest_and_reports_it() -> None:
    # 8 nodes in blocks of 4; a 1-node job sits in block 0, so a 4-node gang must go to
    # block 1 to stay in one block (the lowest names would span two).
    jobs = [
        TraceJob("small", T0, 20_000, 8, "a"),
        TraceJob("gang", T0 + 60, 3_600, 32, "b"),
        TraceJob("pair", T0 + 120, 3_600, 16, "a"),
        TraceJob("sentinel", T0 + 10_000, 60, 1, "a"),
    ]
    config = SimulationConfig(
        gpus=64,
        gpus_per_node=8,
        cost=PreemptionCost(enabled=False),
        topology=TopologyConfig(4),
    )
    outcome = Simulation(jobs, {"a": 1.0, "b": 1.0}, config, run_pass).run()
    assert outcome.gang_blocks is not None
    assert [(r.workload_id, r.blocks, r.fewest) for r in outcome.gang_blocks.records] == [
        ("gang", 1, 1),
        ("pair", 1, 1),
    ]
    overall = compute_metrics(outcome)["overall"]
    assert overall["fewest_blocks_share"] == 1.0
    assert overall["blocks_per_gang_p90"] == 1
    assert overall["topology"] == "blocks of 4 nodes"
