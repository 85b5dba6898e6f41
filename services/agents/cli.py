"""``fairshare agent simulated | local | slurm | kubernetes``: run a cluster agent against a Kafka.

Wired into the main command as ``app.add_typer(agent_app, name="agent")``. Ctrl-C or SIGTERM
finish the current round and stop cleanly (the local agent stops its processes: a restarted
agent reports them lost, and the scheduler requeues the resumable ones; the Slurm agent leaves
its jobs to Slurm, and a restarted one adopts them).

The options every agent takes (Kafka, the cluster and its pool, the cadences, checkpoints,
metrics) are declared once, by :func:`_shared_options`; :func:`agent_command` gives them to each
command, before its family's own, as one :class:`Shared`. Each command only builds its family's
adapter from its own options and hands it to :func:`_serve`, with the loop that drives it.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Console

from services.runtime.cli_options import (
    CheckpointEveryOption,
    KafkaConfigOption,
    KafkaOption,
    MetricsHostOption,
    MetricsPortOption,
    PrefixOption,
    bootstrap_or_exit,
)

if TYPE_CHECKING:
    from services.agents.adapter import ClusterAdapter
    from services.agents.agent import AgentSettings
    from services.agents.host import AgentLoop
    from services.agents.run_as import RunAs
    from services.agents.slurm.adapter import NativeOptions

agent_app = typer.Typer(
    no_args_is_help=True,
    add_completion=False,
    help="Cluster agents: run the scheduler's commands on a cluster, report starts, ends, "
    "liveness and heartbeats.",
)

console = Console(stderr=True, soft_wrap=True)


class ForeignGpuPolicy(StrEnum):
    """What the Kubernetes agent does with other schedulers' pods holding GPUs on its nodes."""

    TOLERATE = "tolerate"
    EVICT = "evict"


ClusterOption = Annotated[str, typer.Option("--cluster", help="this cluster's name")]
PoolOption = Annotated[
    str | None, typer.Option("--pool", help="pool of the nodes (default: the cluster's name)")
]
HeartbeatOption = Annotated[
    float,
    typer.Option(
        "--heartbeat-s",
        min=0.1,
        help="seconds between liveness signals per node (the scheduler's down detection)",
    ),
]
ConfirmOption = Annotated[
    float,
    typer.Option(
        "--confirm-s",
        envvar="FAIRSHARE_AGENT_CONFIRM_S",
        min=1.0,
        help="seconds between the durable heartbeats per node that confirm occupancy for "
        "charging (also sent at once when a node's occupants change)",
    ),
]
# options of several families (local and Slurm; Slurm and Kubernetes)
RunAsOption = Annotated[
    list[str] | None,
    typer.Option(
        "--run-as",
        metavar="SUBMITTER=USER,...",
        help="run each submitter's work as that unix user (local: its commands; Slurm: "
        "sbatch --uid) (repeatable; needs root; root itself is refused); a submitter without "
        "one is refused",
    ),
]
RunAsFileOption = Annotated[
    Path | None,
    typer.Option(
        "--run-as-file",
        metavar="FILE",
        help="SUBMITTER=USER per line (# comments), as --run-as",
    ),
]
#: Native work of the Slurm agent (docs/agents.md, "Slurm users").
NativeOption = Annotated[
    bool,
    typer.Option(
        "--native/--no-native",
        help="take the jobs users sbatch to Fairshare's partitions (held by "
        "deploy/slurm/job_submit.lua) as Fairshare work",
    ),
]
NativePartitionOption = Annotated[
    list[str] | None,
    typer.Option(
        "--native-partition",
        help="Fairshare's partition whose sbatch jobs are native work (repeatable; "
        "default: --partition)",
    ),
]
DEFAULT_BINDINGS_FILE = Path("/etc/slurm/fairshare-bindings")
BindingsFileOption = Annotated[
    Path | None,
    typer.Option(
        "--bindings-file", help="the file the job_submit plugin reads (accounts and their budgets)"
    ),
]
AgentUidOption = Annotated[
    list[int] | None,
    typer.Option(
        "--agent-uid",
        help="uids that submit the agent's own runs (repeatable; default: this agent's)",
    ),
]
TrustAssociationsOption = Annotated[
    bool,
    typer.Option(
        "--trust-slurm-associations",
        help="Slurm checks that a user may use an account (AccountingStorageEnforce="
        "associations); without it Fairshare checks the user against the budget's members",
    ),
]
PendingTimeoutOption = Annotated[
    float,
    typer.Option(
        "--pending-timeout-s",
        min=0,
        help="cancel (and fail) a run the cluster keeps pending this long (a Slurm job, a "
        "run's pods); 0: never",
    ),
]


