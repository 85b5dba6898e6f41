"""What ``fairshare bench kubernetes`` does once its options are read (``services.bench.cli``
declares them): the run with its progress bars, the table, the JSON, the exit code."""

from __future__ import annotations

import signal
import threading
from pathlib import Path
from typing import Any

import orjson
import typer

from services.bench.kubernetes.bench import KubernetesBenchConfig, kubernetes_benchmark
from services.bench.kubernetes.figures import result_table
from services.bench.kubernetes.progress import load_progress


def run_command(
    config: KubernetesBenchConfig, kafka: str | None, data_dir: Path | None, json_out: Path | None
) -> None:
    """Progress and the table on stderr, one JSON line on stdout (and ``json_out``); exit 1
    when not every pod was bound, 2 when the run could not be made."""
    from services.runtime.cli_options import err_console

    # a SIGTERM removes what the run made, as Ctrl-C does (namespace, nodes, services, broker)
    main = threading.current_thread() is threading.main_thread()
    before = signal.signal(signal.SIGTERM, signal.default_int_handler) if main else None
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
    finally:
        if main:
            signal.signal(signal.SIGTERM, before)
    err_console.print(result_table(result))
    _emit(result, json_out)
    if not result["complete"]:
        raise typer.Exit(1)


def _emit(result: dict[str, Any], json_out: Path | None) -> None:
    typer.echo(orjson.dumps(result).decode())
    if json_out is not None:
        json_out.parent.mkdir(parents=True, exist_ok=True)
        json_out.write_bytes(orjson.dumps(result, option=orjson.OPT_INDENT_2) + b"\n")
