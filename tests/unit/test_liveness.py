"""Node liveness: silent past the timeout is down, heard from again within it is up."""

from __future__ import annotations

from events.models import GpuHeartbeat, GpuReading, NodeDown, NodeRegistered, NodeUp
from events.times import utc_from_epoch
from projections.cluster_state import ClusterState
from projections.cluster_types import NodeState
from scheduling.liveness import liveness_facts
from tests.unit.scheduling_fixtures import T0

TIMEOUT = 60.0


def _cluster(*names: str) -> ClusterState:
    cluster = ClusterState()
    for name in names:
        cluster.apply(NodeRegistered(node=name, cluster="c", pool="p", gpus=2, gpu_type="x"), T0)
    return cluster


def _beat(cluster: ClusterState, name: str, at: float) -> None:
    readings = tuple(
        GpuReading(index=i, occupant=None, attempt=None, utilisation_pct=0, memory_used_bytes=0)
        for i in range(2)
    )
    cluster.apply(GpuHeartbeat(node=name, cluster="c", sequence=int(at), gpus=readings), at)


def test_a_node_silent_for_longer_than_the_timeout_is_down_and_not_a_second_sooner() -> None:
    cluster = _cluster("n0")
    _beat(cluster, "n0", T0 + 10)
    assert liveness_facts(cluster, T0 + 10 + TIMEOUT, TIMEOUT) == []
    facts = liveness_facts(cluster, T0 + 10 + TIMEOUT + 1, TIMEOUT)
    assert facts == [NodeDown(node="n0", last_heartbeat=utc_from_epoch(T0 + 10))]


def test_a_down_node_heard_from_again_is_up_and_a_still_silent_one_stays_down() -> None:
    cluster = _cluster("n0", "n1")
    for fact in liveness_facts(cluster, T0 + 100, TIMEOUT):
        cluster.apply(fact, T0 + 100)
    assert all(node.down for node in cluster.nodes.values())
    _beat(cluster, "n1", T0 + 150)
    assert liveness_facts(cluster, T0 + 160, TIMEOUT) == [NodeUp(node="n1")]


def test_facts_come_in_node_order_and_once_applied_nothing_more_is_due() -> None:
    cluster = _cluster("n2", "n0", "n1")
    _beat(cluster, "n1", T0 + 90)
    now = T0 + 100
    facts = liveness_facts(cluster, now, TIMEOUT)
    assert [(type(f), f.node) for f in facts] == [(NodeDown, "n0"), (NodeDown, "n2")]
    for fact in facts:
        cluster.apply(fact, now)
    assert liveness_facts(cluster, now, TIMEOUT) == []


def test_a_node_never_heard_from_is_left_alone() -> None:
    cluster = ClusterState()
    cluster.nodes["quiet"] = NodeState("quiet", "c", "p", 2, "x", last_heartbeat=None)
    assert liveness_facts(cluster, T0 + 10_000, TIMEOUT) == []
