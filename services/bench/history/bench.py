"""``fairshare bench history``: restarts, memory and reads against a fleet's history (issue 23).

For each history length (``1d,1w,4w`` by default; ``1h,6h`` for a quick run) the bench starts
its own Apache Kafka broker, writes a synthetic history of ``nodes`` nodes of 8 GPUs at the
agents' real cadence ending now (``services.bench.history.gen``: facts, charges and usage
snapshots, through ``KafkaEventPublisher`` like every service), and then starts each service
the way ``fairshare up`` does, one at a time so that each has the machine's cores to itself:

1. the projector on empty read models (``projector_cold``: how long a first projection takes),
   then again on what it wrote (``projector``: the restart); it stays up to serve the reads;
2. charging, the scheduler (one instance, on a lease topic of its own) and the API, each first
   on the whole history (``<name>_first_start``), then, once it has saved a checkpoint of its
   fold (every ``checkpoint_every_s``), stopped and started again (the restart: from the
   checkpoint and the log's tail);
3. 50 ``GET /budgets`` on the restarted API; then a month's charges report on the read models.

While the services restart, the fleet stays alive: the bench goes on sending every node's
heartbeat every 10 s (``HistoryGenerator.keep_alive``), or the scheduler would declare every
node down and change the history it is measured on.

Each history prints one JSON object; the summary puts the figures side by side, the ratio of
the longest history's figure to the shortest's, and each against the issue's targets. How each
service is known to have caught up: ``services.bench.history.measure``.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from events import TopicKind, Topics
from services.bench.history.gen import HistoryConfig, HistoryGenerator, parse_length
from services.bench.history.measure import (
    LogSays,
    ProjectorReady,
    SchedulerLeads,
    Watch,
    api_ready,
    broker_bytes,
    budgets_latency,
    charges_report,
    closed_period_audit,
    log_since,
    memory_mb,
    service_env,
    wait_ready,
)
from services.bench.history.summary import extrapolate, summarize

Report = Callable[[str], None]
PREFIX = "history."
#: What each folding service logs once it has caught up with the log as it stood at its start.
_CAUGHT_UP = {
    "charging": "charging caught up with the log",
    "scheduler": "scheduler caught up with the log",
}


@dataclass(frozen=True)
class HistoryBenchConfig:
    nodes: int = 24
    lengths: tuple[str, ...] = ("1d", "1w", "4w")
    gpus_per_node: int = 8
    #: How long any one service may take to catch up before it counts as failed.
    service_timeout_s: float = 3600.0
    budgets_requests: int = 50
    #: The services' checkpoint interval: a restart is measured once each has saved one.
    checkpoint_every_s: float = 60.0
    #: Charging's closed periods and horizon: days, sealed 6 hours after they end (a month
    #: and a week by default), so that a week's history has closed periods to audit.
    period_length: str = "day"
    horizon_s: int = 6 * 3600


def history_benchmark(
    config: HistoryBenchConfig,
    data_dir: Path,
    report: Report = lambda _line: None,
    on_history: Callable[[dict[str, Any]], None] = lambda _result: None,
) -> dict[str, Any]:
    """Every history in ``data_dir/<length>``, shortest first; the summary (with each
    history's object under ``histories``)."""
    lengths = sorted(config.lengths, key=parse_length)
    report(f"bench history: {config.nodes} nodes x {config.gpus_per_node} GPUs, {lengths}")
    histories = []
    for length in lengths:
        result = run_history(config, length, data_dir / length, report)
        on_history(result)
        histories.append(result)
    return summarize(histories, config.nodes)


def run_history(
    config: HistoryBenchConfig, length: str, directory: Path, report: Report
) -> dict[str, Any]:
    from services.brokers import start_embedded_broker
    from services.bus.admin import ensure_topics
    from services.bus.kafka import KafkaEventPublisher

    began, load = time.monotonic(), os.getloadavg()
    directory.mkdir(parents=True, exist_ok=True)
    report(f"{length}: starting Apache Kafka in {directory / 'broker'}")
    # plain text: its services are started one by one as this process, not as a stack whose
    # children get their own principals (the cost of TLS is not what it measures)
    broker, _ = start_embedded_broker(directory / "broker", "apache-kafka", "plaintext")
    topics = Topics(prefix=PREFIX)
    publisher = KafkaEventPublisher(broker.bootstrap, topics, client_id="bench-history")
    keeper: _Keeper | None = None
    try:
        partitions = ensure_topics(broker.bootstrap, topics)
        generator, written = write_history(config, length, topics, partitions, publisher, report)
        on_disk = broker_bytes(directory / "broker", topics)
        keeper = _Keeper(generator, publisher)
        keeper.start()
        result: dict[str, Any] = {
            "history": length,
            "length_s": parse_length(length),
            "nodes": config.nodes,
            "gpus": config.nodes * config.gpus_per_node,
            "generated": written,
            "broker": extrapolate(on_disk, parse_length(length), config.nodes),
        }
        result.update(measure_services(config, broker.bootstrap, topics, directory, report))
        result["records_added_meanwhile"] = _log_records(broker.bootstrap, topics) - (
            generator.records
        )
        result["keep_alive_heartbeats"] = keeper.sent
    finally:
        if keeper is not None:
            keeper.stop()
        publisher.close()
        broker.stop()
    result["load_avg_1m"] = {"start": round(load[0], 2), "end": round(os.getloadavg()[0], 2)}
    result["wall_s"] = round(time.monotonic() - began, 1)
    return result


def write_history(
    config: HistoryBenchConfig,
    length: str,
    topics: Topics,
    partitions: dict[str, int],
    publisher: Any,
    report: Report,
) -> tuple[HistoryGenerator, dict[str, Any]]:
    """The history, ending a few seconds ago (generation takes a while: it is extended to
    the present until within one heartbeat of it)."""
    length_s = parse_length(length)
    history = HistoryConfig(
        nodes=config.nodes,
        length_s=length_s,
        end=time.time() - 5,
        gpus_per_node=config.gpus_per_node,
        partitions=partitions,
    )
    generator = HistoryGenerator(history, topics, publisher.publish)
    began = time.monotonic()
    last_line = [began]

    def progress(t: float) -> None:
        now = time.monotonic()
        if now - last_line[0] >= 10:
            last_line[0] = now
            done = (t - history.start) / length_s
            rate = generator.records / (now - began)
            report(f"{length}: {done:.0%} written, {generator.records:,} records, {rate:,.0f}/s")

    generator.generate(history.end, progress)
    while time.time() - 5 - generator.now > history.heartbeat_s:
        generator.generate(time.time() - 5, progress)
    generator.finish(generator.now)
    publisher.flush(timeout_s=300)
    wall = time.monotonic() - began
    counts = generator.counts
    written = {
        "records": generator.records,
        "heartbeats": generator.heartbeats(),
        "workloads": generator.workloads,
        "charges": counts["fairshare.ledger.charge.v1"],
        "usage_snapshots": counts["fairshare.usage.snapshot.v1"],
        "by_topic": generator.by_topic(),
        "from": _iso(history.start),
        "to": _iso(generator.now),
        "wall_s": round(wall, 1),
        "records_per_s": round(generator.records / wall) if wall else None,
    }
    report(f"{length}: {generator.records:,} records written in {wall:.0f} s")
    return generator, written


def measure_services(
    config: HistoryBenchConfig, bootstrap: str, topics: Topics, directory: Path, report: Report
) -> dict[str, Any]:
    """Every service's first start and restart, then the reads (see the module docstring)."""
    from services.brokers import free_port
    from services.launcher import UpConfig

    up = UpConfig(
        bootstrap=bootstrap,
        topics=topics,
        data_dir=directory,
        database_url=f"sqlite:///{directory.resolve()}/fairshare.db",
        api_port=free_port(),
        cluster=HistoryConfig.cluster,
        nodes=config.nodes,
        gpus_per_node=config.gpus_per_node,
        schedulers=1,
    )
    services = _Services(config, up, report)
    settings = {
        "FAIRSHARE_CHECKPOINT_EVERY_S": str(config.checkpoint_every_s),
        "FAIRSHARE_PERIOD_LENGTH": config.period_length,
        "FAIRSHARE_CHARGING_HORIZON_S": str(config.horizon_s),
    }
    with service_env(**settings):
        try:
            services.projector()
            services.first_starts()
            services.restarts()
            reads = services.reads()
        finally:
            services.stop_all()
    audit = closed_period_audit(bootstrap, topics)
    report(f"  audit of the last closed period: {audit}")
    return {
        "services": services.figures,
        **reads,
        "closed_period_audit": audit,
        "rejected_facts": services.rejected(),
    }


#: Restarts of the projector measured per history (the median is reported).
PROJECTOR_RESTARTS = 3


class _Services:
    """The services of one history, started as ``fairshare up`` starts them and measured until
    each has caught up. Charging, the scheduler and the API checkpoint their folds: each is
    started on the history (from zero: ``first_start``), left running until it has saved a
    checkpoint, and then restarted (``restart``, from that checkpoint and the log's tail).
    The projector resumes from the positions stored with its rows: first on empty read models
    (``projector_cold``), then on those it wrote."""

    def __init__(self, config: HistoryBenchConfig, up: Any, report: Report) -> None:
        from services.launcher.children import service_commands

        self.config, self.up, self.report = config, up, report
        self.logs = up.data_dir / "logs"
        self.logs.mkdir(parents=True, exist_ok=True)
        self.commands = service_commands(up, self.logs)
        self.figures: dict[str, Any] = {}
        self.running: dict[str, Watch] = {}
        self.health: dict[str, Any] = {}

    # -- starting and stopping ------------------------------------------------------------------
    def start(self, name: str) -> tuple[Watch, int]:
        """The service's process, and where its log stood before it started."""
        from services.launcher.children import child_for, spawn_child

        child = child_for(name, self.commands[name], self.logs)
        offset = child.log_path.stat().st_size if child.log_path.exists() else 0
        spawn_child(child, self.up.stop_timeout_s)
        watch = Watch(child, log_offset=offset)
        self.running[name] = watch
        return watch, offset

    def stop(self, name: str) -> None:
        from services.launcher.children import stop_child

        watch = self.running.pop(name, None)
        if watch is not None:
            if watch.figure:
                self.figures[watch.figure]["rejected_facts"] = watch.rejected()
            stop_child(watch.child, self.up.stop_timeout_s)

    def stop_all(self) -> None:
        for name in list(self.running):
            self.stop(name)

    def measure(self, figure: str, watch: Watch, ready: Callable[[], float | None]) -> None:
        watch.figure = figure
        result = wait_ready(watch, ready, self.config.service_timeout_s, self.report)
        assert watch.child.process is not None
        result.update(memory_mb(watch.child.process.pid))
        self.figures[figure] = result
        failed = f" ({result['failed']})" if "failed" in result else ""
        self.report(
            f"  {figure}: caught up in {result['caught_up_s']} s, "
            f"peak {result['peak_rss_mb']} MiB{failed}"
        )

    def ends(self, kinds: tuple[TopicKind, ...]) -> dict[tuple[str, int], int]:
        return _ends(self.up.bootstrap, [self.up.topics.name(kind) for kind in kinds])

    # -- the services ---------------------------------------------------------------------------
    def projector(self) -> None:
        """Its cold start on empty read models, then :data:`PROJECTOR_RESTARTS` restarts, the
        median one reported (with every sample): a restart is about a second, most of it the
        consumer group's join, so one sample on a busy machine is mostly noise."""
        from services.projector.host import PROJECTED

        samples: list[dict[str, Any]] = []
        for figure in ("projector_cold", *["projector"] * PROJECTOR_RESTARTS):
            ends = self.ends(PROJECTED)
            ready = ProjectorReady(self.up.bootstrap, self.up.database_url, ends)
            watch, _ = self.start("projector")
            self.measure(figure, watch, ready)
            if figure == "projector":
                samples.append(self.figures[figure])
            if len(samples) < PROJECTOR_RESTARTS:
                self.stop("projector")
        samples.sort(key=lambda s: s["caught_up_s"] if s["caught_up_s"] is not None else 1e9)
        median = samples[len(samples) // 2]
        self.figures["projector"] = {**median, "samples_s": [s["caught_up_s"] for s in samples]}

    def first_starts(self) -> None:
        """Charging, the scheduler and the API each folding the history from its first
        offset; they stay up until each has saved a checkpoint."""
        for name in ("charging", "scheduler"):
            watch, offset = self.start(name)
            self.measure(f"{name}_first_start", watch, LogSays(watch, offset, _CAUGHT_UP[name]))
        watch, _ = self.start("api")
        health: dict[str, Any] = {}
        self.measure("api_first_start", watch, api_ready(self.up.api_url, health))
        self.figures["api_first_start"]["health"] = _health_counts(health)

    def restarts(self) -> None:
        """Once each has saved a checkpoint: charging, the scheduler and the API stopped and
        started again (the API is left up for the reads). The scheduler's restart also says
        when it led again: only once its old lease ran out (the TTL, 10 s)."""
        for name in ("charging", "scheduler", "api"):
            self._wait_for_checkpoint(name)
            self.stop(name)
            watch, offset = self.start(name)
            if name == "api":
                self.measure(name, watch, api_ready(self.up.api_url, self.health))
            else:
                self.measure(name, watch, LogSays(watch, offset, _CAUGHT_UP[name]))
            if name == "scheduler":
                leads = SchedulerLeads(watch, offset)
                wait_ready(watch, leads, self.config.service_timeout_s, self.report)
                self.figures[name]["leading_s"] = leads.leading_s()
            text = log_since(watch.child.log_path, offset)
            self.figures[name]["from_checkpoint"] = "restored from a checkpoint" in text
            if name != "api":
                self.stop(name)

    def _wait_for_checkpoint(self, name: str, timeout_s: float = 900.0) -> None:
        watch = self.running[name]
        deadline = time.monotonic() + timeout_s
        while "checkpoint saved" not in log_since(watch.child.log_path, 0):
            if time.monotonic() > deadline or watch.dead():
                self.report(f"  {name}: no checkpoint saved ({watch.dead() or 'timeout'})")
                return
            time.sleep(1.0)
        self.figures[f"{name}_first_start"]["checkpoint_after_s"] = round(
            time.monotonic() - watch.started, 1
        )

    def reads(self) -> dict[str, Any]:
        """``GET /budgets`` on the restarted API, then a month's charges report."""
        watch = self.running["api"]
        budgets = budgets_latency(self.up.api_url, self.config.budgets_requests)
        assert watch.child.process is not None
        self.figures["api"].update(memory_mb(watch.child.process.pid))
        api_ready(self.up.api_url, self.health)()  # its counts once the reads are done
        self.report(f"  GET /budgets p50 {budgets['p50']} ms, p99 {budgets['p99']} ms")
        charges = charges_report(self.up.database_url, time.time())
        self.report(f"  a month's charges report: {charges['s']} s, {charges['rows']} rows")
        return {"budgets_ms": budgets, "charges_report": charges}

    def rejected(self) -> dict[str, Any]:
        """Facts a fold rejected (each start's log; the API's /health once its reads were
        done: rejected, still held, records skipped), records dead-lettered: all should be 0."""
        dead = self.ends((TopicKind.DEADLETTER,))
        by_start = {
            figure: result.get("rejected_facts", 0)
            for figure, result in self.figures.items()
            if result.get("rejected_facts")
        }
        return {
            **{f"api_{key}": value for key, value in _health_counts(self.health).items()},
            "in_service_logs": by_start,
            "dead_letters": sum(dead.values()),
        }


class _Keeper(threading.Thread):
    """The fleet's heartbeats while the services restart (every node every 10 s)."""

    def __init__(self, generator: HistoryGenerator, publisher: Any) -> None:
        super().__init__(name="bench-history-heartbeats", daemon=True)
        self.generator, self.publisher = generator, publisher
        self.halt = threading.Event()
        self.sent = 0

    def run(self) -> None:
        while not self.halt.wait(1.0):
            self.sent += self.generator.keep_alive(time.time())
            self.publisher.flush(timeout_s=30)

    def stop(self) -> None:
        self.halt.set()
        self.join(timeout=30)


def _health_counts(health: dict[str, Any]) -> dict[str, Any]:
    return {key: health.get(key) for key in ("rejected", "waiting", "skipped")}


def _ends(bootstrap: str, names: list[str]) -> dict[tuple[str, int], int]:
    from services.bus.export import end_offsets

    return end_offsets(bootstrap, names)


def _log_records(bootstrap: str, topics: Topics) -> int:
    return sum(_ends(bootstrap, topics.all_names()).values())


def _iso(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, UTC).isoformat(timespec="seconds")
