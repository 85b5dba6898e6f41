"""When a node is down, and when it is up again, decided from its heartbeats alone.

A node silent for longer than the timeout is declared down (its workloads are then lost and
requeued by the pass); a down node heard from within the timeout is declared up. Pure, with
``now`` an argument, so that the live scheduler and a replay of its log declare the same nodes
at the same instants; nodes that never sent a heartbeat are left alone, since no agent on them
has spoken yet for their silence to mean anything.
"""

from __future__ import annotations

from events.models import NodeDown, NodeUp
from events.times import utc_from_epoch
from projections.cluster_state import ClusterState


def liveness_facts(cluster: ClusterState, now: float, timeout_s: float) -> list[NodeDown | NodeUp]:
    """The NodeDown and NodeUp facts due at ``now``, in node-name order."""
    facts: list[NodeDown | NodeUp] = []
    for name in sorted(cluster.nodes):
        node = cluster.nodes[name]
        if node.last_heartbeat is None:
            continue
        silent = now - node.last_heartbeat
        if not node.down and silent > timeout_s:
            facts.append(NodeDown(node=name, last_heartbeat=utc_from_epoch(node.last_heartbeat)))
        elif node.down and silent <= timeout_s:
            facts.append(NodeUp(node=name))
    return facts
