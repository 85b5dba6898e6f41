"""Where an agent's nodes sit (services/agents/topology.py; Slurm's own in slurm/parse.py):
Slurm's topology, Kubernetes node labels and simulated grids, read into blocks and racks; and
the agent registering them."""

from __future__ import annotations

import pytest

from events.models import NodeRegistered
from services.agents.simulated import simulated_nodes
from services.agents.slurm.parse import parse_scontrol_topology
from services.agents.topology import grid_place, parse_grid, topology_from_labels
from tests.unit.test_slurm_adapter import NODE0, NODE1, FakeSlurm, adapter

TREE = """\
SwitchName=leaf0 Level=0 LinkSpeed=1 Nodes=gpu[01-04]
SwitchName=leaf1 Level=0 LinkSpeed=1 Nodes=gpu[05-06],dgx7
SwitchName=spine Level=1 LinkSpeed=1 Switches=leaf[0-1] Nodes=gpu[01-06],dgx7
"""

BLOCKS = """\
BlockName=b1 BlockIndex=0 Nodes=node[01-02] BlockSize=2
BlockName=b2 BlockIndex=1 Nodes=node[03-04] BlockSize=2
AggregatedBlock=b1,b2 BlockIndex=2 Nodes=node[01-04] BlockSize=4
"""


def test_a_tree_topology_makes_each_leaf_switch_a_block() -> None:
    found = parse_scontrol_topology(TREE)
    assert found["gpu01"] == found["gpu04"] == ("leaf0", "")
    assert found["gpu05"] == found["dgx7"] == ("leaf1", "")
    assert len(found) == 7  # the spine adds no block


def test_a_block_topology_names_the_blocks_and_ignores_aggregates() -> None:
    found = parse_scontrol_topology(BLOCKS)
    assert found == {
        "node01": ("b1", ""),
        "node02": ("b1", ""),
        "node03": ("b2", ""),
        "node04": ("b2", ""),
    }


def test_no_topology_plugin_or_odd_names_give_no_block() -> None:
    assert parse_scontrol_topology("") == {}
    assert parse_scontrol_topology("No topology information available\n") == {}
    assert parse_scontrol_topology("SwitchName=s0 Level=0 Nodes=(null)\n") == {}
    assert parse_scontrol_topology("SwitchName=bad!name Level=0 Nodes=n1\n") == {"n1": ("", "")}


def test_a_node_under_two_leaf_switches_keeps_the_first() -> None:
    text = "SwitchName=a Level=0 Nodes=n1\nSwitchName=b Level=0 Nodes=n[1-2]\n"
    assert parse_scontrol_topology(text) == {"n1": ("a", ""), "n2": ("b", "")}


def test_kubernetes_labels_ours_first_then_gke_and_never_the_zone() -> None:
    assert topology_from_labels({"fairshare.dev/block": "b7", "fairshare.dev/rack": "r2"}) == (
        "b7",
        "r2",
    )
    gke = {
        "cloud.google.com/gce-topology-block": "blk-1",
        "cloud.google.com/gce-topology-subblock": "sub-3",
        "fairshare.dev/rack": "r9",
    }
    assert topology_from_labels(gke) == ("blk-1", "r9")
    assert topology_from_labels({"topology.kubernetes.io/zone": "us-east1-b"}) == ("", "")
    assert topology_from_labels({"fairshare.dev/block": ""}) == ("", "")


def test_simulated_nodes_fill_racks_and_blocks_in_turn() -> None:
    assert parse_grid("none") == (0, 0)
    assert parse_grid("4:2") == (4, 2)
    for bad in ("x", "4:3", "0"):
        with pytest.raises(ValueError, match="--topology"):
            parse_grid(bad)
    assert grid_place(5, 4, 2) == ("block-001", "rack-0002")
    specs = simulated_nodes("c", 6, 8, topology=(4, 2))
    assert [(s.block, s.rack) for s in specs][3:5] == [
        ("block-000", "rack-0001"),
        ("block-001", "rack-0002"),
    ]
    assert {(s.block, s.rack) for s in simulated_nodes("c", 2, 8)} == {("", "")}


def test_the_slurm_adapter_offers_nodes_in_their_blocks() -> None:
    slurm = FakeSlurm()
    slurm.topology = f"SwitchName=leaf0 Level=0 Nodes={NODE0}\n"
    specs = {s.name: s for s in adapter(slurm).nodes()}
    assert (specs[NODE0].block, specs[NODE1].block) == ("leaf0", "")


def test_an_agent_registers_topology_and_again_only_when_a_node_moves() -> None:
    from services.agents.simulated import SimulatedAdapter
    from tests.unit.test_agents import CLUSTER, FakeClock, Harness

    clock = FakeClock()
    nodes = simulated_nodes(CLUSTER, 2, 4, "h100", topology=(1, 0))
    h = Harness(SimulatedAdapter(nodes, clock=clock), clock=clock)
    assert {(n.node, n.block) for n in h.facts(NodeRegistered)} == {
        (nodes[0].name, "block-000"),
        (nodes[1].name, "block-001"),
    }
    Harness(SimulatedAdapter(nodes, clock=clock), broker=h.broker, clock=clock)
    assert len(h.facts(NodeRegistered)) == 2  # a restart in the same place: nothing new
    moved = simulated_nodes(CLUSTER, 2, 4, "h100", topology=(2, 0))
    again = Harness(SimulatedAdapter(moved, clock=clock), broker=h.broker, clock=clock)
    registered = h.facts(NodeRegistered)
    assert len(registered) == 3  # only the node that moved
    assert registered[-1].block == "block-000"
    assert again.agent.state.cluster.nodes[moved[1].name].block == "block-000"
