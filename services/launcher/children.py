"""The services as child processes: each in its own session, so a Ctrl-C meant for
``fairshare up`` reaches them only through :func:`stop_child` (SIGTERM, then SIGKILL), in the
order the stack chooses; their output goes to one log file each."""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from services.launcher.config import UpConfig

# one logger for the whole launcher, under the name it always had
log = logging.getLogger("services.launcher")


@dataclass
class Child:
    name: str
    argv: list[str]
    log_path: Path
    process: subprocess.Popen[bytes] | None = None


def service_commands(config: UpConfig, logs: Path) -> dict[str, list[str]]:
    """The ``fairshare`` arguments of each service: the commands an operator would run."""
    common = ["--kafka", config.bootstrap, "--topic-prefix", config.topics.prefix]
    agent = ["agent", config.agent, *common, "--cluster", config.cluster]
    if config.agent == "simulated":
        agent += ["--nodes", str(config.nodes), "--gpus-per-node", str(config.gpus_per_node)]
    else:
        agent += ["--virtual-gpus", str(config.gpus_per_node), "--log-dir", str(logs / "runs")]
    agent += ["--heartbeat-s", str(config.heartbeat_s)]
    return {
        "charging": ["charging", *common],
        "projector": ["projector", *common, "--database-url", config.database_url],
        "scheduler": [
            "scheduler",
            *common,
            "--heartbeat-timeout-s",
            str(config.heartbeat_timeout_s),
            "--tick-s",
            str(config.scheduler_tick_s),
            "--grace-period-s",
            str(config.grace_period_s),
        ],
        "agent": agent,
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
        ],
    }


def child_for(name: str, argv: list[str], logs: Path) -> Child:
    return Child(name, [sys.executable, "-m", "services.cli", *argv], logs / f"{name}.log")


def spawn_child(child: Child) -> None:
    handle = child.log_path.open("ab")
    env = {**os.environ, "FAIRSHARE_LOG_LEVEL": os.environ.get("FAIRSHARE_LOG_LEVEL", "INFO")}
    child.process = subprocess.Popen(
        child.argv, stdout=handle, stderr=subprocess.STDOUT, env=env, start_new_session=True
    )
    handle.close()
    log.info("started %s (pid %s)", child.name, child.process.pid)


def stop_child(child: Child, timeout_s: float = 15.0) -> int | None:
    process = child.process
    if process is None:
        return None
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout_s)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
    return process.returncode
