"""World facts: what happens to a simulated cluster that neither the trace nor a policy decides.

A submitter cancels a job (:class:`CancelAt`), a manager re-weights a budget
(:class:`WeightChangeAt`), a node dies under its work and may come back later
(:class:`NodeLossAt`), an agent reports its runs lost, dated before a heartbeat that still
named them (:class:`LateLossAt`). Each is stated at its given time, as the live system would
read it:

* a cancel is ``WorkloadCancelled``: pending work ends at once; placed or running work is asked
  to stop, the pass issues a preempt command for it (reason ``cancel``) and the engine, in the
  agent's part, stops the run after the grace period and reports ``WorkloadPreempted``, which
  the fold turns into ``cancelled`` (as ``services/agents/agent.py`` answers a cancel); work
  stopped and waiting for its requeue ends there too;
* a weight change is ``BudgetWeightChanged``, folded into the budget tree every pass reads;
* a node loss is ``NodeDown`` with the node's last heartbeat at that instant (it died then):
  the next pass declares its work lost and requeues what can resume; ``NodeUp`` follows after
  ``back_after_s``, if given.

A fact that cannot apply when its time comes (a cancel of work not submitted yet or already
ended, the loss of a node already out of service) is skipped and kept with the reason in
:attr:`World.skipped`, so a scenario can tell what it exercised. Facts are handled in a fixed
order (by time, then kind, then their place in the list): no clock, no randomness.
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Protocol

from events.models import (
    BudgetWeightChanged,
    EventData,
    NodeDown,
    NodeUp,
    WorkloadCancelled,
    WorkloadLost,
)
from events.times import fold_instant, utc_from_epoch
from projections.budget_tree import BudgetTree
from projections.cluster_state import ClusterState
from projections.cluster_types import TERMINAL
from services.simulator.maintenance import arrivals_on_nodes

#: Who states the world's facts in a simulated log.
WORLD_ACTOR = "simulator"


@dataclass(frozen=True)
class CancelAt:
    """The submitter of ``job_id`` cancels it at ``at``."""

    job_id: str
    at: float


@dataclass(frozen=True)
class WeightChangeAt:
    """``budget`` (a leaf or a parent) gets ``weight`` at ``at``, in every pool."""

    budget: str
    weight: float
    at: float


@dataclass(frozen=True)
class NodeLossAt:
    """``node`` goes down at ``at`` with whatever runs on it; back up ``back_after_s`` later
    (None: it stays down)."""

    node: str
    at: float
    back_after_s: float | None = None


@dataclass(frozen=True)
class LateLossAt:
    """The agent of ``node`` reports every run on it lost at ``at``, dated ``dated_s_before``
    seconds earlier: its last check of the runs' processes was then, while the GPUs' process
    table, which its heartbeats read, still named them. A heartbeat between the two (the
    simulator's come on the hour) confirmed time the loss then takes back: the ledger posts the
    hour and then a correction (docs/spec/log-v1.md 8.7, 8.8). The node stays up; the runs are
    requeued by the next pass, as any lost work."""

    node: str
    at: float
    dated_s_before: float


WorldFact = CancelAt | WeightChangeAt | NodeLossAt | LateLossAt


@dataclass(frozen=True)
class LateLossConfig:
    """``rate``: expected late losses per node per day (0: none), at random times, each dated
    up to ``dated_max_s`` earlier (drawn uniformly), from ``seed``."""

    rate: float = 0.0
    seed: int = 0
    dated_max_s: float = 1800.0

    def __post_init__(self) -> None:
        if not 0.0 <= self.rate <= 24.0 or math.isnan(self.rate):
            raise ValueError("--late-losses must be losses per node per day in [0, 24]")
        if not 0.0 < self.dated_max_s <= 86_400.0:
            raise ValueError("a late loss is dated back more than 0 s and at most a day")

    def facts(self, nodes: list[str], start: float, end: float) -> list[LateLossAt]:
        """The late losses in ``[start, end)``: a Poisson process of ``rate x len(nodes)`` a
        day, each on a node drawn uniformly (``random.Random(seed)``, stable across Python
        versions for a given seed)."""
        draw = random.Random(self.seed)
        return [
            LateLossAt(node, at, draw.uniform(1.0, self.dated_max_s))
            for at, node in arrivals_on_nodes(self.rate, nodes, start, end, draw)
        ]

    def describe(self) -> str:
        if self.rate <= 0:
            return "no late losses"
        return (
            f"{self.rate:g} late losses per node a day (seed {self.seed}), each dated up to "
            f"{self.dated_max_s:g} s before it is reported"
        )


class _Job(Protocol):
    cancelled_at: float | None


class Simulation(Protocol):
    """What of the engine (``engine.Simulation``) the world's facts use."""

    now: float

    @property
    def cluster(self) -> ClusterState: ...
    @property
    def tree(self) -> BudgetTree: ...
    @property
    def runs(self) -> Mapping[str, _Job]: ...
    @property
    def in_repair(self) -> Mapping[str, object]: ...
    def apply(self, data: EventData) -> None: ...
    def record(self, data: EventData) -> None: ...
    def node_back_at(self, at: float, node: str) -> None: ...
    def on_lost(self, lost: WorkloadLost) -> None: ...


@dataclass
class World:
    """The world facts of one simulation, and what became of them."""

    facts: tuple[WorldFact, ...] = ()
    #: Facts stated, in the order they were, and facts skipped with the reason.
    stated: list[WorldFact] = field(default_factory=list)
    skipped: list[tuple[WorldFact, str]] = field(default_factory=list)
    #: Nodes down by a loss and not back yet (maintenance leaves them alone).
    down: set[str] = field(default_factory=set)

    def check(
        self, jobs: Iterable[str], budgets: Mapping[str, float], nodes: Iterable[str]
    ) -> None:
        """Refuse facts about jobs, budgets or nodes the simulation does not have."""
        job_ids, node_names = set(jobs), set(nodes)
        for fact in self.facts:
            if isinstance(fact, CancelAt) and fact.job_id not in job_ids:
                raise ValueError(f"a cancel of {fact.job_id!r}, which is not in the trace")
            if isinstance(fact, WeightChangeAt) and fact.budget not in budgets:
                raise ValueError(f"a weight change of {fact.budget!r}, which is not a budget")
            if isinstance(fact, WeightChangeAt) and not fact.weight > 0:
                raise ValueError(f"a weight change of {fact.budget!r} to {fact.weight}: not > 0")
            if isinstance(fact, NodeLossAt) and fact.node not in node_names:
                raise ValueError(f"a loss of node {fact.node!r}, which the cluster lacks")
            if isinstance(fact, NodeLossAt) and (fact.back_after_s or 0) < 0:
                raise ValueError(f"node {fact.node!r} back after {fact.back_after_s} s: < 0")

    def schedule(self) -> list[tuple[float, int]]:
        """(time, index) of every fact, for the engine's heap."""
        return [(fact.at, index) for index, fact in enumerate(self.facts)]

    def state(self, sim: Simulation, index: int) -> bool:
        """State fact ``index`` now (or skip it, saying why). Returns whether a pass follows at
        this instant: not after a late loss, which an agent states on its own and the
        scheduler meets in its next pass (so that no reader takes the agent's facts for what
        that pass stated: ``services/audit/decisions.py`` counts the facts stated at a pass's
        instant just before its commands as the pass's)."""
        fact = self.facts[index]
        if isinstance(fact, CancelAt):
            why = _cancel(sim, fact)
        elif isinstance(fact, WeightChangeAt):
            why = _change_weight(sim, fact)
        elif isinstance(fact, LateLossAt):
            why = _lose_late(sim, fact)
        else:
            why = self._lose(sim, fact)
        if why:
            self.skipped.append((fact, why))
        else:
            self.stated.append(fact)
        return not isinstance(fact, LateLossAt)

    def _lose(self, sim: Simulation, fact: NodeLossAt) -> str:
        node = sim.cluster.nodes[fact.node]
        if node.down or fact.node in sim.in_repair:
            return "the node is already out of service"
        self.down.add(fact.node)
        sim.apply(NodeDown(node=fact.node, last_heartbeat=utc_from_epoch(sim.now)))
        if fact.back_after_s is not None:
            sim.node_back_at(sim.now + fact.back_after_s, fact.node)
        return ""

    def node_back(self, sim: Simulation, node: str) -> None:
        """A lost node is up again."""
        if node in self.down:
            self.down.discard(node)
            sim.apply(NodeUp(node=node))

    def count(self, kind: type[WorldFact]) -> int:
        """How many facts of ``kind`` were stated."""
        return sum(1 for fact in self.stated if isinstance(fact, kind))


def _lose_late(sim: Simulation, fact: LateLossAt) -> str:
    node = sim.cluster.nodes[fact.node]
    running = sorted(
        workload_id
        for workload_id in node.holders
        if sim.cluster.workloads[workload_id].status == "running"
    )
    if not running:
        return "nothing runs on the node"
    for workload_id in running:
        workload = sim.cluster.workloads[workload_id]
        started = workload.started_at if workload.started_at is not None else fact.at
        dated = max(started, fact.at - fact.dated_s_before)
        lost = WorkloadLost(
            workload_id=workload_id,
            attempt=workload.attempt,
            node=fact.node,
            last_heartbeat=utc_from_epoch(dated),
        )
        sim.apply(lost)
        sim.on_lost(lost)
    return ""


def _cancel(sim: Simulation, fact: CancelAt) -> str:
    workload = sim.cluster.workloads.get(fact.job_id)
    if workload is None:
        return "the job has not arrived yet"
    if workload.status in TERMINAL:
        return f"the job has already ended ({workload.status})"
    if workload.cancel_requested:
        return "the job is being cancelled already"
    sim.runs[fact.job_id].cancelled_at = sim.now
    sim.apply(
        WorkloadCancelled(workload_id=fact.job_id, cancelled_by=WORLD_ACTOR, reason="world fact")
    )
    return ""


def _change_weight(sim: Simulation, fact: WeightChangeAt) -> str:
    changed = BudgetWeightChanged(budget=fact.budget, weight=fact.weight, changed_by=WORLD_ACTOR)
    sim.tree.apply(changed, fold_instant(sim.now))  # as a reader of the log folds it
    sim.record(changed)
    return ""
