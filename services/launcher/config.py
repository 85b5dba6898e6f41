"""What ``fairshare up`` starts, in one frozen value (the command line fills it in)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from events import Topics


@dataclass(frozen=True)
class UpConfig:
    bootstrap: str
    topics: Topics
    data_dir: Path
    database_url: str
    api_host: str = "127.0.0.1"
    api_port: int = 8000
    agent: str = "simulated"
    cluster: str = "demo"
    nodes: int = 4
    gpus_per_node: int = 4
    heartbeat_s: float = 5.0
    #: A node silent this long is declared down by the scheduler.
    heartbeat_timeout_s: float = 30.0
    scheduler_tick_s: float = 2.0
    grace_period_s: int = 10
    #: Mean seconds between synthetic submissions (0: none).
    submit_every_s: float = 4.0
    #: The stream pauses while this many workloads are pending, so a demo left running keeps
    #: a steady queue (demand above capacity, as in docs/design.md section 6) instead of an
    #: ever-growing one.
    max_pending: int = 30
    seed: int = 7

    @property
    def api_url(self) -> str:
        return f"http://{self.api_host}:{self.api_port}"
