"""Liveness apart from the durable log (issue 23): agents send a ``node.alive`` every 10 s and a
durable ``node.heartbeat`` every 5 minutes (and on changes); the folds take either as a sign of
life, so down detection and a lost run's end stay as fine as 10 s; and every charge, and the
lost run a pass states, are re-derived from the durable facts alone."""

from __future__ import annotations

import functools
from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest

from events.envelope import Envelope
from events.models import (
    GpuHeartbeat,
    GpuReading,
    LedgerCharge,
    NodeAlive,
    NodeDown,
    NodeRegistered,
    WorkloadFinished,
    WorkloadLost,
)
from events.times import utc_from_epoch
from events.topics import TopicKind, Topics
from projections.cluster_state import ClusterState
from projections.ledger import Ledger
from scheduling.liveness import liveness_facts
from services.agents import RunRequest, SimulatedAdapter, simulated_nodes
from services.audit.replay import replay
from services.bench.history.gen import HistoryConfig, HistoryGenerator
from tests.unit.scheduling_fixtures import T0, Scenario, of_type
from tests.unit.test_agents import CLUSTER, NODE0, NODE1, Harness, place, submit

TIMEOUT = 60.0


def _readings(occupant: str | None = None) -> tuple[GpuReading, ...]:
    return tuple(
        GpuReading(
            index=i,
            occupant=occupant if i == 0 else None,
            attempt=1 if occupant is not None and i == 0 else None,
            utilisation_pct=0,
            memory_used_bytes=0,
        )
        for i in range(2)
    )


def _alive(node: str, at: float, occupant: str | None = None) -> NodeAlive:
    return NodeAlive(node=node, cluster="c", sequence=int(at), gpus=_readings(occupant))


def _beat(node: str, at: float, occupant: str | None = None) -> GpuHeartbeat:
    return GpuHeartbeat(node=node, cluster="c", sequence=int(at), gpus=_readings(occupant))


# -- the agents' two cadences ------------------------------------------------------------------


def test_agents_send_liveness_every_10_s_and_a_durable_heartbeat_every_5_minutes() -> None:
    h = Harness(heartbeat_s=10, confirm_s=300)
    h.tick()
    for _ in range(60):
        h.tick(10)  # 600 s: rounds at 0, 10, ..., 600
    alive = Counter(a.node for a in h.facts(NodeAlive))
    beats = Counter(b.node for b in h.facts(GpuHeartbeat))
    assert alive == {NODE0: 61, NODE1: 61}
    assert beats == {NODE0: 3, NODE1: 3}, "at the start, then at 300 s and 600 s"
    assert h.agent.published["alive"] == 122
    assert h.agent.published["heartbeat"] == 6


def test_a_durable_heartbeat_goes_out_at_once_when_a_nodes_occupants_change() -> None:
    h = Harness(heartbeat_s=10, confirm_s=300)
    h.tick(10)
    submit(h, "w1", gpus=1, duration_s=55)
    place(h, "w1", node=NODE1, gpus=(2,))
    h.tick(10)  # started: its round names w1
    for _ in range(6):
        h.tick(10)  # w1 ends 55 s after its start
    beats = [b for b in h.facts(GpuHeartbeat) if b.node == NODE1]
    occupants = [{g.occupant for g in b.gpus} - {None} for b in beats]
    assert occupants == [set(), {"w1"}, set()], "the start, w1 on it, w1 gone"
    assert len([b for b in h.facts(GpuHeartbeat) if b.node == NODE0]) == 1, "nothing changed"
    durable = {(b.node, b.sequence): b.gpus for b in h.facts(GpuHeartbeat)}
    alive = {(a.node, a.sequence): a.gpus for a in h.facts(NodeAlive)}
    assert all(alive[key] == gpus for key, gpus in durable.items()), "the same round's readings"


def test_the_confirmation_cadence_must_be_positive() -> None:
    with pytest.raises(ValueError, match="confirm_s"):
        Harness(confirm_s=0)


def test_a_restarted_agent_reads_the_liveness_topic_for_the_last_sign_of_its_runs() -> None:
    h = Harness(heartbeat_s=10, confirm_s=300)
    submit(h, "w1", duration_s=1000)
    place(h, "w1", gpus=(0,))
    h.tick()
    for _ in range(5):
        h.tick(10)
    last_alive = max(e.time.timestamp() for e in h.events(NodeAlive) if e.data.node == NODE0)
    last_beat = max(e.time.timestamp() for e in h.events(GpuHeartbeat) if e.data.node == NODE0)
    assert last_alive - last_beat == 50
    # A new incarnation whose adapter lost the run reports it lost at its last liveness signal.
    again = Harness(broker=h.broker, clock=h.clock, adapter=_Forgetful(h.clock))
    again.tick(5)
    (lost,) = again.facts(WorkloadLost)
    assert lost.last_heartbeat == utc_from_epoch(last_alive)


class _Forgetful(SimulatedAdapter):
    """A simulated cluster whose runs did not survive the agent's restart."""

    def __init__(self, clock: Callable[[], float]) -> None:
        super().__init__(simulated_nodes(CLUSTER, 2, 4, "h100"), clock=clock)

    def adopt(self, request: RunRequest) -> bool:
        return False


# -- the folds: either signal is a sign of life ------------------------------------------------


def _cluster() -> ClusterState:
    cluster = ClusterState()
    for name in ("n0", "n1"):
        cluster.apply(NodeRegistered(node=name, cluster="c", pool="p", gpus=2, gpu_type="x"), T0)
    return cluster


