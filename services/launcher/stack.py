"""The running stack: its child services, started and stopped together, watched while the
workload stream runs."""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from services.launcher.children import (
    Child,
    child_for,
    service_commands,
    spawn_child,
    stop_child,
)
from services.launcher.config import UpConfig
from services.launcher.lab import seed_lab
from services.launcher.status import status_line
from services.launcher.stream import submit_stream


@dataclass
class Stack:
    config: UpConfig
    children: list[Child] = field(default_factory=list)
    submitted: int = 0
    refused: int = 0

    # -- start ---------------------------------------------------------------------------
    def start(self) -> None:
        from services.bus.admin import ensure_topics

        config = self.config
        ensure_topics(config.bootstrap, config.topics)
        seed_lab(config.bootstrap, config.topics)
        logs = config.data_dir / "logs"
        logs.mkdir(parents=True, exist_ok=True)
        for name, argv in service_commands(config, logs).items():
            child = child_for(name, argv, logs)
            self.spawn(child)
            self.children.append(child)

    def spawn(self, child: Child) -> None:
        spawn_child(child)

    def restart(self, name: str) -> None:
        """Stop a service and start it again (tests use this to show nothing is lost)."""
        child = self.child(name)
        stop_child(child)
        self.spawn(child)

    def child(self, name: str) -> Child:
        return next(c for c in self.children if c.name == name)

    def dead(self) -> list[str]:
        return [
            f"{c.name} (exit {c.process.returncode}; see {c.log_path})"
            for c in self.children
            if c.process is not None and c.process.poll() is not None
        ]

    def wait_for_api(self, timeout_s: float = 120.0) -> None:
        import httpx

        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            dead = self.dead()
            if dead:
                raise RuntimeError("a service stopped while starting: " + ", ".join(dead))
            try:
                if httpx.get(f"{self.config.api_url}/health", timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.5)
        raise RuntimeError(f"the API did not answer at {self.config.api_url} in {timeout_s:.0f} s")

    # -- the workload stream -------------------------------------------------------------
    def submit_stream(self, should_stop: Callable[[], bool]) -> None:
        submit_stream(self.config, should_stop, self)

    # -- stop ----------------------------------------------------------------------------
    def stop(self) -> list[str]:
        """Stop every service (newest first); the ones that did not exit cleanly."""
        unclean = []
        for child in reversed(self.children):
            code = stop_child(child)
            if code not in (0, -signal.SIGTERM):
                unclean.append(f"{child.name} (exit {code}; see {child.log_path})")
        return unclean


def run_stack(
    config: UpConfig, should_stop: Callable[[], bool], report: Callable[[str], None]
) -> tuple[Stack, list[str]]:
    """Start everything, stream workloads until ``should_stop``, stop everything; returns the
    stack and the problems (services that died or did not stop cleanly)."""
    stack = Stack(config)
    problems: list[str] = []
    halt = threading.Event()
    stack.start()
    stream: threading.Thread | None = None
    try:
        stack.wait_for_api()
        report(f"dashboard {config.api_url}/dashboard?token=admin-token")
        report(f"API      {config.api_url}  (OpenAPI: {config.api_url}/docs)")
        report(f"logs     {config.data_dir / 'logs'}")
        report("tokens   admin-token, ana-token, bo-token, chen-token (demo only)")
        if config.submit_every_s:
            stream = threading.Thread(
                target=stack.submit_stream,
                args=(lambda: halt.is_set() or should_stop(),),
                daemon=True,
            )
            stream.start()
        next_status = time.monotonic() + 10
        while not should_stop():
            dead = stack.dead()
            if dead:
                problems += [f"stopped unexpectedly: {d}" for d in dead]
                break
            if time.monotonic() >= next_status:
                report(f"workloads: {status_line(config.api_url)}")
                next_status = time.monotonic() + 10
            time.sleep(0.2)
    finally:
        halt.set()
        if stream is not None:
            stream.join(timeout=10)
        problems += [f"did not stop cleanly: {u}" for u in stack.stop()]
    return stack, problems
