"""What ``fairshare up`` starts, in one frozen value (the command line fills it in)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from events import Topics


@dataclass(frozen=True)
class RestartPolicy:
    """When ``fairshare up`` starts a dead service again: at once is wrong (a service that dies
    on start, say while the broker is away, would spin), never is wrong (one crash would end
    the demo), so the delay doubles from ``initial_s`` up to ``max_s`` and starts over once a
    service has stayed up ``reset_after_s``. A service that died ``loud_deaths`` times within
    ``loud_window_s`` is still restarted, but reported loudly: something is wrong with it."""

    initial_s: float = 1.0
    max_s: float = 30.0
    reset_after_s: float = 60.0
    loud_deaths: int = 5
    loud_window_s: float = 300.0

    def delay_s(self, failures: int) -> float:
        """The wait before the restart that follows ``failures`` deaths in a row (>= 1)."""
        return float(min(self.max_s, self.initial_s * 2 ** min(max(0, failures - 1), 32)))


@dataclass(frozen=True)
class UpPrice:
    """A list price ``fairshare up`` sets through the API (``--price POOL=AMOUNT[@ISO]``):
    ``amount`` per GPU-hour as decimal text, from ``effective_at`` (None: the current hour)."""

    pool: str
    amount: str
    effective_at: str | None = None


#: The demo's list price per GPU-hour of each of its pools, so that the cost reports show money.
DEMO_PRICE = "2.50"


@dataclass(frozen=True)
class UpConfig:
    bootstrap: str
    topics: Topics
    data_dir: Path
    database_url: str
    api_host: str = "127.0.0.1"
    api_port: int = 8000
    #: The API's tokens file (hashes, ``fairshare tokens add``); None: the demo tokens, which
    #: the API serves on a loopback host only.
    tokens_file: Path | None = None
    #: A Slurm cluster run beside the simulated one (its own pool), by ``fairshare agent
    #: slurm`` on this host; None: the simulated cluster only.
    slurm_cluster: str | None = None
    #: Slurm's jobcomp/filetxt log, for exit codes of jobs that left squeue.
    slurm_jobcomp_log: Path | None = None
    #: The Slurm partition of Fairshare's nodes, whose sbatch jobs (held by the job_submit
    #: plugin) are native work; None: every node with GPUs, and no native work.
    slurm_partition: str | None = None
    #: A Kubernetes cluster run beside them (its own pool), by ``fairshare agent kubernetes``
    #: with ``kubeconfig``; None: none.
    kubernetes_cluster: str | None = None
    kubeconfig: Path | None = None
    #: Where its runs' pods go, and which nodes it offers ('' for every node with GPUs).
    kubernetes_namespace: str = "fairshare-runs"
    kubernetes_node_selector: str = ""
    agent: str = "simulated"
    cluster: str = "demo"
    nodes: int = 4
    gpus_per_node: int = 4
    heartbeat_s: float = 5.0
    #: A node silent this long is declared down by the scheduler.
    heartbeat_timeout_s: float = 30.0
    scheduler_tick_s: float = 2.0
    #: Scheduler processes: one leads by lease, the others stand by to take over within the
    #: lease's TTL when it dies (a restart by the supervisor would take as long, but a
    #: standby does not depend on the launcher being alive).
    schedulers: int = 2
    #: A lease per pool instead of one for every pool: the schedulers share the pools out
    #: (each prefers every N-th of :attr:`pools`), and a dead one's pools go to the others.
    lease_per_pool: bool = False
    #: Charging processes: one plain host (1), or that many shards of one consumer group
    #: sharing the workloads topic's partitions (``fairshare charging --instance``).
    charging_shards: int = 1
    grace_period_s: int = 10
    #: Mean seconds between synthetic submissions (0: none).
    submit_every_s: float = 4.0
    #: The stream pauses while this many workloads are pending, so a demo left running keeps
    #: a steady queue (demand above capacity, as in docs/design.md section 6) instead of an
    #: ever-growing one.
    max_pending: int = 30
    seed: int = 7
    #: List prices to set once the API answers (``--price``); none: the demo's
    #: (:data:`DEMO_PRICE` in each pool without a list price yet), when the demo tokens are on.
    prices: tuple[UpPrice, ...] = ()
    #: The currency of those prices (ISO 4217).
    currency: str = "EUR"
    restart: RestartPolicy = field(default_factory=RestartPolicy)
    #: Prometheus metrics: each service but the API (which serves ``/metrics`` on its own
    #: port) gets a free port on ``metrics_host``, and ``<data_dir>/prometheus/`` names them
    #: all (``services.launcher.metrics_targets``). False: no metrics ports.
    metrics: bool = True
    metrics_host: str = "127.0.0.1"
    #: On a secured Kafka of its own: each principal's client settings (``principal -> file``,
    #: ``services.bus.principals``); each service runs as its own. Empty: a plain Kafka, or
    #: an external one every service reaches as ``--kafka-config`` says.
    kafka_identities: Mapping[str, Path] = field(default_factory=dict)
    #: Stopping waits this long for every service together, then kills what is left.
    stop_timeout_s: float = 15.0

    @property
    def pools(self) -> tuple[str, ...]:
        """The pools this stack's agents register (each agent's pool is its cluster's name)."""
        others = (self.slurm_cluster, self.kubernetes_cluster)
        return (self.cluster, *(name for name in others if name))

    @property
    def api_url(self) -> str:
        return f"http://{self.api_host}:{self.api_port}"
