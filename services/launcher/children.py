"""The services as child processes of ``fairshare up``.

Each child runs in its own session (so its own process group): a Ctrl-C meant for ``fairshare
up`` reaches it only through :func:`stop_children`, which signals whole groups (what a service
started goes too) and force-kills what has not stopped in time. On Linux each child also asks
the kernel for SIGTERM when its parent dies (``PR_SET_PDEATHSIG``), so even a ``kill -9`` of
``fairshare up`` leaves no orphan; the child's own grace period (``FAIRSHARE_STOP_GRACE_S``,
set below the launcher's force-kill delay) bounds how long it takes. The kernel sends that
signal when the *thread* that started the child ends, so children are started from the
launcher's main loop, never from a short-lived thread. Their output goes to one log file each.
"""

from __future__ import annotations

import ctypes
import logging
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from services.bus.connection import KAFKA_CONFIG_ENV
from services.launcher.config import UpConfig
from services.launcher.metrics_targets import free_ports, write_targets

# one logger for the whole launcher, under the name it always had
log = logging.getLogger("services.launcher")

#: prctl(2) option: the signal a process receives when its parent (thread) dies.
PR_SET_PDEATHSIG = 1
#: Every child carries this in its environment, naming the ``fairshare up`` that started it
#: (operators and tests find a stack's processes by it).
UP_PID_ENV = "FAIRSHARE_UP_PID"
#: How often the supervisor has restarted the child: it reports the count in its metrics
#: (``fairshare_service_restarts_total``). Same name as ``services.metrics.endpoint``'s.
RESTARTS_ENV = "FAIRSHARE_SERVICE_RESTARTS"


@dataclass
class Child:
    name: str
    argv: list[str]
    log_path: Path
    process: subprocess.Popen[bytes] | None = None
    #: When the current process was started (monotonic seconds).
    started_at: float = 0.0
    #: Restarts after a death (a deliberate :meth:`Stack.restart` is not one).
    restarts: int = 0
    #: Deaths in a row, each after a short run: what the backoff grows with.
    failures: int = 0
    #: Recent deaths (monotonic seconds), to report a service that keeps dying.
    deaths: list[float] = field(default_factory=list)
    #: How the last death looked: exit code or signal, and the last line of the log.
    last_exit: str | None = None
    #: Set while dead: when the supervisor starts it again.
    restart_at: float | None = None
    #: More of its environment (its signing key: ``services.launcher.keys``).
    env: dict[str, str] = field(default_factory=dict)


def service_commands(config: UpConfig, logs: Path) -> dict[str, list[str]]:
    """The ``fairshare`` arguments of each service: the commands an operator would run. With
    ``config.metrics``, each gets a free metrics port, and the Prometheus targets are written
    to ``<data_dir>/prometheus/`` (see :func:`with_metrics_ports`). On a secured Kafka of its
    own each runs as its own principal (:func:`with_identities`)."""
    commands = with_identities(config, _commands(config, logs))
    return with_metrics_ports(config, commands) if config.metrics else commands


def principal_of(config: UpConfig, service: str) -> str:
    """The Kafka principal a service of the stack runs as (``services.bus.principals``)."""
    from services.bus.principals import Role, principal_name

    agents = {
        "agent": config.cluster,
        "agent-slurm": config.slurm_cluster,
        "agent-kubernetes": config.kubernetes_cluster,
    }
    if service in agents:
        return principal_name(Role.AGENT, agents[service])
    for role in (Role.SCHEDULER, Role.CHARGING, Role.PROJECTOR, Role.API):
        if service == role.value or service.startswith(f"{role.value}-"):
            return principal_name(role)
    raise ValueError(f"no Kafka principal for service {service!r}")


def with_identities(config: UpConfig, commands: dict[str, list[str]]) -> dict[str, list[str]]:
    """``--kafka-config`` of each service's own principal, after its ``--kafka``: a service
    holds only its own password, so one that is broken into forges only what its role may
    write. Nothing to add on a plain Kafka."""
    if not config.kafka_identities:
        return commands
    placed = {}
    for name, argv in commands.items():
        path = config.kafka_identities[principal_of(config, name)]
        at = argv.index("--kafka") + 2
        placed[name] = [*argv[:at], "--kafka-config", str(path), *argv[at:]]
    return placed


