"""The running stack: its child services, started together, supervised while the workload
stream runs, and stopped together only when ``fairshare up`` is asked to stop.

Supervision is crash-only's other half: a service that dies (a fatal bus error makes one exit
on purpose) is started again after a backoff (``RestartPolicy``), and the status says which
service was restarted, how often and why it died; nothing else stops the stack.
"""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from rich.markup import escape

from services.brokers.watch import BrokerWatch
from services.bus.signing import SIGNING_KEY_ENV
from services.launcher.children import (
    Child,
    child_for,
    describe_exit,
    last_log_line,
    service_commands,
    spawn_child,
    stop_child,
    stop_children,
)
from services.launcher.config import UpConfig
from services.launcher.keys import admin_signatory, key_of, register_keys, signatory_of
from services.launcher.lab import seed_lab
from services.launcher.prices import price_token, set_up_prices, up_prices
from services.launcher.status import services_line, status_line
from services.launcher.stream import submit_stream

Report = Callable[[str], None]


@dataclass
class Stack:
    config: UpConfig
    #: The broker ``fairshare up`` started (None for an external Kafka): started again first
    #: when it dies, then every service waiting for it at once.
    broker: BrokerWatch | None = None
    children: list[Child] = field(default_factory=list)
    submitted: int = 0
    refused: int = 0
    _lock: threading.RLock = field(default_factory=threading.RLock, repr=False)

    # -- start ---------------------------------------------------------------------------
    def start(self) -> None:
        from services.bus.admin import ensure_topics

        config = self.config
        ensure_topics(config.bootstrap, config.topics)
        logs = config.data_dir / "logs"
        logs.mkdir(parents=True, exist_ok=True)
        commands = service_commands(config, logs)
        # Keys before any fact: the admin registers every signer's key, then signs the lab.
        signatories = {name: signatory_of(name, config) for name in commands}
        admin = key_of(admin_signatory(config))
        register_keys(
            config.bootstrap, config.topics, admin, [s for s in signatories.values() if s]
        )
        seed_lab(config.bootstrap, config.topics, admin)
        for name, argv in commands.items():
            child = child_for(name, argv, logs)
            signatory = signatories[name]
            if signatory is not None:
                child.env[SIGNING_KEY_ENV] = str(signatory.path)
            self.spawn(child)
            self.children.append(child)

    def spawn(self, child: Child) -> None:
        with self._lock:
            spawn_child(child, self.config.stop_timeout_s)
            child.restart_at = None

    def restart(self, name: str) -> None:
        """Stop a service and start it again (tests use this to show nothing is lost)."""
        with self._lock:
            child = self.child(name)
            stop_child(child, self.config.stop_timeout_s)
            self.spawn(child)

    def child(self, name: str) -> Child:
        return next(c for c in self.children if c.name == name)

    def dead(self) -> list[str]:
        return [
            f"{c.name} ({describe_exit(c.process.returncode)}; see {c.log_path})"
            for c in self.children
            if c.process is not None and c.process.poll() is not None
        ]

    def pids(self) -> str:
        return ", ".join(f"{c.name} {c.process.pid}" for c in self.children if c.process)

    # -- supervision ---------------------------------------------------------------------
    def supervise(self, report: Report, now: float | None = None) -> None:
        """One look at every child: note a death (and when to restart), restart what is due."""
        with self._lock:
            given = now
            now = time.monotonic() if given is None else given
            broker_report = lambda line: report(escape(line))  # noqa: E731
            if self.broker is not None and self.broker.check(broker_report, now):
                now = time.monotonic() if given is None else given  # the restart took a while
                self._after_broker_back(report, now)
            for child in self.children:
                process = child.process
                if process is None:
                    continue
                if child.restart_at is None and process.poll() is not None:
                    self._note_death(child, now, report)
                elif child.restart_at is not None and now >= child.restart_at:
                    child.restarts += 1
                    self.spawn(child)
                    pid = child.process.pid if child.process else "?"
                    report(f"restarted {child.name} (pid {pid}, restart {child.restarts})")

    def _after_broker_back(self, report: Report, now: float) -> None:
        """The services that died while the broker was down died of the outage, not of a
        fault of their own: start them at once, without the backoff their deaths grew."""
        for child in self.children:
            process = child.process
            if process is not None and child.restart_at is None and process.poll() is not None:
                self._note_death(child, now, lambda _line: None)
            if child.restart_at is not None:
                child.failures = 0
                child.restart_at = now
        waiting = [c.name for c in self.children if c.restart_at is not None]
        if waiting:
            report(escape(f"starting again now that the broker is back: {', '.join(waiting)}"))

    def _note_death(self, child: Child, now: float, report: Report) -> None:
        policy = self.config.restart
        assert child.process is not None
        if now - child.started_at >= policy.reset_after_s:
            child.failures = 0  # it had been up long enough: start the backoff over
        child.failures += 1
        child.deaths = [t for t in child.deaths if now - t < policy.loud_window_s] + [now]
        child.last_exit = describe_exit(child.process.returncode)
        line = last_log_line(child.log_path)
        if line:
            child.last_exit += f": {line}"
        delay = policy.delay_s(child.failures)
        child.restart_at = now + delay
        message = escape(f"{child.name} died ({child.last_exit}); restarting in {delay:g} s")
        if len(child.deaths) >= policy.loud_deaths:
            window = f"{policy.loud_window_s:g} s"
            message = (
                f"[bold red]{escape(child.name)} died {len(child.deaths)} times in {window}; "
                f"see {escape(str(child.log_path))}[/] {message}"
            )
        report(message)

    def wait_for_api(
        self,
        timeout_s: float = 120.0,
        report: Report | None = None,
        should_stop: Callable[[], bool] = lambda: False,
    ) -> bool:
        """Until the API answers, its view caught up with the log (True), or ``should_stop``
        (False: a Ctrl-C while starting is not held up). Without ``report`` a service that
        dies meanwhile is an error; with it, the services are supervised (restarted) while
        waiting."""
        import httpx

        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if should_stop():
                return False
            if report is not None:
                self.supervise(report)
            elif dead := self.dead():
                raise RuntimeError("a service stopped while starting: " + ", ".join(dead))
            try:
                health = httpx.get(f"{self.config.api_url}/health", timeout=2)
                if health.status_code == 200 and health.json().get("caught_up"):
                    return True
            except httpx.HTTPError:
                pass
            time.sleep(0.5)
        exits = [f"{c.name} ({c.last_exit})" for c in self.children if c.last_exit]
        died = f"; services that died: {', '.join(exits)}" if exits else ""
        raise RuntimeError(
            f"the API did not answer at {self.config.api_url} in {timeout_s:.0f} s{died}"
        )

    # -- the workload stream -------------------------------------------------------------
    def submit_stream(self, should_stop: Callable[[], bool]) -> None:
        submit_stream(self.config, should_stop, self)

    # -- prices --------------------------------------------------------------------------
    def set_prices(self, should_stop: Callable[[], bool], report: Report) -> None:
        """The list prices of ``--price`` (or the demo's), set through the API as an admin."""
        from services.client.api import FairshareClient

        with FairshareClient(self.config.api_url, price_token(self.config)) as client:
            set_up_prices(self.config, client, should_stop, lambda line: report(escape(line)))

    # -- stop ----------------------------------------------------------------------------
    def stop(self) -> list[str]:
        """Stop every service together, within ``stop_timeout_s``; the ones that did not exit
        cleanly (killed, or a bad exit code) and the ones restarted meanwhile."""
        with self._lock:
            waiting = {c.name for c in self.children if c.restart_at is not None}
            running = [c for c in self.children if c.name not in waiting]
            killed = {c.name for c in stop_children(reversed(running), self.config.stop_timeout_s)}
            unclean = []
            for child in running:
                code = child.process.returncode if child.process else None
                if child.name in killed:
                    timeout = self.config.stop_timeout_s
                    unclean.append(f"{child.name} (did not stop in {timeout:g} s; killed)")
                elif code not in (0, -signal.SIGINT, -signal.SIGTERM, None):
                    unclean.append(f"{child.name} ({describe_exit(code)}; see {child.log_path})")
            return unclean

    def restart_summary(self) -> list[str]:
        return [
            f"{c.name} restarted {c.restarts}x (last: {c.last_exit}; see {c.log_path})"
            for c in self.children
            if c.restarts or c.restart_at is not None
        ]