@dataclass(frozen=True)
class Shared:
    """The options every ``fairshare agent`` command takes."""

    kafka: str | None
    kafka_config: Path | None
    topic_prefix: str
    cluster: str
    pool: str | None
    heartbeat_s: float
    confirm_s: float
    checkpoint_every_s: float
    metrics_port: int
    metrics_host: str

    def settings(self, default_pool: str | None = None) -> AgentSettings:
        """The agent's settings: its nodes in ``--pool``, else ``default_pool``, else the
        pool named as the cluster."""
        from services.agents.agent import AgentSettings

        return AgentSettings(
            cluster=self.cluster,
            pool=self.pool or default_pool or self.cluster,
            heartbeat_s=self.heartbeat_s,
            confirm_s=self.confirm_s,
        )


def _shared_options(
    kafka: KafkaOption = None,
    kafka_config: KafkaConfigOption = None,
    topic_prefix: PrefixOption = "fairshare.",
    cluster: ClusterOption = "",  # each command's own default: agent_command(cluster=...)
    pool: PoolOption = None,
    heartbeat_s: HeartbeatOption = 10.0,
    confirm_s: ConfirmOption = 300.0,
    checkpoint_every_s: CheckpointEveryOption = 300.0,
    metrics_port: MetricsPortOption = 0,
    metrics_host: MetricsHostOption = "127.0.0.1",
) -> Shared:
    """The shared options, declared once: :func:`agent_command` puts these parameters before
    each command's own."""
    return Shared(
        kafka,
        kafka_config,
        topic_prefix,
        cluster,
        pool,
        heartbeat_s,
        confirm_s,
        checkpoint_every_s,
        metrics_port,
        metrics_host,
    )


def agent_command(cluster: str) -> Callable[[Callable[..., None]], Callable[..., None]]:
    """Register a ``fairshare agent`` command: ``command(shared, **own)`` takes the shared
    options as one :class:`Shared` (``--cluster`` defaulting to ``cluster``), then its own.

    Typer reads a command's options from its signature: the command it is given takes the
    parameters of :func:`_shared_options`, then those of ``command`` after ``shared``."""

    def register(command: Callable[..., None]) -> Callable[..., None]:
        shared = [
            p.replace(default=cluster) if p.name == "cluster" else p
            for p in inspect.signature(_shared_options, eval_str=True).parameters.values()
        ]
        own = list(inspect.signature(command, eval_str=True).parameters.values())[1:]
        names = [p.name for p in shared]

        @functools.wraps(command)
        def run(**options: Any) -> None:
            command(_shared_options(**{name: options.pop(name) for name in names}), **options)

        parameters = [*shared, *own]
        run.__signature__ = inspect.Signature(parameters)  # type: ignore[attr-defined]
        run.__annotations__ = {p.name: p.annotation for p in parameters} | {"return": None}
        agent_app.command()(run)
        return command

    return register


def _serve_metrics(port: int, host: str) -> None:
    """``/metrics`` of the agent (port 0: none); before ``_serve``, which tests replace."""
    from services.metrics.endpoint import serve_metrics

    serve_metrics(port, host)


def _serve(
    adapter: ClusterAdapter,
    shared: Shared,
    settings: AgentSettings,
    loop: AgentLoop[Any] | None = None,
) -> None:
    """Run the agent of ``adapter`` (``loop`` driving it; None: the generic loop) until Ctrl-C
    or SIGTERM."""
    from events import Topics
    from services.agents.agent import ClusterAgent
    from services.agents.serve import serve_agent
    from services.runtime.signals import stop_requested_on_signals

    topics = Topics(prefix=shared.topic_prefix)
    bootstrap = bootstrap_or_exit(shared.kafka, topics)
    nodes = ", ".join(f"{n.name} ({n.gpus} x {n.gpu_type})" for n in adapter.nodes())
    console.print(
        f"agent of cluster {settings.cluster} (pool {settings.pool}) on {bootstrap}: {nodes}; "
        "Ctrl-C stops",
        markup=False,
    )
    with stop_requested_on_signals() as stop:
        agent = serve_agent(
            adapter,
            settings,
            bootstrap,
            topics,
            stop,
            loop=loop or ClusterAgent,
            checkpoint_every_s=shared.checkpoint_every_s or None,
        )
    summary = ", ".join(f"{k} {v}" for k, v in sorted(agent.published.items())) or "nothing"
    console.print(f"stopped; published {summary}")