def with_metrics_ports(config: UpConfig, commands: dict[str, list[str]]) -> dict[str, list[str]]:
    """``--metrics-port`` (a free port each) and ``--metrics-host`` for every service but the
    API, placed before its first option; the targets file names them, and the API at its own
    port. Written here, once per start: this is where the ports are known."""
    own = [name for name in commands if name != "api"]
    host = config.metrics_host
    ports = dict(zip(own, free_ports(len(own), host), strict=True))
    placed = {}
    for name, argv in commands.items():
        if name in ports:
            first = next((i for i, word in enumerate(argv) if word.startswith("-")), len(argv))
            extra = ["--metrics-port", str(ports[name]), "--metrics-host", host]
            argv = [*argv[:first], *extra, *argv[first:]]
        placed[name] = argv
    targets = {name: (host, port) for name, port in ports.items()}
    if "api" in commands:
        targets["api"] = (config.api_host, config.api_port)
    path = write_targets(config.data_dir / "prometheus", targets)
    log.info("Prometheus targets in %s (a configuration beside it)", path)
    return placed


def _commands(config: UpConfig, logs: Path) -> dict[str, list[str]]:
    common = ["--kafka", config.bootstrap, "--topic-prefix", config.topics.prefix]
    agent = ["agent", config.agent, *common, "--cluster", config.cluster]
    if config.agent == "simulated":
        agent += ["--nodes", str(config.nodes), "--gpus-per-node", str(config.gpus_per_node)]
    else:
        agent += ["--virtual-gpus", str(config.gpus_per_node), "--log-dir", str(logs / "runs")]
    agent += ["--heartbeat-s", str(config.heartbeat_s)]
    scheduler = [
        "scheduler",
        *common,
        "--heartbeat-timeout-s",
        str(config.heartbeat_timeout_s),
        "--tick-s",
        str(config.scheduler_tick_s),
        "--grace-period-s",
        str(config.grace_period_s),
    ]
    # the first is named plainly; the standbys by their number (any of them may lead)
    count = max(1, config.schedulers)
    schedulers = {
        "scheduler" if n == 1 else f"scheduler-{n}": [
            *scheduler,
            *(scheduler_pools(config.pools, n - 1, count) if config.lease_per_pool else []),
        ]
        for n in range(1, count + 1)
    }
    slurm: dict[str, list[str]] = {}
    if config.slurm_cluster:
        slurm_agent = ["agent", "slurm", *common, "--cluster", config.slurm_cluster]
        slurm_agent += ["--heartbeat-s", str(config.heartbeat_s)]
        slurm_agent += ["--output-dir", str((logs / "slurm-runs").resolve())]
        if config.slurm_jobcomp_log is not None:
            slurm_agent += ["--jobcomp-log", str(config.slurm_jobcomp_log)]
        if config.slurm_partition is not None:
            slurm_agent += ["--partition", config.slurm_partition]
        slurm = {"agent-slurm": slurm_agent}
    kubernetes: dict[str, list[str]] = {}
    if config.kubernetes_cluster:
        kubernetes_agent = ["agent", "kubernetes", *common, "--cluster", config.kubernetes_cluster]
        kubernetes_agent += ["--heartbeat-s", str(config.heartbeat_s)]
        kubernetes_agent += ["--namespace", config.kubernetes_namespace]
        kubernetes_agent += ["--node-selector", config.kubernetes_node_selector]
        if config.kubeconfig is not None:
            kubernetes_agent += ["--kubeconfig", str(config.kubeconfig.resolve())]
        kubernetes = {"agent-kubernetes": kubernetes_agent}
    shards = config.charging_shards
    charging = (
        {"charging": ["charging", *common]}
        if shards <= 1
        else {
            f"charging-{n}": ["charging", *common, "--instance", str(n)]
            for n in range(1, shards + 1)
        }
    )
    return {
        **charging,
        "projector": ["projector", *common, "--database-url", config.database_url],
        **schedulers,
        "agent": agent,
        **slurm,
        **kubernetes,
        "api": [
            "api",
            "serve",
            *common,
            "--host",
            config.api_host,
            "--port",
            str(config.api_port),
            "--database-url",
            config.database_url,
            *(["--tokens", str(config.tokens_file)] if config.tokens_file else []),
        ],
    }


def scheduler_pools(pools: Sequence[str], index: int, count: int) -> list[str]:
    """The options of scheduler ``index`` of ``count`` with a lease per pool: it prefers every
    ``count``-th pool from its own index on (disjoint sets, none where pools run out), and
    adopts any other pool whose leader stays silent."""
    mine = list(pools)[index::count]
    return ["--lease-per-pool", *(["--pools", ",".join(mine)] if mine else [])]