def run_stack(
    config: UpConfig,
    should_stop: Callable[[], bool],
    report: Report,
    on_ready: Callable[[], None] = lambda: None,
    broker: BrokerWatch | None = None,
) -> tuple[Stack, list[str]]:
    """Start everything, stream workloads and supervise the services until ``should_stop``,
    stop everything; returns the stack and the problems (services that had to be restarted,
    or did not stop cleanly), escaped for Rich markup like every line given to ``report``.
    ``on_ready`` is called once the API answers (``--duration`` counts from there)."""
    stack = Stack(config, broker)
    halt = threading.Event()
    stack.start()
    stream: threading.Thread | None = None
    pricing: threading.Thread | None = None
    try:
        if stack.wait_for_api(report=report, should_stop=should_stop):
            on_ready()
            for line in ready_lines(config, stack.pids()):
                report(line)
            if up_prices(config)[0]:  # in the background: a pool is known once its nodes are
                pricing = threading.Thread(
                    target=stack.set_prices,
                    args=(lambda: halt.is_set() or should_stop(), report),
                    daemon=True,
                )
                pricing.start()
            if config.submit_every_s:
                stream = threading.Thread(
                    target=stack.submit_stream,
                    args=(lambda: halt.is_set() or should_stop(),),
                    daemon=True,
                )
                stream.start()
            _supervise_until(stack, should_stop, report)
    finally:
        halt.set()
        for thread in (stream, pricing):
            if thread is not None:
                thread.join(timeout=10)
        stopped = [f"did not stop cleanly: {u}" for u in stack.stop()]
    restarted = [f"died and was restarted: {r}" for r in stack.restart_summary()]
    if stack.broker is not None and stack.broker.restarts:
        restarted.insert(0, f"died and was restarted: {stack.broker.status()}")
    # the caller prints them with Rich markup; a log line may hold brackets
    return stack, [escape(problem) for problem in restarted + stopped]


