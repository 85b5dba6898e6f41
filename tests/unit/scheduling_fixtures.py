"""Builders and a tiny cluster agent for the scheduling-core tests.

Times are epoch seconds from ``T0`` (not 0: a zero timestamp is falsy, and real logs never start
at the epoch). Everything here drives the real folds (``BudgetTree``, ``ClusterState``) through
the real event models, so a test exercises exactly what the service and the simulator replay.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping
from datetime import UTC, datetime
from typing import Any

from events.envelope import new_event
from events.models import (
    EventData,
    NodeGpus,
    NodeRegistered,
    PlaceCommand,
    Placement,
    PreemptCommand,
    WorkloadFinished,
    WorkloadPlaced,
    WorkloadPreempted,
    WorkloadStarted,
    WorkloadSubmitted,
)
from events.serde import decode_structured, encode_structured
from projections.budget_tree import BudgetTree
from projections.cluster_state import ClusterState
from projections.cluster_types import PlacementSpec
from scheduling.memos import PassMemos
from scheduling.scheduling_pass import PassContext, PassResult, run_pass

#: An hour-aligned instant well after the epoch (2023-11-14 22:00 UTC).
T0 = 1_699_999_200.0
POOL = "p"
CLUSTER = "c1"

Usage = Mapping[str, float]


def utc(ts: float) -> datetime:
    return datetime.fromtimestamp(ts, UTC)


def shape(placement: PlacementSpec) -> Placement:
    return Placement(nodes=tuple(NodeGpus(node=n, gpus=g) for n, g in placement))


def spec_of(placement: Placement) -> PlacementSpec:
    return tuple((part.node, tuple(part.gpus)) for part in placement.nodes)


def make_tree(budgets: Iterable[tuple[str, float]], at: float = T0 - 3600) -> BudgetTree:
    """A tree from ``(path, weight)`` pairs, parents first."""
    tree = BudgetTree()
    for path, weight in budgets:
        tree.create(path, weight, at)
    return tree


class Scenario:
    """A cluster state, a budget tree and a usage table, with helpers to act on them."""

    def __init__(
        self,
        budgets: Iterable[tuple[str, float]] = (("a", 1.0), ("b", 1.0)),
        nodes: Iterable[tuple[str, int]] = (("n0", 4),),
        pool: str = POOL,
    ) -> None:
        self.tree = make_tree(budgets)
        self.cluster = ClusterState()
        self.pool = pool
        self.usage: dict[str, dict[str, float]] = {}
        self.passes = 0
        #: Kept across the scenario's passes, as the scheduler service keeps them.
        self.memos = PassMemos()
        for name, gpus in nodes:
            self.add_node(name, gpus, pool)

    # -- setting up -------------------------------------------------------------------------
    def add_node(self, name: str, gpus: int, pool: str | None = None) -> None:
        self.cluster.apply(
            NodeRegistered(
                node=name, cluster=CLUSTER, pool=pool or self.pool, gpus=gpus, gpu_type="h100"
            ),
            T0 - 3600,
        )

    def apply(self, data: EventData, at: float) -> None:
        self.cluster.apply(data, at)

    def submit(
        self,
        workload_id: str,
        budget: str,
        gpus: int = 1,
        min_runtime_s: int = 600,
        at: float = T0,
        pools: tuple[str, ...] | None = None,
        **fields: Any,
    ) -> None:
        self.apply(
            WorkloadSubmitted(
                workload_id=workload_id,
                budget=budget,
                pools=pools or (self.pool,),
                gpus=gpus,
                min_runtime_s=min_runtime_s,
                submitter="tester",
                **fields,
            ),
            at,
        )

    def place(self, workload_id: str, placement: PlacementSpec, at: float) -> None:
        """Place a pending workload by hand (as a replayed WorkloadPlaced would)."""
        workload = self.cluster.workloads[workload_id]
        self.apply(
            WorkloadPlaced(
                workload_id=workload_id,
                attempt=workload.attempt,
                pool=workload.pools[0],
                placement=shape(placement),
                allocated=workload.allocated,
                command_id=f"manual:{workload_id}:{workload.attempt}",
            ),
            at,
        )

    def start(self, workload_id: str, at: float) -> None:
        workload = self.cluster.workloads[workload_id]
        self.apply(
            WorkloadStarted(
                workload_id=workload_id,
                attempt=workload.attempt,
                pool=workload.pool or workload.pools[0],
                placement=shape(workload.placement),
                allocated=workload.allocated,
            ),
            at,
        )

    def running(
        self,
        workload_id: str,
        budget: str,
        placement: PlacementSpec,
        started_at: float,
        min_runtime_s: int = 600,
        **fields: Any,
    ) -> None:
        """Submit, place and start a workload in one go."""
        gpus = sum(len(g) for _n, g in placement)
        gang = "whole-nodes" if len(placement) > 1 else "single-node"
        fields.setdefault("gang", gang)
        self.submit(workload_id, budget, gpus, min_runtime_s, at=started_at - 10, **fields)
        self.place(workload_id, placement, started_at - 5)
        self.start(workload_id, started_at)

    def preempted(self, workload_id: str, at: float) -> None:
        workload = self.cluster.workloads[workload_id]
        ran = 0 if workload.started_at is None else int(at - workload.started_at)
        self.apply(
            WorkloadPreempted(
                workload_id=workload_id,
                attempt=workload.attempt,
                command_id=f"preempt:{workload_id}",
                ran_s=max(ran, 0),
            ),
            at,
        )

    def finished(self, workload_id: str, at: float) -> None:
        workload = self.cluster.workloads[workload_id]
        self.apply(
            WorkloadFinished(
                workload_id=workload_id, attempt=workload.attempt, outcome="succeeded"
            ),
            at,
        )

    # -- passes -----------------------------------------------------------------------------
    def set_usage(self, usage: Usage, pool: str | None = None) -> None:
        self.usage[pool or self.pool] = dict(usage)

    def usage_source(self, pool: str) -> Usage:
        return self.usage.get(pool, {})

    def run(self, now: float, **ctx: Any) -> PassResult:
        self.passes += 1
        ctx.setdefault("pass_id", self.passes)
        return run_pass(
            self.cluster, self.tree, self.usage_source, PassContext(now=now, **ctx), self.memos
        )


# -- reading results -----------------------------------------------------------------------------
def place_commands(result: PassResult) -> list[PlaceCommand]:
    return [c for c in result.commands if isinstance(c, PlaceCommand)]


def preempt_commands(result: PassResult) -> list[PreemptCommand]:
    return [c for c in result.commands if isinstance(c, PreemptCommand)]


def placed_ids(result: PassResult) -> list[str]:
    """Workloads placed by the pass, in decision order."""
    return [c.workload_id for c in place_commands(result)]


def preempted_ids(result: PassResult) -> list[str]:
    return [c.workload_id for c in preempt_commands(result)]


def placements(result: PassResult) -> dict[str, PlacementSpec]:
    return {c.workload_id: spec_of(c.placement) for c in place_commands(result)}


def of_type(result: PassResult, kind: type[EventData]) -> list[Any]:
    return [e for e in result.all() if isinstance(e, kind)]


def roundtrip(data: EventData, at: float = T0) -> EventData:
    """The payload after a trip through the strict serde (as a consumer would decode it)."""
    line = encode_structured(new_event(data, source="tests", time=utc(at)))
    decoded: EventData = decode_structured(line).data
    return decoded


# -- observing state ------------------------------------------------------------------------------
def snapshot(cluster: ClusterState) -> dict[str, Any]:
    """Everything observable of a cluster state (not its change counter)."""
    return {
        "nodes": {name: dataclasses.asdict(node) for name, node in sorted(cluster.nodes.items())},
        "workloads": {
            wid: dataclasses.asdict(workload) for wid, workload in sorted(cluster.workloads.items())
        },
        "pending": {
            pool: {
                budget: {kind: list(queue) for kind, queue in kinds.items() if queue}
                for budget, kinds in by_budget.items()
            }
            for pool, by_budget in cluster.indexes.pending.items()
        },
        "index": {
            pool: (
                index.capacity,
                {free: list(names) for free, names in index.by_free.items() if names},
            )
            for pool, index in cluster.indexes.pools.items()
        },
        "active": {pool: sorted(ids) for pool, ids in cluster.indexes.active.items()},
        "awaiting_requeue": sorted(cluster.indexes.awaiting_requeue),
        "cancelling": sorted(cluster.indexes.cancelling),
        "cordoned": sorted(cluster.indexes.cordoned_nodes),
        "down": sorted(cluster.indexes.down_nodes),
        "contract_bounds": dict(sorted(cluster.indexes.contract_bounds.items())),
    }


def gpu_claims(cluster: ClusterState) -> dict[tuple[str, int], list[str]]:
    """Per (node, GPU): the active workloads whose placement includes it."""
    claims: dict[tuple[str, int], list[str]] = {}
    for workload in cluster.workloads.values():
        if workload.status in ("placed", "running"):
            for node, gpus in workload.placement:
                for gpu in gpus:
                    claims.setdefault((node, gpu), []).append(workload.workload_id)
    return claims


# -- a minimal cluster agent ----------------------------------------------------------------------
class Agent:
    """Acts out decisions the way the simulator does: a placed workload starts once no other
    workload physically holds its GPUs; a preempted one stops ``grace_period_s`` after the command;
    a running one finishes after its duration (work done before a preemption is kept)."""

    def __init__(self, cluster: ClusterState, durations: Mapping[str, float]) -> None:
        self.cluster = cluster
        self.remaining: dict[str, float] = dict(durations)
        self.run_start: dict[str, float] = {}
        self.stop_at: dict[tuple[str, int], float] = {}
        self.intervals: list[tuple[str, str, int, float, float, bool]] = []

    def act(self, result: PassResult, now: float) -> None:
        for command in result.commands:
            if isinstance(command, PreemptCommand):
                key = (command.workload_id, command.attempt)
                self.stop_at.setdefault(key, now + command.grace_period_s)

    def _close(self, workload_id: str, now: float) -> None:
        start = self.run_start.pop(workload_id, None)
        if start is not None:
            workload = self.cluster.workloads[workload_id]
            self.remaining[workload_id] = max(0.0, self.remaining[workload_id] - (now - start))
            self.intervals.append(
                (
                    workload.pool or "",
                    workload.budget,
                    workload.gpus,
                    start,
                    now,
                    workload.allocated,
                )
            )

    def advance(self, now: float, apply: Callable[[EventData, float], None]) -> None:
        """Everything the agent reports up to ``now``: ends first, then starts."""
        cluster = self.cluster
        # Work lost with its node stops running too.
        for workload_id in sorted(self.run_start):
            if cluster.workloads[workload_id].status not in ("placed", "running"):
                self._close(workload_id, now)
        for (workload_id, attempt), stop in sorted(self.stop_at.items()):
            workload = cluster.workloads[workload_id]
            if (
                stop <= now
                and workload.attempt == attempt
                and workload.status in ("placed", "running")
            ):
                ran = now - self.run_start.get(workload_id, now)
                self._close(workload_id, now)
                apply(
                    WorkloadPreempted(
                        workload_id=workload_id,
                        attempt=attempt,
                        command_id=f"preempt:{workload_id}:{attempt}",
                        ran_s=int(ran),
                    ),
                    now,
                )
        for workload_id in sorted(self.run_start):
            workload = cluster.workloads[workload_id]
            start = self.run_start[workload_id]
            if workload.status == "running" and start + self.remaining[workload_id] <= now:
                self._close(workload_id, now)
                apply(
                    WorkloadFinished(
                        workload_id=workload_id, attempt=workload.attempt, outcome="succeeded"
                    ),
                    now,
                )
        for workload_id in sorted(cluster.workloads):
            workload = cluster.workloads[workload_id]
            if workload.status != "placed" or workload.preempting:
                continue
            if any(cluster.nodes[n].down for n, _g in workload.placement):
                continue
            if self._blocked(workload_id, workload.placement):
                continue
            apply(
                WorkloadStarted(
                    workload_id=workload_id,
                    attempt=workload.attempt,
                    pool=workload.pool or "",
                    placement=shape(workload.placement),
                    allocated=workload.allocated,
                ),
                now,
            )
            if workload.status == "running":
                self.run_start[workload_id] = now

    def _blocked(self, workload_id: str, placement: PlacementSpec) -> bool:
        for node_name, gpus in placement:
            node = self.cluster.nodes[node_name]
            for holder, held in node.holders.items():
                if holder != workload_id and set(held) & set(gpus):
                    return True
        return False

    def open_usage(self, now: float) -> list[tuple[str, str, int, float, float, bool]]:
        """Intervals of work still running, up to ``now`` (not yet closed)."""
        found = []
        for workload_id, start in sorted(self.run_start.items()):
            workload = self.cluster.workloads[workload_id]
            found.append(
                (
                    workload.pool or "",
                    workload.budget,
                    workload.gpus,
                    start,
                    now,
                    workload.allocated,
                )
            )
        return found
