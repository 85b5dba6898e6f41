"""The interface between the generic agent loop and a cluster: :class:`ClusterAdapter`.

An adapter knows how to run things on one cluster (simulated nodes, this machine's processes,
Slurm jobs, Kubernetes pods); the agent loop (:mod:`services.agents.agent`) knows Fairshare:
it folds the log, decides what to start and stop, and publishes the facts. The loop calls the
adapter from one thread only, and never blocks on it for long: ``start`` and ``stop`` return at
once, and how runs end is learnt by polling :meth:`ClusterAdapter.poll_ended`.

See ``docs/agents.md`` for how to write one.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal, Protocol, runtime_checkable

#: GPU indices per node: ``(("node-01", (0, 1)), ...)``.
PlacementSpec = tuple[tuple[str, tuple[int, ...]], ...]


@dataclass(frozen=True)
class NodeSpec:
    """A node the adapter offers: registered by the agent as ``NodeRegistered``."""

    name: str
    gpus: int
    gpu_type: str
    #: The node's pool; None means the agent's default pool.
    pool: str | None = None
    #: What runs the work there (``NodeRegistered.executor``).
    executor: Literal["", "simulated", "local", "slurm", "kubernetes"] = ""
    #: Where it sits in the network (``NodeRegistered.block``/``rack``; "" when unknown):
    #: read from the cluster (``services/agents/topology.py``).
    block: str = ""
    rack: str = ""


@dataclass(frozen=True)
class ArrayTask:
    """Where a run's workload sits in its job array (what Slurm tells a task in
    ``SLURM_ARRAY_*``)."""

    array_id: str
    index: int
    #: How many elements the array has, and its lowest and highest index.
    count: int
    first: int
    last: int


@dataclass(frozen=True)
class RunRequest:
    """One attempt of a workload to run on GPUs of this cluster."""

    workload_id: str
    attempt: int
    placement: PlacementSpec
    #: The workload's opaque spec (``command``, ``env``, ``duration_s``, ...).
    spec: Mapping[str, object] = field(default_factory=dict)
    #: When the run started (epoch seconds, the agent's clock): now for a new run, the logged
    #: start for a run adopted after a restart.
    started_at: float = 0.0
    budget: str = ""
    #: Who submitted the workload (the API's authenticated user): the local agent's --run-as.
    submitter: str = ""
    #: Its place in its job array (None: it is no array's element).
    array: ArrayTask | None = None

    @property
    def run_id(self) -> str:
        """A name unique to this attempt (job names, log files, pod names)."""
        return f"{self.workload_id}-{self.attempt}"

    def gpus_on(self, node: str) -> tuple[int, ...]:
        for name, gpus in self.placement:
            if name == node:
                return gpus
        return ()


#: What every adapter sets in a run's environment: a spec may not set these names.
RUN_ENVIRONMENT = (
    "FAIRSHARE_WORKLOAD_ID",
    "FAIRSHARE_ATTEMPT",
    "FAIRSHARE_ARRAY_ID",
    "FAIRSHARE_ARRAY_INDEX",
    "FAIRSHARE_ARRAY_COUNT",
    "FAIRSHARE_ARRAY_MIN",
    "FAIRSHARE_ARRAY_MAX",
)


def run_environment(run: RunRequest) -> dict[str, str]:
    """The variables every adapter gives a run, whichever cluster runs it: its workload and
    attempt, and for an array's element the array, its index, its size and its lowest and
    highest index (Slurm's ``SLURM_ARRAY_JOB_ID``, ``_TASK_ID``, ``_TASK_COUNT``, ``_TASK_MIN``,
    ``_TASK_MAX``), so one script reads its slice of the work the same everywhere."""
    env = {"FAIRSHARE_WORKLOAD_ID": run.workload_id, "FAIRSHARE_ATTEMPT": str(run.attempt)}
    if run.array is not None:
        env["FAIRSHARE_ARRAY_ID"] = run.array.array_id
        env["FAIRSHARE_ARRAY_INDEX"] = str(run.array.index)
        env["FAIRSHARE_ARRAY_COUNT"] = str(run.array.count)
        env["FAIRSHARE_ARRAY_MIN"] = str(run.array.first)
        env["FAIRSHARE_ARRAY_MAX"] = str(run.array.last)
    return env


_HINT_UNSAFE = re.compile(r"[^A-Za-z0-9_-]+")


def run_label(workload_id: str) -> str:
    """A workload's name as a file name (the local adapter's run directory, a Slurm job's output):
    ``<hint>-<sha256 of the id>``. Workload ids come from whoever may submit, so none is ever
    used as a path itself.

    The hash makes it safe (64 hex digits, whatever the id holds: ``..``, ``/``, NUL, 10 kB);
    the hint, up to 24 of the id's letters, digits, ``_`` and ``-``, only helps people find it.
    """
    digest = hashlib.sha256(workload_id.encode("utf-8", "surrogatepass")).hexdigest()
    hint = _HINT_UNSAFE.sub("_", workload_id)[:24].lstrip("-_")
    return f"{hint}-{digest}" if hint else digest


@dataclass(frozen=True)
class RunEnded:
    """A run that is over, as :meth:`ClusterAdapter.poll_ended` reports it."""

    workload_id: str
    attempt: int
    #: The process's exit status; None when it never ran or the cluster does not say.
    exit_code: int | None
    message: str = ""
    #: The cluster lost the run before it could run (a native pod that could not be bound to
    #: its node): reported ``WorkloadLost``, so it is requeued, not finished.
    lost: bool = False

    @property
    def succeeded(self) -> bool:
        return self.exit_code == 0


@dataclass(frozen=True)
class GpuSample:
    """One GPU's reading; the agent adds the occupant and its attempt."""

    index: int
    utilisation_pct: float = 0.0
    memory_used_bytes: int = 0
    memory_total_bytes: int | None = None


@runtime_checkable
class ClusterAdapter(Protocol):
    """What the agent loop needs from a cluster. Every method must return quickly.

    * :meth:`nodes` is read once, at start; the agent registers them.
    * :meth:`start` launches a run and returns at once. If it cannot launch, it may raise (the
      agent reports the run as failed) or report the run as ended by the next ``poll_ended``.
    * :meth:`adopt` is called after a restart for runs that the log says are running on this
      cluster but that this incarnation did not start: return True if the run is still being
      tracked (it will end through ``poll_ended`` as usual), False if it cannot be recovered
      (the agent reports it ``WorkloadLost``).
    * :meth:`stop` asks a run to stop: SIGTERM (or the cluster's equivalent), then a kill after
      ``grace_period_s``. It returns at once; the end comes through ``poll_ended``. Stopping a
      run that already ended or is unknown does nothing.
    * :meth:`poll_ended` returns each run that ended since the last call, exactly once.
    * :meth:`reachable` is False for a node the agent must leave alone (no heartbeats, no
      starts or stops there): the scheduler marks it down after the heartbeat timeout.
    * :meth:`readings` returns the node's GPUs now, one sample per GPU index.
    * :meth:`close` releases the adapter when the agent stops.
    """

    def nodes(self) -> Sequence[NodeSpec]: ...

    def start(self, run: RunRequest) -> None: ...

    def adopt(self, run: RunRequest) -> bool: ...

    def stop(self, workload_id: str, attempt: int, grace_period_s: float) -> None: ...

    def poll_ended(self) -> list[RunEnded]: ...

    def reachable(self, node: str) -> bool: ...

    def readings(self, node: str) -> Sequence[GpuSample]: ...

    def close(self) -> None: ...