def test_a_liveness_signal_moves_the_last_seen_time_of_a_node_and_of_its_runs() -> None:
    s = Scenario(nodes=(("n0", 2),))
    s.running("r", "a", (("n0", (0,)),), started_at=T0, min_runtime_s=60)
    s.apply(_beat("n0", T0 + 10, "r"), T0 + 10)
    s.apply(_alive("n0", T0 + 40, "r"), T0 + 40)
    assert s.cluster.nodes["n0"].last_heartbeat == T0 + 40
    assert s.cluster.workloads["r"].last_heartbeat == T0 + 40


def test_a_node_silent_on_both_is_down_at_its_last_liveness_signal() -> None:
    cluster = _cluster()
    cluster.apply(_beat("n0", T0 + 10), T0 + 10)
    cluster.apply(_alive("n0", T0 + 50), T0 + 50)
    cluster.apply(_alive("n1", T0 + 50), T0 + 50)
    assert liveness_facts(cluster, T0 + 50 + TIMEOUT, TIMEOUT) == []
    cluster.apply(_alive("n1", T0 + 100), T0 + 100)
    facts = liveness_facts(cluster, T0 + 50 + TIMEOUT + 1, TIMEOUT)
    assert facts == [NodeDown(node="n0", last_heartbeat=utc_from_epoch(T0 + 50))]


def test_a_lost_run_ends_at_its_last_liveness_signal_and_the_durable_facts_say_the_same() -> None:
    """The pass states the lost run's end from the node's last signal; the node.down it
    follows states that time too, so a fold of the durable facts alone (the liveness topic
    expired) re-derives the same WorkloadLost, as the decision audit must."""

    def lost(with_liveness: bool) -> WorkloadLost:
        s = Scenario(nodes=(("n0", 2),))
        s.running("r", "a", (("n0", (0,)),), started_at=T0, min_runtime_s=60)
        s.apply(_beat("n0", T0 + 10, "r"), T0 + 10)
        if with_liveness:
            for at in range(20, 60, 10):
                s.apply(_alive("n0", T0 + at, "r"), T0 + at)
            (down,) = liveness_facts(s.cluster, T0 + 200, TIMEOUT)
            assert down == NodeDown(node="n0", last_heartbeat=utc_from_epoch(T0 + 50))
        s.apply(NodeDown(node="n0", last_heartbeat=utc_from_epoch(T0 + 50)), T0 + 200)
        (event,) = of_type(s.run(T0 + 200), WorkloadLost)
        return event  # type: ignore[no-any-return]

    live = lost(with_liveness=True)
    assert live.last_heartbeat == utc_from_epoch(T0 + 50), "10-s fine, not the 5-minute beat"
    assert lost(with_liveness=False) == live


# -- charges: re-derived from what the log keeps -----------------------------------------------


@functools.cache
def _log(seed: int, confirm_s: int, nodes: int = 3, length_s: int = 4 * 3600) -> list[Any]:
    written: list[Envelope[Any]] = []
    end = T0 + length_s
    config = HistoryConfig(nodes=nodes, length_s=length_s, end=end, seed=seed, confirm_s=confirm_s)
    HistoryGenerator(config, Topics(prefix="t."), written.append).finish(end)
    return written


def _charges(log: list[Envelope[Any]]) -> list[LedgerCharge]:
    ledger = Ledger()
    for envelope in log:
        ledger.apply(envelope.data, envelope.time.timestamp())
    return list(ledger.entries)


def _durable(log: list[Envelope[Any]]) -> list[Envelope[Any]]:
    return [e for e in log if type(e.data).topic is not TopicKind.LIVENESS]


@pytest.mark.parametrize("seed", [1, 2, 3, 23])
def test_charges_from_the_durable_facts_alone_equal_those_with_the_liveness_signals(
    seed: int,
) -> None:
    log = _log(seed, confirm_s=300)
    durable = _durable(log)
    assert len(durable) < len(log)
    assert _charges(durable) == _charges(log)
    result = replay(iter(durable))
    assert result.identical, result.differences[:5]
    assert result.recorded_count > 0


@pytest.mark.parametrize("seed", [1, 2, 3, 23])
def test_a_run_is_charged_the_same_with_heartbeats_every_5_minutes_as_every_10_s(
    seed: int,
) -> None:
    """Amounts come from start and end facts; the cadence only decides when a running run's
    closed hours are posted (at most 5 minutes after the hour, instead of 10 s)."""
    old = _charges(_log(seed, confirm_s=10))  # every round durable: the log before issue 23
    new = _charges(_log(seed, confirm_s=300))

    def by_run(charges: list[LedgerCharge]) -> dict[str, set[LedgerCharge]]:
        runs: dict[str, set[LedgerCharge]] = {}
        for charge in charges:
            runs.setdefault(charge.workload_id, set()).add(charge)
        return runs

    old_runs, new_runs = by_run(old), by_run(new)
    for workload, charges in new_runs.items():
        assert charges <= old_runs[workload], "nothing charged that the old log did not"
    ended = _ended(_log(seed, confirm_s=300))
    for workload in ended:
        assert new_runs.get(workload) == old_runs.get(workload), workload
    assert sum(c.gpu_seconds for c in new) <= sum(c.gpu_seconds for c in old)


def _ended(log: list[Envelope[Any]]) -> set[str]:
    return {e.data.workload_id for e in log if isinstance(e.data, WorkloadFinished)}