def child_for(name: str, argv: list[str], logs: Path) -> Child:
    return Child(name, [sys.executable, "-m", "services.cli", *argv], logs / f"{name}.log")


def child_grace_s(stop_timeout_s: float) -> float:
    """A child's own stop deadline: well inside the launcher's, so it exits by itself (having
    said why) before it would be force-killed."""
    return max(1.0, min(10.0, stop_timeout_s * 2 / 3))


def _die_with_parent(parent: int) -> Callable[[], None] | None:
    """The ``preexec_fn`` that ties a child's life to ``parent`` (Linux only; elsewhere the
    children of a killed launcher must be stopped by hand). prctl is looked up here, before
    the fork, so the child only makes one call into libc."""
    if not sys.platform.startswith("linux"):
        return None
    prctl = ctypes.CDLL(None, use_errno=True).prctl

    def preexec() -> None:
        prctl(PR_SET_PDEATHSIG, int(signal.SIGTERM), 0, 0, 0)
        if os.getppid() != parent:  # the launcher died before the request was made
            os._exit(1)

    return preexec


def spawn_child(child: Child, stop_timeout_s: float = 15.0) -> None:
    handle = child.log_path.open("ab")
    env = {
        **os.environ,
        "FAIRSHARE_LOG_LEVEL": os.environ.get("FAIRSHARE_LOG_LEVEL", "INFO"),
        "FAIRSHARE_STOP_GRACE_S": f"{child_grace_s(stop_timeout_s):g}",
        UP_PID_ENV: str(os.getpid()),
        RESTARTS_ENV: str(child.restarts),
        **child.env,
    }
    if "--kafka-config" in child.argv:
        # its own principal, never the launcher's (the admin, on a secured Kafka of its own)
        env[KAFKA_CONFIG_ENV] = child.argv[child.argv.index("--kafka-config") + 1]
    child.process = subprocess.Popen(
        child.argv,
        stdout=handle,
        stderr=subprocess.STDOUT,
        env=env,
        start_new_session=True,
        preexec_fn=_die_with_parent(os.getpid()),
    )
    handle.close()
    child.started_at = time.monotonic()
    log.info("started %s (pid %s)", child.name, child.process.pid)


def describe_exit(code: int | None) -> str:
    if code is None:
        return "running"
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit {code}"


def last_log_line(path: Path, limit: int = 200) -> str:
    """The last non-empty line of a child's log (usually the one that says why it ended)."""
    try:
        with path.open("rb") as handle:
            handle.seek(max(0, path.stat().st_size - 8192))
            tail = handle.read().decode(errors="replace")
    except OSError:
        return ""
    lines = [line.strip() for line in tail.splitlines() if line.strip()]
    last = lines[-1] if lines else ""
    return last if len(last) <= limit else last[: limit - 3] + "..."


def _signal_group(process: subprocess.Popen[bytes], sig: signal.Signals) -> None:
    """Signal the child's whole process group (its pid: it leads its own session)."""
    try:
        os.killpg(process.pid, sig)
    except (ProcessLookupError, PermissionError):
        if process.poll() is None:
            process.send_signal(sig)


def stop_children(children: Iterable[Child], timeout_s: float = 15.0) -> list[Child]:
    """SIGTERM every running child at once, wait up to ``timeout_s`` for all of them together,
    then SIGKILL the groups of those still running; returns the ones that had to be killed."""
    running = [c for c in children if c.process is not None and c.process.poll() is None]
    for child in running:
        assert child.process is not None
        _signal_group(child.process, signal.SIGTERM)
    deadline = time.monotonic() + timeout_s
    killed = []
    for child in running:
        assert child.process is not None
        try:
            child.process.wait(max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            killed.append(child)
    for child in killed:
        assert child.process is not None
        _signal_group(child.process, signal.SIGKILL)
        child.process.wait()
        log.warning("killed %s: it did not stop within %g s", child.name, timeout_s)
    return killed


def stop_child(child: Child, timeout_s: float = 15.0) -> int | None:
    """Stop one child (SIGTERM, then SIGKILL after ``timeout_s``); its exit code."""
    if child.process is None:
        return None
    stop_children([child], timeout_s)
    return child.process.returncode