@agent_command(cluster="sim")
def simulated(
    shared: Shared,
    nodes: Annotated[int, typer.Option("--nodes", min=1, help="number of nodes")] = 4,
    gpus_per_node: Annotated[int, typer.Option("--gpus-per-node", min=1)] = 8,
    gpu_type: Annotated[str, typer.Option("--gpu-type")] = "sim",
    pools: Annotated[
        str,
        typer.Option(
            "--pools",
            help="pools of the nodes, comma-separated: the nodes are dealt out over them in "
            "turn (instead of --pool)",
        ),
    ] = "",
    topology: Annotated[
        str,
        typer.Option(
            "--topology",
            help="BLOCK_NODES[:RACK_NODES]: consecutive nodes per block (and rack); none: off",
        ),
    ] = "none",
) -> None:
    """A simulated cluster: runs each workload for its spec's duration_s (no duration: until
    preempted or cancelled)."""
    from services.agents.simulated import SimulatedAdapter, simulated_nodes
    from services.agents.topology import parse_grid

    several = [name.strip() for name in pools.split(",") if name.strip()]
    if several and shared.pool is not None:
        console.print("[red]--pools:[/] not with --pool")
        raise typer.Exit(2)
    if len(several) > nodes:
        console.print("[red]--pools:[/] more pools than --nodes")
        raise typer.Exit(2)
    try:
        grid = parse_grid(topology)
    except ValueError as error:
        console.print(f"[red]{error}[/]")
        raise typer.Exit(2) from error
    specs = simulated_nodes(
        shared.cluster, nodes, gpus_per_node, gpu_type, pools=several, topology=grid
    )
    adapter = SimulatedAdapter(specs)
    _serve_metrics(shared.metrics_port, shared.metrics_host)
    _serve(adapter, shared, shared.settings(several[0] if several else None))


@agent_command(cluster="local")
def local(
    shared: Shared,
    node: Annotated[
        str | None, typer.Option("--node", help="node name (default: this host's name)")
    ] = None,
    gpu_type: Annotated[
        str | None, typer.Option("--gpu-type", help="default: NVML's name, or 'virtual'")
    ] = None,
    virtual_gpus: Annotated[
        int, typer.Option("--virtual-gpus", min=1, help="GPU slots when NVML finds no GPU")
    ] = 1,
    log_dir: Annotated[
        Path,
        typer.Option(
            "--log-dir", help="where each run's output goes: <label>/attempt-<N>.log under it"
        ),
    ] = Path(".fairshare/agent-logs"),
    run_as: RunAsOption = None,
    run_as_file: RunAsFileOption = None,
) -> None:
    """This machine: really runs each workload's spec command with CUDA_VISIBLE_DEVICES set,
    GPU readings from NVML (or virtual GPU slots without a driver)."""
    from services.agents.local import LocalAdapter

    mapping = _run_as_or_exit(run_as or [], run_as_file)
    adapter = LocalAdapter(
        node, virtual_gpus=virtual_gpus, gpu_type=gpu_type, log_dir=log_dir, run_as=mapping
    )
    if adapter.virtual:
        console.print(f"no NVML GPU found: {virtual_gpus} virtual GPU slot(s)")
    if mapping is None:
        console.print("commands run as this agent's user, with its environment (no --run-as)")
    else:
        users = ", ".join(f"{s} as {u}" for s, u in mapping.submitters.items())
        console.print(f"commands run as their submitter's unix user: {users}", markup=False)
    _serve_metrics(shared.metrics_port, shared.metrics_host)
    _serve(adapter, shared, shared.settings())


