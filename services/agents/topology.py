"""Where an agent's nodes sit in the network: blocks and racks, from what its cluster says.

A gang that spans nodes goes to the fewest blocks that hold it (docs/design.md 2.5), so an
agent states each node's ``block`` and ``rack`` when it registers it (``NodeRegistered``). It
learns them from its cluster (docs/agents.md):

* **Slurm**: ``scontrol show topology``. With ``topology/block`` each ``BlockName=`` line is a
  block; with ``topology/tree`` the nodes under one leaf switch (``Level=0``) form a block: the
  traffic between them stays off the upper switches. Slurm states no rack. Without a topology
  plugin, no node has one.
* **Kubernetes**: node labels (:data:`BLOCK_LABELS`, :data:`RACK_LABELS`, the first one a node
  carries wins): ``fairshare.dev/block`` and ``fairshare.dev/rack``, which an operator sets, or
  Google's ``gce-topology-block`` and ``-subblock``, which GKE sets. Not ``topology.kubernetes.io
  /zone``: a zone is a data centre, and calling it a block would claim a closeness nobody said.
* **Simulated nodes**: ``--topology BLOCK_NODES[:RACK_NODES]``, consecutive nodes per block
  (:func:`grid_place`), as in the simulator.

Names that are not ids (``events.types.TopologyName``) are dropped: the node then has no
block, which placement reads as "near no other", never as near every other.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

#: Labels naming a node's block, most specific first.
BLOCK_LABELS: tuple[str, ...] = ("fairshare.dev/block", "cloud.google.com/gce-topology-block")
#: Labels naming its rack within the block.
RACK_LABELS: tuple[str, ...] = ("fairshare.dev/rack", "cloud.google.com/gce-topology-subblock")

_NAME = re.compile(r"^[A-Za-z0-9._:@/-]{1,128}$")

#: Node name -> (block, rack).
Topology = dict[str, tuple[str, str]]


def valid(name: str) -> str:
    """``name`` when it can be a block or rack name, else "" (unknown)."""
    return name if _NAME.match(name) else ""


def topology_from_labels(labels: Mapping[str, str]) -> tuple[str, str]:
    """A Kubernetes node's (block, rack) from its labels ("" for what they do not say)."""
    block = next((labels[k] for k in BLOCK_LABELS if labels.get(k)), "")
    rack = next((labels[k] for k in RACK_LABELS if labels.get(k)), "")
    return valid(block), valid(rack)


def parse_grid(text: str) -> tuple[int, int]:
    """``BLOCK_NODES[:RACK_NODES]`` (``""``/``none``: no topology) as (block, rack) sizes."""
    if text.strip().lower() in ("", "none", "off"):
        return 0, 0
    block, _, rack = text.partition(":")
    try:
        sizes = int(block), int(rack) if rack else 0
    except ValueError as error:
        raise ValueError(f"--topology: expected BLOCK_NODES[:RACK_NODES], got {text!r}") from error
    if sizes[0] < 1 or sizes[1] < 0 or (sizes[1] and sizes[0] % sizes[1]):
        raise ValueError("--topology: a block holds at least one node and a whole number of racks")
    return sizes


def grid_place(index: int, block_nodes: int, rack_nodes: int = 0) -> tuple[str, str]:
    """The ``index``-th node's (block, rack) when consecutive nodes fill racks and blocks."""
    if block_nodes < 1:
        return "", ""
    block = f"block-{index // block_nodes:03d}"
    return block, f"rack-{index // rack_nodes:04d}" if rack_nodes else ""
