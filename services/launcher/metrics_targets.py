"""Where Prometheus finds the services of ``fairshare up``: a port per child, and the files
that name them.

Ports are chosen by the kernel when the stack starts (bind to port 0), all held at once so no
two children get the same one, then released for the children to bind; a fixed range would
collide between two stacks or test sessions on one machine. A child keeps its port across its
restarts (its command line is kept), so a target never moves while the stack runs.

``<data-dir>/prometheus/targets.json`` is a file_sd list of targets, one per service, labelled
``service``; Prometheus rereads it when it changes, so a new ``fairshare up`` on the same data
dir is picked up without a reload. ``prometheus.yml`` beside it is a complete configuration
that scrapes them (``prometheus --config.file <data-dir>/prometheus/prometheus.yml``). Both are
written whole to a temporary name and renamed, so a reader never sees half of one.
"""

from __future__ import annotations

import json
import os
import socket
from collections.abc import Mapping
from contextlib import ExitStack
from pathlib import Path

#: Every service's metrics path (the API's too: it serves them on its own port).
METRICS_PATH = "/metrics"
#: The scrape interval of the ready-made configuration: Prometheus's usual.
SCRAPE_INTERVAL = "15s"


def free_ports(count: int, host: str = "127.0.0.1") -> list[int]:
    """``count`` distinct ports free on ``host`` now (there is a window before the children
    bind them; a child that loses it runs without metrics and says so in its log)."""
    with ExitStack() as held:
        ports = []
        for _ in range(count):
            sock = held.enter_context(socket.socket(socket.AF_INET, socket.SOCK_STREAM))
            sock.bind((host, 0))
            ports.append(int(sock.getsockname()[1]))
    return ports


def reachable(host: str) -> str:
    """The address to scrape a server listening on ``host`` at (a wildcard is not one)."""
    return "127.0.0.1" if host in ("0.0.0.0", "", "::", "[::]") else host


def target_groups(ports: Mapping[str, tuple[str, int]]) -> list[dict[str, object]]:
    """file_sd target groups: one per service, named by its ``service`` label."""
    return [
        {"targets": [f"{reachable(host)}:{port}"], "labels": {"service": name}}
        for name, (host, port) in ports.items()
    ]


def prometheus_config(targets_file: Path, job: str = "fairshare") -> str:
    """A whole Prometheus configuration scraping the services in ``targets_file`` (YAML; JSON
    is YAML, so no YAML writer is needed)."""
    config = {
        "global": {"scrape_interval": SCRAPE_INTERVAL, "evaluation_interval": SCRAPE_INTERVAL},
        "scrape_configs": [
            {
                "job_name": job,
                "metrics_path": METRICS_PATH,
                "file_sd_configs": [{"files": [str(targets_file.resolve())]}],
            }
        ],
    }
    return json.dumps(config, indent=2) + "\n"


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.tmp")
    temporary.write_text(text)
    os.replace(temporary, path)


def write_targets(directory: Path, ports: Mapping[str, tuple[str, int]]) -> Path:
    """Write ``targets.json`` and ``prometheus.yml`` into ``directory``; the targets file."""
    targets = directory / "targets.json"
    _write(targets, json.dumps(target_groups(ports), indent=2) + "\n")
    _write(directory / "prometheus.yml", prometheus_config(targets))
    return targets