@agent_command(cluster="slurm")
def slurm(
    shared: Shared,
    partition: Annotated[
        str | None,
        typer.Option("--partition", help="Slurm partition: its nodes, and where jobs go"),
    ] = None,
    gpu_type: Annotated[
        str | None, typer.Option("--gpu-type", help="default: the GRES type, or 'gpu'")
    ] = None,
    drain_in_slurm: Annotated[
        bool,
        typer.Option(
            "--drain-in-slurm",
            help="drain in Slurm the nodes cordoned in Fairshare (resume them on uncordon)",
        ),
    ] = False,
    output_dir: Annotated[
        str | None,
        typer.Option(
            "--output-dir",
            help="directory on the nodes for the jobs' output (default: Slurm's slurm-%j.out)",
        ),
    ] = None,
    sbatch_option: Annotated[
        list[str] | None,
        typer.Option(
            "--sbatch-option",
            metavar="OPTION",
            help="an sbatch option for every job, e.g. --sbatch-option=--account=lab "
            "(repeatable; the agent's own pinning wins)",
        ),
    ] = None,
    jobcomp_log: Annotated[
        Path | None,
        typer.Option(
            "--jobcomp-log",
            help="Slurm's jobcomp/filetxt log: exit codes of jobs no longer in squeue",
        ),
    ] = None,
    pending_timeout_s: PendingTimeoutOption = 600.0,
    refresh_s: Annotated[
        float, typer.Option("--refresh-s", min=0.1, help="seconds between reads of Slurm")
    ] = 1.0,
    run_as: RunAsOption = None,
    run_as_file: RunAsFileOption = None,
    native: NativeOption = True,
    native_partition: NativePartitionOption = None,
    bindings_file: BindingsFileOption = DEFAULT_BINDINGS_FILE,
    agent_uid: AgentUidOption = None,
    trust_slurm_associations: TrustAssociationsOption = False,
) -> None:
    """A Slurm cluster: each placement becomes an sbatch job pinned to its nodes and GPU
    count; jobs users sbatch to Fairshare's partition are taken as they are (held, pinned and
    released, requeued and held); starts, ends, drains and GPU use are read from Slurm (see
    docs/agents.md)."""
    from services.agents.slurm import SlurmAdapter, SlurmAgent
    from services.agents.slurm.commands import SlurmCli, SlurmError
    from services.agents.slurm.submit import SubmitOptions

    partitions = tuple(native_partition or ([partition] if partition else []))
    native_options = _native_options(
        native, partitions, bindings_file, agent_uid, trust_slurm_associations
    )

    mapping = _run_as_or_exit(run_as or [], run_as_file)
    options = SubmitOptions(
        partition=partition, output_dir=output_dir, extra=tuple(sbatch_option or ())
    )
    try:
        adapter = SlurmAdapter(
            SlurmCli(jobcomp_log=jobcomp_log),
            cluster=shared.cluster,
            partition=partition,
            gpu_type=gpu_type,
            submit_options=options,
            run_as=mapping,
            refresh_s=refresh_s,
            pending_timeout_s=pending_timeout_s,
            drain_in_slurm=drain_in_slurm,
            native=native_options,
        )
    except SlurmError as error:
        console.print(f"refusing to start: Slurm: {error}", markup=False)
        raise typer.Exit(2) from error
    if mapping is None:
        console.print("jobs run as this agent's user (no --run-as)")
    _serve_metrics(shared.metrics_port, shared.metrics_host)
    _serve(adapter, shared, shared.settings(), SlurmAgent)


def _native_options(
    native: bool,
    partitions: tuple[str, ...],
    bindings_file: Path | None,
    agent_uid: list[int] | None,
    trust_slurm_associations: bool,
) -> NativeOptions | None:
    """The Slurm agent's native work, or None (off, or no partition to take it from)."""
    import os

    from services.agents.slurm.adapter import NativeOptions

    if not native:
        return None
    if not partitions:
        console.print(
            "no native work: it needs Fairshare's partition (--partition or --native-partition)",
            markup=False,
        )
        return None
    return NativeOptions(
        partitions=partitions,
        bindings_file=bindings_file,
        agent_uids=tuple(agent_uid or [os.getuid()]),
        check_members=not trust_slurm_associations,
    )


def _run_as_or_exit(texts: list[str], path: Path | None) -> RunAs | None:
    """The resolved ``--run-as`` mapping, None without one; exit 2 (before touching Kafka) on
    a mapping the agent refuses: a typo, an unknown user, root, or no privilege to switch."""
    import os

    from services.agents.run_as import RunAs, RunAsError, parse_pairs, read_pairs

    if not texts and path is None:
        return None
    try:
        pairs = [pair for text in texts for pair in parse_pairs(text)]
        if path is not None:
            pairs += read_pairs(path)
        mapping = RunAs.resolve(pairs)
    except RunAsError as error:
        console.print(f"refusing to start: {error}", markup=False)
        raise typer.Exit(2) from error
    if os.geteuid() != 0:
        console.print("refusing to start: --run-as needs root (to switch users)")
        raise typer.Exit(2)
    return mapping


