"""``fairshare up``: the whole system on one machine, each service its own process.

The services are the same commands an operator runs one by one (``fairshare charging``,
``projector``, ``scheduler``, ``agent simulated|local``, ``api serve``), started as child
processes with their logs under ``<data dir>/logs/``; only the broker is shared. So what the demo
shows is what a deployment does, and a test can kill one service and watch the others cope.

The lab (budgets, members) is written once, on the first start against an empty log; a steady
synthetic stream of workloads then goes in through the API, as users would submit them.
"""

from __future__ import annotations

import logging
import os
import random
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from events import TopicKind, Topics, new_event
from events.envelope import derived_event_id
from events.models import BudgetCreated, EventData, MembershipGranted
from services.bus.admin import ensure_topics
from services.bus.export import read_to_end
from services.bus.kafka import KafkaEventPublisher

log = logging.getLogger(__name__)

#: The demo lab: (budget, weight) and (user, budget, role); tokens are the API's demo tokens.
LAB_BUDGETS = (("lab", 1.0), ("lab/vision", 2.0), ("lab/robotics", 1.0), ("lab/nlp", 1.0))
LAB_MEMBERS = (
    ("ana", "lab/vision", "member"),
    ("bo", "lab/robotics", "member"),
    ("chen", "lab/nlp", "member"),
    ("chen", "lab", "manager"),
)
USERS = {"ana": ("ana-token", "lab/vision"), "bo": ("bo-token", "lab/robotics"),
         "chen": ("chen-token", "lab/nlp")}  # fmt: skip


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
    #: a steady queue (demand above capacity, as in DESIGN.md section 5) instead of an
    #: ever-growing one.
    max_pending: int = 30
    seed: int = 7

    @property
    def api_url(self) -> str:
        return f"http://{self.api_host}:{self.api_port}"


@dataclass
class Child:
    name: str
    argv: list[str]
    log_path: Path
    process: subprocess.Popen[bytes] | None = None


@dataclass
class Stack:
    config: UpConfig
    children: list[Child] = field(default_factory=list)
    submitted: int = 0
    refused: int = 0

    # -- start ---------------------------------------------------------------------------
    def start(self) -> None:
        config = self.config
        ensure_topics(config.bootstrap, config.topics)
        seed_lab(config.bootstrap, config.topics)
        logs = config.data_dir / "logs"
        logs.mkdir(parents=True, exist_ok=True)
        common = ["--kafka", config.bootstrap, "--topic-prefix", config.topics.prefix]
        agent = ["agent", config.agent, *common, "--cluster", config.cluster]
        if config.agent == "simulated":
            agent += ["--nodes", str(config.nodes), "--gpus-per-node", str(config.gpus_per_node)]
        else:
            agent += ["--virtual-gpus", str(config.gpus_per_node), "--log-dir", str(logs / "runs")]
        agent += ["--heartbeat-s", str(config.heartbeat_s)]
        services = {
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
        for name, argv in services.items():
            child = Child(name, [sys.executable, "-m", "services.cli", *argv], logs / f"{name}.log")
            self.spawn(child)
            self.children.append(child)

    def spawn(self, child: Child) -> None:
        handle = child.log_path.open("ab")
        env = {**os.environ, "FAIRSHARE_LOG_LEVEL": os.environ.get("FAIRSHARE_LOG_LEVEL", "INFO")}
        child.process = subprocess.Popen(
            child.argv, stdout=handle, stderr=subprocess.STDOUT, env=env, start_new_session=True
        )
        handle.close()
        log.info("started %s (pid %s)", child.name, child.process.pid)

    def restart(self, name: str) -> None:
        """Stop a service and start it again (tests use this to show nothing is lost)."""
        child = self.child(name)
        _stop(child)
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
        """Users submitting through the API: short jobs, some funded (a contract), some
        bursting for free, so the demo shows placement, bursting, preemption and charges."""
        from services.client.api import ApiError, FairshareClient

        config = self.config
        rng = random.Random(config.seed)
        clients = {
            user: FairshareClient(config.api_url, token) for user, (token, _) in USERS.items()
        }
        try:
            while not should_stop():
                if self._pending(clients["ana"]) >= config.max_pending:
                    self._pause(1.0, should_stop)
                    continue
                user = rng.choice(sorted(USERS))
                seconds = rng.randint(30, 300)
                request = {
                    "workload_id": f"demo-{uuid.uuid4().hex[:10]}",
                    "budget": USERS[user][1],
                    "pools": [config.cluster],
                    "gpus": rng.choice((1, 1, 2, 2, 4)),
                    "min_runtime_s": rng.choice((0, 60, 120, 300)),
                    # the simulated agent runs duration_s; the local one runs the command
                    "spec": {"duration_s": seconds, "command": ["sleep", str(seconds)]},
                }
                try:
                    clients[user].submit(request)
                    self.submitted += 1
                except ApiError as error:
                    self.refused += 1
                    log.warning("demo submission refused: %s", error)
                except Exception as error:  # the API restarting: try again later
                    log.warning("demo submission failed: %s", error)
                pause = rng.expovariate(1 / config.submit_every_s) if config.submit_every_s else 1
                self._pause(min(pause, 30), should_stop)
        finally:
            for client in clients.values():
                client.close()

    @staticmethod
    def _pause(seconds: float, should_stop: Callable[[], bool]) -> None:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline and not should_stop():
            time.sleep(0.2)

    @staticmethod
    def _pending(client: Any) -> int:
        try:
            return len(client.workloads(status="pending").get("workloads", []))
        except Exception:  # the API restarting: do not hold the stream up
            return 0

    # -- stop ----------------------------------------------------------------------------
    def stop(self) -> list[str]:
        """Stop every service (newest first); the ones that did not exit cleanly."""
        unclean = []
        for child in reversed(self.children):
            code = _stop(child)
            if code not in (0, -signal.SIGTERM):
                unclean.append(f"{child.name} (exit {code}; see {child.log_path})")
        return unclean


def _stop(child: Child, timeout_s: float = 15.0) -> int | None:
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


def seed_lab(bootstrap: str, topics: Topics) -> bool:
    """Write the demo lab if the budgets topic is empty; True if it did."""
    if any(True for _ in read_to_end(bootstrap, [topics.name(TopicKind.BUDGETS)])):
        return False
    facts: list[EventData] = [
        BudgetCreated(budget=b, weight=w, created_by="admin", description="demo lab")
        for b, w in LAB_BUDGETS
    ]
    facts += [
        MembershipGranted(budget=b, user=u, role=r, granted_by="admin")  # type: ignore[arg-type]
        for u, b, r in LAB_MEMBERS
    ]
    publisher = KafkaEventPublisher(bootstrap, topics, client_id="fairshare-up")
    try:
        now = datetime.now(UTC)
        for i, data in enumerate(facts):
            publisher.publish(
                new_event(
                    data, source="fairshare/up", time=now, event_id=derived_event_id("up", str(i))
                )
            )
        publisher.flush()
    finally:
        publisher.close()
    return True


def status_line(api_url: str) -> str:
    """Counts by status, from the API (what a user would see)."""
    from services.client.api import ApiError, FairshareClient

    with FairshareClient(api_url, "admin-token", timeout_s=5) as client:
        try:
            items = client.workloads().get("workloads", [])
        except ApiError as error:
            return f"API not answering ({error})"
    counts: dict[str, int] = {}
    for item in items:
        counts[item["status"]] = counts.get(item["status"], 0) + 1
    return ", ".join(f"{status} {n}" for status, n in sorted(counts.items())) or "no workloads yet"


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
