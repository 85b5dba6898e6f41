"""Facts of many workloads for charging split by workload: runs of every partition, and a
node whose heartbeats name runs of two workloads (so of two shards, likely)."""

from __future__ import annotations

from events.models import (
    EventData,
    GpuHeartbeat,
    GpuReading,
    NodeGpus,
    Placement,
    WorkloadFinished,
    WorkloadStarted,
    WorkloadSubmitted,
)
from tests.unit.test_ledger import T0, run_events

Facts = list[tuple[EventData, int]]


def shared_node(first: str, second: str, start: int, end: int) -> Facts:
    """Two workloads on one node: its heartbeats name runs of (likely) two shards."""
    facts: Facts = []
    for workload, gpus in ((first, (0, 1)), (second, (2, 3))):
        facts.append(
            (
                WorkloadSubmitted(
                    workload_id=workload, budget="lab/b", pools=("p",), gpus=2,
                    min_runtime_s=600, submitter="u",
                ),
                start - 10,
            )
        )  # fmt: skip
        placement = Placement(nodes=(NodeGpus(node="node-shared", gpus=gpus),))
        facts.append(
            (
                WorkloadStarted(
                    workload_id=workload, attempt=1, pool="p", placement=placement, allocated=True
                ),
                start,
            )
        )
    for t in range(start + 600, end, 600):
        readings = tuple(
            GpuReading(
                index=i, occupant=first if i < 2 else second, attempt=1,
                utilisation_pct=90.0, memory_used_bytes=1,
            )
            for i in range(4)
        )  # fmt: skip
        facts.append((GpuHeartbeat(node="node-shared", cluster="c", sequence=t, gpus=readings), t))
    facts += [
        (WorkloadFinished(workload_id=w, attempt=1, outcome="succeeded"), end)
        for w in (first, second)
    ]
    return facts


def batch(prefix: str, offset: int) -> Facts:
    facts: Facts = []
    for i in range(9):
        start = T0 + offset + 60 * i
        budget = "lab/a" if i % 2 else "lab/b"
        facts += run_events(f"{prefix}{i}", budget, 1 + i % 3, start, start + 7300, i != 4, 600)
    facts += shared_node(f"{prefix}s1", f"{prefix}s2", T0 + offset + 30, T0 + offset + 5000)
    return sorted(facts, key=lambda pair: pair[1])