@agent_command(cluster="kubernetes")
def kubernetes(
    shared: Shared,
    kubeconfig: Annotated[
        Path | None,
        typer.Option(
            "--kubeconfig",
            envvar="FAIRSHARE_KUBECONFIG",
            help="kubeconfig of the agent's account (default: the pod's in-cluster account)",
        ),
    ] = None,
    namespace: Annotated[
        str, typer.Option("--namespace", help="the namespace the runs' pods are created in")
    ] = "fairshare-runs",
    node_selector: Annotated[
        str,
        typer.Option(
            "--node-selector",
            help="label selector of the nodes this agent offers ('' for every node with GPUs)",
        ),
    ] = "",
    gpu_resource: Annotated[
        str, typer.Option("--gpu-resource", help="the extended resource of a GPU")
    ] = "nvidia.com/gpu",
    image: Annotated[
        str, typer.Option("--image", help="the container image when a spec names none")
    ] = "busybox:1.36",
    cordon_in_kubernetes: Annotated[
        bool,
        typer.Option(
            "--cordon-in-kubernetes",
            help="make unschedulable in Kubernetes the nodes cordoned in Fairshare "
            "(schedulable again on uncordon)",
        ),
    ] = False,
    foreign_gpu_policy: Annotated[
        ForeignGpuPolicy,
        typer.Option(
            "--foreign-gpu-policy",
            help="pods of other schedulers holding GPUs on the agent's nodes: 'tolerate' "
            "(reported, placed around) or 'evict' (deleted after --foreign-grace-s; needs the "
            "optional rule of deploy/kubernetes/agent.yaml)",
        ),
    ] = ForeignGpuPolicy.TOLERATE,
    foreign_grace_s: Annotated[
        float,
        typer.Option(
            "--foreign-grace-s",
            min=0.0,
            help="under --foreign-gpu-policy evict: how long such a pod may hold GPUs first",
        ),
    ] = 300.0,
    scheduler_name: Annotated[
        str,
        typer.Option(
            "--scheduler-name",
            help="pods whose spec.schedulerName is this are Fairshare's to place (native Jobs "
            "and pods of every namespace, charged to the budget their namespace is bound to); "
            "'' takes none (then the agent needs no rights on Jobs, bindings or Events)",
        ),
    ] = "fairshare",
    pending_timeout_s: PendingTimeoutOption = 600.0,
    api_timeout_s: Annotated[
        float,
        typer.Option(
            "--api-timeout-s",
            min=1.0,
            help="exit non-zero when the API server has not answered for this long",
        ),
    ] = 30.0,
) -> None:
    """A Kubernetes cluster: each placement becomes one pod per node, bound to it, asking its
    GPUs; Jobs and pods applied with schedulerName fairshare are taken as they are (submitted,
    bound, suspended to preempt); starts, ends, cordons and foreign pods are read from watches
    (see docs/agents.md)."""
    from services.agents.kubernetes import KubernetesAdapter, KubernetesAgent, KubernetesError
    from services.agents.kubernetes.adapter import kubernetes_client
    from services.agents.kubernetes.pods import PodOptions

    try:
        adapter = KubernetesAdapter(
            kubernetes_client(str(kubeconfig) if kubeconfig else None),
            PodOptions(shared.cluster, namespace, gpu_resource, image),
            node_selector=node_selector,
            cordon_in_kubernetes=cordon_in_kubernetes,
            foreign_gpu_policy="evict"
            if foreign_gpu_policy is ForeignGpuPolicy.EVICT
            else "tolerate",
            foreign_grace_s=foreign_grace_s,
            scheduler_name=scheduler_name,
            pending_timeout_s=pending_timeout_s,
            api_timeout_s=api_timeout_s,
        )
    except Exception as error:  # KubernetesError; a kubeconfig that cannot be read, no account
        console.print(f"refusing to start: Kubernetes: {error}", markup=False)
        raise typer.Exit(2) from error
    try:
        _serve_metrics(shared.metrics_port, shared.metrics_host)
        _serve(adapter, shared, shared.settings(), KubernetesAgent)
    except KubernetesError as error:
        console.print(f"stopping: Kubernetes: {error}", markup=False)
        raise typer.Exit(3) from error
