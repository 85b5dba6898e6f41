"""``fairshare bench latency``: how long from a submission through the API until it is placed
and until it runs, at a steady rate, on Apache Kafka with the stack as ``fairshare up`` runs it.

The stack is ``fairshare up``'s (every service its own process, two schedulers under one
lease, ``UpConfig``'s defaults for ticks and heartbeats) on an embedded Apache Kafka broker, or
on ``bootstrap``'s. Small jobs (one GPU, free, ``job_s`` long) are submitted open loop at
``rate_per_s`` for ``duration_s`` (:class:`~services.bench.latency.load.OpenLoop`) to a
simulated cluster with GPUs enough that every job can be placed at once.

What is measured, per workload, from the wall-clock time just before its submit request was
sent by the benchmark:

* **placed**: to the *envelope time* (``time``) of its place command, which the scheduler
  stamps with its clock at the start of the pass that decided it;
* **started**: to the envelope time of its ``workload.started``, which the agent stamps with
  its clock in the reconcile round that started it.

Envelope times, not the records' Kafka timestamps: they are the times every fold uses, and
every process runs on this machine's clock. A place command is in the log a little after its
envelope time (the rest of the pass, the flush), so ``placed`` is the decision, not its arrival.
Also reported: how long the API took to answer (it waits for its own view to show the
submission, read-your-writes), and the figures of each hop by the same envelope times
(``api``: send to the ``workload.submitted`` event; ``scheduler``: that to the place command;
``agent``: place command to started).

The baseline is measured in the same run, while the load runs: the broker round trip of one
record produced with the services' producer settings and consumed back
(:class:`~services.bench.latency.load.RoundTrip`). ``ratio`` is placed p50 over round-trip p50:
how many bare broker hops a placement costs.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from events import Topics
from events.models import PlaceCommand, WorkloadStarted, WorkloadSubmitted
from services.bench.chaos.checks import read_log
from services.bench.latency.load import OpenLoop, RoundTrip
from services.bench.workdir import bench_dir

Report = Callable[[str], None]

#: The issue's targets for placed (not asserted anywhere: reported).
TARGET_PLACED_P50_MS = 200.0
TARGET_PLACED_P99_MS = 1000.0


@dataclass(frozen=True)
class LatencyConfig:
    rate_per_s: float = 50.0
    duration_s: float = 60.0
    #: How long each job runs on its simulated GPU.
    job_s: float = 1.0
    gpus_per_node: int = 8
    #: Threads sending submissions (open loop: a slow answer holds up only its thread).
    workers: int = 16
    #: After the last submission: how long every acknowledged one may take to start.
    settle_timeout_s: float = 60.0
    #: Round trips measured per second beside the load.
    roundtrips_per_s: float = 10.0

    @property
    def count(self) -> int:
        return max(1, round(self.rate_per_s * self.duration_s))

    @property
    def nodes(self) -> int:
        """Enough GPUs that nothing waits for one: the jobs of ``job_s`` plus a few seconds
        (finish reported, folded) at the rate, twice over; at least four nodes."""
        gpus = 2 * self.rate_per_s * (self.job_s + 3.0)
        return max(4, math.ceil(gpus / self.gpus_per_node))


def percentiles(values: Sequence[float]) -> dict[str, float | int | None]:
    """p50, p99 (nearest rank) and max, in milliseconds, and the count."""
    if not values:
        return {"p50": None, "p99": None, "max": None, "count": 0}
    ordered = sorted(values)

    def rank(p: float) -> float:
        index = max(0, math.ceil(p / 100 * len(ordered)) - 1)
        return round(ordered[index] * 1000, 1)

    return {
        "p50": rank(50),
        "p99": rank(99),
        "max": round(ordered[-1] * 1000, 1),
        "count": len(ordered),
    }


def latency_benchmark(
    config: LatencyConfig,
    bootstrap: str | None = None,
    data_dir: Path | None = None,
    report: Report = lambda _line: None,
) -> dict[str, Any]:
    """The run in ``data_dir`` (a temporary directory unless given); an embedded Apache Kafka
    broker unless ``bootstrap`` names one (then on topics of a fresh prefix)."""
    with bench_dir(data_dir, "latency") as directory:
        return _run(config, bootstrap, directory, report)


def _run(
    config: LatencyConfig, bootstrap: str | None, data_dir: Path, report: Report
) -> dict[str, Any]:
    from services.bench.bench_stack import bench_stack

    started = time.monotonic()
    with bench_stack(
        name="latency",
        nodes=config.nodes,
        gpus_per_node=config.gpus_per_node,
        data_dir=data_dir,
        bootstrap=bootstrap,
        report=report,
    ) as running:
        stack, topics = running.stack, running.topics
        report(
            f"stack up ({stack.pids()}); {config.count} submissions at {config.rate_per_s:g}/s "
            f"to {config.nodes} nodes of {config.gpus_per_node} GPUs"
        )
        load, roundtrip = _load(config, stack, topics, report)
        result = _settle(config, stack, topics, load, report)
        result["roundtrip_ms"] = percentiles(roundtrip.samples_s)
        result["roundtrip_timeouts"] = roundtrip.timeouts
        placed_p50 = result["placed_ms"]["p50"]
        roundtrip_p50 = result["roundtrip_ms"]["p50"]
        result["ratio_placed_to_roundtrip_p50"] = (
            round(placed_p50 / roundtrip_p50, 1) if placed_p50 and roundtrip_p50 else None
        )
    result["targets"] = {
        "placed_p50_ms": TARGET_PLACED_P50_MS,
        "placed_p99_ms": TARGET_PLACED_P99_MS,
        "met": bool(
            result["placed_ms"]["p50"] is not None
            and result["placed_ms"]["p50"] <= TARGET_PLACED_P50_MS
            and result["placed_ms"]["p99"] <= TARGET_PLACED_P99_MS
        ),
    }
    result["stack"] = {
        "broker": running.broker_description,
        "nodes": config.nodes,
        "gpus": config.nodes * config.gpus_per_node,
        "schedulers": stack.config.schedulers,
        "scheduler_tick_s": stack.config.scheduler_tick_s,
        "heartbeat_s": stack.config.heartbeat_s,
    }
    result["config"] = asdict(config)
    result["restarts_by_service"] = {c.name: c.restarts for c in stack.children if c.restarts}
    result["unclean_stops"] = running.unclean
    result["wall_s"] = round(time.monotonic() - started, 1)
    return result


def _load(
    config: LatencyConfig, stack: Any, topics: Topics, report: Report
) -> tuple[OpenLoop, RoundTrip]:
    """Submissions and round trips together, the stack supervised meanwhile."""
    load = OpenLoop(
        stack.config.api_url,
        stack.config.cluster,
        config.count,
        config.rate_per_s,
        job_s=config.job_s,
        workers=config.workers,
    )
    roundtrip = RoundTrip(
        stack.config.bootstrap,
        f"{topics.prefix}bench.roundtrip",
        every_s=1.0 / config.roundtrips_per_s,
    )
    stop = threading.Event()
    loading = threading.Thread(target=load.run, args=(stop.is_set,), daemon=True)
    probing = threading.Thread(target=roundtrip.run, args=(stop.is_set,), daemon=True)
    probing.start()
    loading.start()
    try:
        next_line = time.monotonic() + 10
        while loading.is_alive():
            stack.supervise(report)
            if time.monotonic() >= next_line:
                report(f"{len(load.status)} of {config.count} submitted")
                next_line += 10
            loading.join(0.2)
    finally:
        stop.set()
        loading.join(timeout=60)
        probing.join(timeout=30)
    report(f"{len(load.acknowledged)} acknowledged of {len(load.status)} sent")
    return load, roundtrip


def _settle(
    config: LatencyConfig, stack: Any, topics: Topics, load: OpenLoop, report: Report
) -> dict[str, Any]:
    """Read the log until every acknowledged submission has started (or the settle time is
    over); then the figures."""
    deadline = time.monotonic() + config.settle_timeout_s
    while True:
        stack.supervise(report)
        times = event_times(stack.config.bootstrap, topics)
        waiting = [w for w in load.acknowledged if w not in times["started"]]
        if not waiting or time.monotonic() > deadline:
            return figures(load, times)
        report(f"{len(waiting)} acknowledged workload(s) not started yet")
        time.sleep(2)


def event_times(bootstrap: str, topics: Topics) -> dict[str, dict[str, float]]:
    """Per kind, workload id -> envelope time (epoch seconds) of its first such event."""
    times: dict[str, dict[str, float]] = {"submitted": {}, "placed": {}, "started": {}}
    for delivery in read_log(bootstrap, topics).deliveries:
        data = delivery.envelope.data
        if isinstance(data, WorkloadSubmitted):
            kind = "submitted"
        elif isinstance(data, PlaceCommand):
            kind = "placed"
        elif isinstance(data, WorkloadStarted):
            kind = "started"
        else:
            continue
        at = delivery.envelope.time.timestamp()
        seen = times[kind].get(data.workload_id)
        times[kind][data.workload_id] = at if seen is None else min(seen, at)
    return times


def figures(load: OpenLoop, times: dict[str, dict[str, float]]) -> dict[str, Any]:
    """The JSON-able result of a run from its sends and the event times read back."""
    acknowledged = load.acknowledged

    def since_send(kind: str) -> list[float]:
        return [times[kind][w] - load.sent[w] for w in acknowledged if w in times[kind]]

    def hop(first: str, then: str) -> list[float]:
        return [
            times[then][w] - times[first][w]
            for w in acknowledged
            if w in times[first] and w in times[then]
        ]

    sent = len(load.status)
    elapsed = load.ended_at - load.started_at
    # the rate the sends kept: by their own times, first to last
    send_times = sorted(load.sent.values())
    span = send_times[-1] - send_times[0] if len(send_times) > 1 else 0.0
    return {
        "count": sent,
        "acknowledged": len(acknowledged),
        "created_201": sum(1 for code in load.status.values() if code == 201),
        "accepted_202": sum(1 for code in load.status.values() if code == 202),
        "errors": len(load.errors),
        "error_examples": sorted(set(load.errors.values()))[:3],
        "rate_target_per_s": load.rate_per_s,
        "rate_achieved_per_s": round((sent - 1) / span, 1) if span > 0 else None,
        "load_s": round(elapsed, 1),
        "placed_ms": percentiles(since_send("placed")),
        "started_ms": percentiles(since_send("started")),
        "answer_ms": percentiles([load.answered_s[w] for w in acknowledged]),
        "hops_ms": {
            "api": percentiles(since_send("submitted")),
            "scheduler": percentiles(hop("submitted", "placed")),
            "agent": percentiles(hop("placed", "started")),
        },
        # acknowledged (201, or 200/202) but no place command in the log
        "lost": sum(1 for w in acknowledged if w not in times["placed"]),
        "lost_ids": sorted(w for w in acknowledged if w not in times["placed"])[:10],
        "not_started": sum(1 for w in acknowledged if w not in times["started"]),
    }
