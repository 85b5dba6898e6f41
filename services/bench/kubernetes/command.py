"""The ``fairshare bench kubernetes`` command (registered by ``services.bench.cli``).

Only the standard library and Typer are imported at the top, as in ``services.bench.cli``:
assembling ``fairshare``'s command line must stay cheap; the benchmark is imported when the
command runs."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

#: ``.ci/start-kubernetes``'s admin kubeconfig (``objects.ADMIN_KUBECONFIG``, not imported:
#: that module imports the Kubernetes client).
_ADMIN_KUBECONFIG = Path("/var/lib/fairshare-k8s/admin.kubeconfig")


def bench_kubernetes(
    kubeconfig: Annotated[
        Path,
        typer.Option(
            envvar="FAIRSHARE_KUBECONFIG",
            help="kubeconfig of the cluster's admin (bash .ci/start-kubernetes writes this one)",
        ),
    ] = _ADMIN_KUBECONFIG,
    jobs: Annotated[int, typer.Option(min=1, help="Jobs created")] = 100,
    pods_per_job: Annotated[int, typer.Option(min=1, help="one-GPU pods per Job (one gang)")] = 10,
    nodes: Annotated[int, typer.Option(min=1, help="KWOK nodes")] = 100,
    gpus_per_node: Annotated[int, typer.Option(min=1, help="GPUs per node")] = 10,
    timeout: Annotated[
        float,
        typer.Option("--timeout-s", min=1.0, help="seconds every pod may take to be bound"),
    ] = 300.0,
    kafka: Annotated[
        str | None,
        typer.Option(
            "--kafka",
            envvar="FAIRSHARE_KAFKA_BOOTSTRAP",
            help="an external Kafka (topics of a fresh prefix); default: an embedded Apache Kafka",
        ),
    ] = None,
    data_dir: Annotated[
        Path | None,
        typer.Option(help="keep the run here (services' logs, broker data) instead of a tmp dir"),
    ] = None,
    json_out: Annotated[
        Path | None, typer.Option("--json-out", help="also write the JSON object to this file")
    ] = None,
) -> None:
    """Native Jobs bound by Fairshare on a real Kubernetes (KWOK nodes): pods bound per second
    against the API server's own pod-creation rate measured in the same run (target: ratio >=
    0.9), and submit-to-bound p50/p99/max. A table on stderr, one JSON object on stdout; exit
    1 when not every pod was bound, 2 when the run could not be made."""
    import signal

    from services.bench.kubernetes.bench import KubernetesBenchConfig, kubernetes_benchmark
    from services.bench.kubernetes.figures import result_table
    from services.bench.kubernetes.progress import load_progress
    from services.runtime.cli_options import err_console

    config = KubernetesBenchConfig(
        kubeconfig=kubeconfig, jobs=jobs, pods_per_job=pods_per_job, nodes=nodes,
        gpus_per_node=gpus_per_node, timeout_s=timeout,
    )  # fmt: skip
    # a SIGTERM removes what the run made, as Ctrl-C does (namespace, nodes, services, broker)
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    try:
        with load_progress(err_console) as progress:
            result = kubernetes_benchmark(
                config,
                kafka,
                data_dir,
                report=lambda line: err_console.print(line, markup=False),
                progress=progress,
            )
    except (ValueError, RuntimeError) as error:
        err_console.print(f"bench kubernetes: {error}", markup=False)
        raise typer.Exit(2) from None
    err_console.print(result_table(result))
    _emit(result, json_out)
    if not result["complete"]:
        raise typer.Exit(1)


def _emit(result: dict[str, Any], json_out: Path | None) -> None:
    """One JSON line on stdout (machines read it), and the file when asked."""
    import orjson

    typer.echo(orjson.dumps(result).decode())
    if json_out is not None:
        json_out.parent.mkdir(parents=True, exist_ok=True)
        json_out.write_bytes(orjson.dumps(result, option=orjson.OPT_INDENT_2) + b"\n")
