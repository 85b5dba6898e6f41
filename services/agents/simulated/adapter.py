"""A simulated cluster: nodes with GPUs that "run" each workload for ``spec["duration_s"]``.

Nothing is executed. A run ends by itself ``duration_s`` seconds after its start (never, when
the spec has no duration), with ``spec["exit_code"]`` (default 0); a stop ends it after
``spec["stop_s"]`` seconds (default 0: it exits at once on SIGTERM), or at the grace period if
that is shorter. Time is the agent's clock, so tests drive it by hand.

After a restart, runs the log says are running are adopted and finish at the same instant they
would have: ``duration_s`` after their logged start. :meth:`SimulatedAdapter.fail_node` plays a
dead node: it stops heartbeating, its runs vanish without a report, and the agent leaves it
alone (the scheduler marks it down and reports its workloads lost).
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from services.agents.adapter import GpuSample, NodeSpec, RunEnded, RunRequest
from services.agents.topology import grid_place

log = logging.getLogger(__name__)

GIB = 1 << 30


@dataclass
class _SimulatedRun:
    request: RunRequest
    ends_at: float | None
    exit_code: int
    stopping_at: float | None = None


def _number(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    number = float(value)
    return number if math.isfinite(number) and number >= 0 else None


def simulated_nodes(
    cluster: str,
    count: int,
    gpus_per_node: int,
    gpu_type: str = "sim",
    pool: str | None = None,
    *,
    pools: Sequence[str] = (),
    topology: tuple[int, int] = (0, 0),
) -> list[NodeSpec]:
    """``count`` nodes named ``<cluster>-node-00``, ``-01``, ... of ``gpus_per_node`` GPUs, in
    ``pool`` (None: the agent's), or dealt out over ``pools`` in turn; ``topology``: nodes per
    block and per rack, consecutive nodes together (0: none)."""
    width = max(2, len(str(count - 1)))
    return [
        NodeSpec(
            f"{cluster}-node-{i:0{width}d}",
            gpus_per_node,
            gpu_type,
            pools[i % len(pools)] if pools else pool,
            executor="simulated",
            block=grid_place(i, *topology)[0],
            rack=grid_place(i, *topology)[1],
        )
        for i in range(count)
    ]


class SimulatedAdapter:
    """A :class:`~services.agents.adapter.ClusterAdapter` over simulated nodes."""

    def __init__(
        self,
        nodes: Sequence[NodeSpec],
        *,
        clock: Callable[[], float] = time.time,
        busy_utilisation_pct: float = 95.0,
        memory_total_bytes: int = 80 * GIB,
    ) -> None:
        if len({node.name for node in nodes}) != len(nodes):
            raise ValueError("nodes: names must be distinct")
        self._nodes = list(nodes)
        self._gpus = {node.name: node.gpus for node in nodes}
        self._clock = clock
        self._busy_pct = busy_utilisation_pct
        self._memory_total = memory_total_bytes
        self._runs: dict[str, _SimulatedRun] = {}
        self._failed: set[str] = set()

    # -- failure injection ---------------------------------------------------------------
    def fail_node(self, name: str) -> None:
        """The node dies: no more heartbeats, its runs vanish unreported."""
        if name not in self._gpus:
            raise KeyError(f"no simulated node {name!r}")
        self._failed.add(name)
        for workload_id, run in list(self._runs.items()):
            if run.request.gpus_on(name):
                del self._runs[workload_id]
        log.warning("simulated node failed", extra={"node": name})

    @property
    def failed_nodes(self) -> frozenset[str]:
        return frozenset(self._failed)

    # -- the adapter -----------------------------------------------------------------------
    def nodes(self) -> Sequence[NodeSpec]:
        return list(self._nodes)

    def _track(self, run: RunRequest) -> None:
        duration = _number(run.spec.get("duration_s"))
        exit_code = run.spec.get("exit_code", 0)
        self._runs[run.workload_id] = _SimulatedRun(
            request=run,
            ends_at=None if duration is None else run.started_at + duration,
            exit_code=exit_code if isinstance(exit_code, int) else 1,
        )

    def start(self, run: RunRequest) -> None:
        self._track(run)

    def adopt(self, run: RunRequest) -> bool:
        self._track(run)
        return True

    def stop(self, workload_id: str, attempt: int, grace_period_s: float) -> None:
        run = self._runs.get(workload_id)
        if run is None or run.request.attempt != attempt or run.stopping_at is not None:
            return
        delay = _number(run.request.spec.get("stop_s")) or 0.0
        run.stopping_at = self._clock() + min(delay, max(0.0, grace_period_s))

    def poll_ended(self) -> list[RunEnded]:
        now = self._clock()
        ended: list[RunEnded] = []
        for workload_id, run in sorted(self._runs.items()):
            attempt = run.request.attempt
            if (
                run.ends_at is not None
                and run.ends_at <= now
                and (run.stopping_at is None or run.ends_at <= run.stopping_at)
            ):
                ended.append(RunEnded(workload_id, attempt, run.exit_code))
            elif run.stopping_at is not None and run.stopping_at <= now:
                ended.append(RunEnded(workload_id, attempt, 143, "stopped (SIGTERM)"))
            else:
                continue
            del self._runs[workload_id]
        return ended

    def reachable(self, node: str) -> bool:
        return node in self._gpus and node not in self._failed

    def readings(self, node: str) -> Sequence[GpuSample]:
        busy: set[int] = set()
        for run in self._runs.values():
            busy.update(run.request.gpus_on(node))
        return [
            GpuSample(
                index=index,
                utilisation_pct=self._busy_pct if index in busy else 0.0,
                memory_used_bytes=self._memory_total // 2 if index in busy else 0,
                memory_total_bytes=self._memory_total,
            )
            for index in range(self._gpus.get(node, 0))
        ]

    def close(self) -> None:
        self._runs.clear()
