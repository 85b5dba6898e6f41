"""Blocks and racks of the simulated nodes, and how many blocks each gang was placed in.

A gang that spans nodes talks across them at every step; traffic that leaves a block (the nodes
under one leaf switch) crosses the oversubscribed spine, so the scheduler places such a gang
in the fewest blocks that hold it (``scheduling/placement.py``). This module
gives the simulated nodes a topology (``--topology BLOCK_NODES[:RACK_NODES]``: consecutive
nodes, in name order, fill a rack, racks fill a block) and measures what the policy did with
it: for every placement of a gang over more than one node, the blocks it spans and the fewest
any placement could have used on the whole nodes free for it at that moment
(:class:`GangBlocks`; docs/simulation/README.md defines the moment precisely).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from events.models import Placement
from projections.cluster_state import ClusterState
from scheduling.placement import blocks_used, fewest_blocks_possible
from services.simulator.stats import percentile


@dataclass(frozen=True)
class TopologyConfig:
    """``block_nodes`` nodes per block (0: no topology, every node a block of its own, as a
    cluster that states none), ``rack_nodes`` per rack within a block (0: no racks)."""

    block_nodes: int = 0
    rack_nodes: int = 0

    def __post_init__(self) -> None:
        if self.block_nodes < 0 or self.rack_nodes < 0:
            raise ValueError("--topology: node counts must be positive")
        if self.rack_nodes and (not self.block_nodes or self.block_nodes % self.rack_nodes):
            raise ValueError("--topology: a block must hold a whole number of racks")

    @classmethod
    def parse(cls, text: str) -> TopologyConfig:
        """``""``/``none``: no topology; ``16``: blocks of 16 nodes; ``16:4``: and racks of 4."""
        if text.strip().lower() in ("", "none", "off"):
            return cls()
        block, _, rack = text.partition(":")
        try:
            return cls(int(block), int(rack) if rack else 0)
        except ValueError as error:
            if "--topology" in str(error):
                raise
            raise ValueError(
                f"--topology: expected BLOCK_NODES[:RACK_NODES], got {text!r}"
            ) from error

    @property
    def enabled(self) -> bool:
        return self.block_nodes > 0

    def place(self, index: int) -> tuple[str, str]:
        """The block and rack of the ``index``-th node ("" when none)."""
        if not self.enabled:
            return "", ""
        block = f"block-{index // self.block_nodes:03d}"
        rack = f"rack-{index // self.rack_nodes:04d}" if self.rack_nodes else ""
        return block, rack

    def describe(self) -> str:
        if not self.enabled:
            return "no topology"
        racks = f", racks of {self.rack_nodes}" if self.rack_nodes else ""
        return f"blocks of {self.block_nodes} nodes{racks}"


@dataclass(frozen=True)
class GangPlacement:
    time: float
    workload_id: str
    nodes: int
    #: Blocks the placement spans, and the fewest a placement on the nodes then free could.
    blocks: int
    fewest: int


@dataclass
class GangBlocks:
    """What each placement over several nodes spanned, against the fewest blocks possible.

    "Possible" is judged on the whole nodes free at the moment of the placement, in the pass's
    order: those free before the pass, less those an earlier placement of the same pass took
    GPUs on, plus the placement's own nodes (freed for it by preemption, if so). Nodes held
    for another gang count as free: the measure is what the gang got, not what the policy
    allowed itself."""

    pool: str
    records: list[GangPlacement] = field(default_factory=list)
    _free: set[str] = field(default_factory=set)
    _taken: set[str] = field(default_factory=set)

    def before_pass(self, cluster: ClusterState) -> None:
        index = cluster.indexes.pools.get(self.pool)
        self._taken = set()
        self._free = set()
        if index is None:
            return
        for free, names in index.by_free.items():
            if free > 0:
                self._free.update(n for n in names if cluster.nodes[n].gpus == free)

    def placed(
        self, cluster: ClusterState, workload_id: str, placement: Placement, now: float
    ) -> None:
        names = [part.node for part in placement.nodes]
        if len(names) > 1:
            gpus = sum(len(part.gpus) for part in placement.nodes)
            free = (self._free - self._taken) | set(names)
            fewest = fewest_blocks_possible((cluster.nodes[n] for n in sorted(free)), gpus)
            used = blocks_used(cluster.nodes[n] for n in names)
            self.records.append(GangPlacement(now, workload_id, len(names), used, fewest or used))
        self._taken.update(names)


def topology_figures(config: TopologyConfig, gangs: GangBlocks | None) -> dict[str, Any]:
    """Blocks per gang p50/p90 and the share of placements in the fewest blocks, over the
    placements of gangs over more than one node (None without a topology, or no such gang)."""
    records = gangs.records if gangs is not None else []
    blocks = [float(r.blocks) for r in records]
    return {
        "topology": config.describe(),
        "gang_placements": len(records),
        "blocks_per_gang_p50": percentile(blocks, 50) if records else None,
        "blocks_per_gang_p90": percentile(blocks, 90) if records else None,
        "fewest_blocks_share": sum(1 for r in records if r.blocks <= r.fewest) / len(records)
        if records
        else None,
    }