def ready_lines(config: UpConfig, pids: str) -> list[str]:
    """What ``fairshare up`` says once the API answers (escaped for Rich markup). The dashboard
    link carries no token: the page has a sign-in form, and a URL is no place for a secret."""
    if config.tokens_file is None:
        tokens = (
            "tokens   demo only: admin-token (admin), ana-token, bo-token, chen-token, "
            "finance-token (every budget's money); sign in to the dashboard with admin-token"
        )
    else:
        tokens = (
            f"tokens   from {config.tokens_file} (`fairshare tokens add USER` adds one); "
            "sign in to the dashboard with yours"
        )
    lines = [
        f"dashboard {config.api_url}/dashboard",
        f"API      {config.api_url}  (OpenAPI: {config.api_url}/docs)",
        f"logs     {config.data_dir / 'logs'}",
        f"pids     {pids}",
        tokens,
    ]
    if config.metrics:
        prometheus = config.data_dir / "prometheus"
        lines.insert(
            3,
            f"metrics  {prometheus / 'targets.json'} (Prometheus file_sd; "
            f"`prometheus --config.file={prometheus / 'prometheus.yml'}` scrapes them all)",
        )
    return [escape(line) for line in lines]


def _supervise_until(stack: Stack, should_stop: Callable[[], bool], report: Report) -> None:
    """The launcher's main loop: restart what died, print the status as soon as the API is up
    (a short run, or a slow start on a loaded machine, still shows one) and every 10 s after."""
    next_status = time.monotonic()
    while not should_stop():
        stack.supervise(report)
        now = time.monotonic()
        if now >= next_status:
            if stack.config.tokens_file is None:  # the status reads with the demo admin token
                report(f"workloads: {escape(status_line(stack.config.api_url))}")
            line = services_line(stack.children, now)
            if stack.broker is not None and stack.broker.supervised:
                line += f"; {stack.broker.status()}"
            report(f"services: {escape(line)}")
            next_status = now + 10
        time.sleep(0.2)
