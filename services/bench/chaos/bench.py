"""``fairshare bench chaos``: the whole stack on real Apache Kafka, as ``fairshare up`` runs it
(every service its own process, supervised, two schedulers under one lease), loaded with
submissions through the API while it is hurt with ``kill -9``, then checked against its log.

The faults, spread over the submissions: the broker leading the workloads partition (restarted
on its data), the API three times, charging, the projector, the agent, and the scheduler that
holds the lease (a standby takes over; the time it takes is ``failover_s``). Every one is a
``kill -9``: no process gets to flush or say goodbye.

Afterwards (once every acknowledged workload has ended, or the settle time is over) the log is
read back and checked (``chaos_checks``). The result is one JSON-able dict; the slow tests run
the same scenario at a smaller size and assert on it.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from events import TopicKind, Topics
from services.bench.chaos.checks import (
    api_view,
    differences,
    duplicate_ids,
    folded,
    read_log,
    read_model_view,
    submitted_ids,
)
from services.bench.chaos.faults import (
    Failover,
    kill_and_restart_broker,
    kill_lease_holder,
    kill_service,
)
from services.bench.chaos.load import Submitter
from services.bench.workdir import bench_dir

Report = Callable[[str], None]

#: (share of the submissions done, fault): the order of the faults over a run.
FAULTS: tuple[tuple[float, str], ...] = (
    (0.10, "api"),
    (0.20, "broker"),
    (0.35, "charging"),
    (0.45, "api"),
    (0.55, "scheduler"),
    (0.65, "projector"),
    (0.75, "agent"),
    (0.85, "api"),
)


@dataclass(frozen=True)
class ChaosConfig:
    workloads: int = 1000
    #: 1: the ``fairshare up`` default; 3: a replicated cluster (RF 3, min ISR 2).
    brokers: int = 1
    rate_per_s: float = 20.0
    nodes: int = 8
    gpus_per_node: int = 8
    broker_down_s: float = 3.0
    #: After the last submission: how long every acknowledged workload may take to end, and
    #: the charges and read models to catch up.
    settle_timeout_s: float = 300.0
    seed: int = 7
    #: The brokers' listeners, as ``fairshare up`` starts them by default: every service its
    #: own principal over SASL_SSL ("plaintext": no authentication).
    security: str = "sasl_ssl"


def chaos_benchmark(
    config: ChaosConfig, data_dir: Path | None = None, report: Report = lambda _line: None
) -> dict[str, Any]:
    """The scenario in a fresh directory (a temporary one unless ``data_dir`` is given)."""
    with bench_dir(data_dir, "chaos") as directory:
        return _run(config, directory, report)


def _run(config: ChaosConfig, data_dir: Path, report: Report) -> dict[str, Any]:
    from services.brokers import start_kafka_cluster
    from services.brokers.handle import free_port
    from services.launcher import Stack, UpConfig
    from services.launcher.config import RestartPolicy
    from services.launcher.identities import stack_identities

    started = time.monotonic()
    report(f"starting {config.brokers} Apache Kafka broker(s) in {data_dir / 'broker'}")
    cluster = start_kafka_cluster(
        data_dir / "broker", config.brokers, die_with_parent=True, security=config.security
    )
    topics = Topics(prefix="chaos.")
    up = UpConfig(
        bootstrap=cluster.bootstrap,
        topics=topics,
        data_dir=data_dir,
        database_url=f"sqlite:///{data_dir.resolve()}/fairshare.db",
        api_port=free_port(),
        nodes=config.nodes,
        gpus_per_node=config.gpus_per_node,
        heartbeat_s=1.0,
        heartbeat_timeout_s=15.0,
        scheduler_tick_s=1.0,
        grace_period_s=2,
        submit_every_s=0,
        schedulers=2,
        restart=RestartPolicy(initial_s=0.5, max_s=5.0),
    )
    try:
        with stack_identities(cluster.handle(stop_at_exit=False), up, report) as secured:
            stack = Stack(secured)
            try:
                stack.start()
                stack.wait_for_api(timeout_s=240, report=report)
                report(f"stack up ({stack.pids()}); submitting {config.workloads} workloads")
                outcome = _under_faults(config, cluster, stack, topics, report)
                report("faults over; waiting for every acknowledged workload to end")
                result = _settle(config, stack, topics, outcome, report)
            finally:
                unclean = stack.stop()
    finally:
        cluster.stop()
    result["restarts"] = sum(child.restarts for child in stack.children)
    result["restarts_by_service"] = {c.name: c.restarts for c in stack.children if c.restarts}
    result["unclean_stops"] = unclean
    result["wall_s"] = round(time.monotonic() - started, 1)
    return result


@dataclass
class _Outcome:
    submitter: Submitter
    failover: Failover | None = None
    broker_outage_s: float | None = None
    faults: int = 0


def _under_faults(
    config: ChaosConfig, cluster: Any, stack: Any, topics: Topics, report: Report
) -> _Outcome:
    submitter = Submitter(
        stack.config.api_url,
        stack.config.cluster,
        config.workloads,
        rate_per_s=config.rate_per_s,
        seed=config.seed,
    )
    outcome = _Outcome(submitter)
    stop = threading.Event()
    thread = threading.Thread(target=submitter.run, args=(stop.is_set,), daemon=True)
    thread.start()
    pending = list(FAULTS)
    try:
        while pending:
            stack.supervise(report)  # restarts happen from this thread (see children.py)
            due = submitter.finished.is_set() or submitter.done >= pending[0][0] * config.workloads
            if due and _all_up(stack):  # one fault at a time: each service comes back first
                _inject(pending.pop(0)[1], config, cluster, stack, topics, outcome, report)
                outcome.faults += 1
            time.sleep(0.2)
        while not submitter.finished.wait(0.2):
            stack.supervise(report)
    finally:
        stop.set()
        thread.join(timeout=30)
    report(
        f"submitted: {len(submitter.acknowledged)} acknowledged, {len(submitter.refused)} "
        f"refused, {len(submitter.given_up)} given up, {submitter.retries} retries"
    )
    return outcome


def _all_up(stack: Any) -> bool:
    return all(
        c.restart_at is None and c.process is not None and c.process.poll() is None
        for c in stack.children
    )


def _inject(
    fault: str,
    config: ChaosConfig,
    cluster: Any,
    stack: Any,
    topics: Topics,
    outcome: _Outcome,
    report: Report,
) -> None:
    done = outcome.submitter.done
    if fault == "broker":
        outage = kill_and_restart_broker(cluster, topics, config.broker_down_s)
        outcome.broker_outage_s = round(outage.down_s, 1)
        report(f"kill -9 broker {outage.node_id} at {done} submissions; back {outage.down_s:.1f}s")
    elif fault == "scheduler":
        failover = kill_lease_holder(stack, topics, report=report)
        outcome.failover = failover
        report(
            f"kill -9 {failover.killed} (lease epoch {failover.epoch_before}) at {done} "
            f"submissions; {failover.new_leader} leads epoch {failover.epoch_after} after "
            f"{failover.failover_s:.1f}s"
        )
    else:
        pid = kill_service(stack, fault)
        report(f"kill -9 {fault} (pid {pid}) at {done} submissions")


def _settle(
    config: ChaosConfig, stack: Any, topics: Topics, outcome: _Outcome, report: Report
) -> dict[str, Any]:
    """Wait (supervising) until every acknowledged workload has ended and the checks hold, or
    the settle time is over; then the figures, as they are at that moment."""
    acknowledged = outcome.submitter.acknowledged
    began = time.monotonic()
    deadline = began + config.settle_timeout_s
    result: dict[str, Any] = {}
    while True:
        stack.supervise(report)
        try:
            view = api_view(stack.config.api_url)
        except Exception as error:  # the API restarting: look again
            report(f"API not answering yet: {error}")
            view = {}
        unfinished = [w for w in acknowledged if view.get(w, ("?",))[0] not in _ENDED]
        if not unfinished or time.monotonic() > deadline:
            result = _checks(stack, topics, outcome, view, unfinished)
            if result["ok"] or time.monotonic() > deadline:
                # from the last submission to every check holding (or giving up)
                result["settle_s"] = round(time.monotonic() - began, 1)
                return result
            report("not settled yet: " + "; ".join(result["not_yet"]))
        else:
            report(f"{len(unfinished)} acknowledged workload(s) not ended yet")
        time.sleep(3)


_ENDED = frozenset({"succeeded", "failed", "cancelled"})


def _checks(
    stack: Any,
    topics: Topics,
    outcome: _Outcome,
    view: dict[str, Any],
    unfinished: list[str],
) -> dict[str, Any]:
    from services.audit.sources import audit_log

    config = stack.config
    log = read_log(config.bootstrap, topics)
    envelopes = [d.envelope for d in log.deliveries]
    acknowledged = outcome.submitter.acknowledged
    lost = sorted(acknowledged - submitted_ids(log))
    expected = folded(log, topics)
    stored = read_model_view(config.database_url)
    in_log = audit_log(envelopes)
    in_database = audit_log(envelopes, config.database_url)
    view_diff = differences(expected, view)
    stored_diff = differences({w: s[:2] for w, s in expected.items()}, stored)
    result: dict[str, Any] = {
        "workloads": outcome.submitter.count,
        "acknowledged": len(acknowledged),
        "refused": len(outcome.submitter.refused),
        "given_up": len(outcome.submitter.given_up),
        "retries": outcome.submitter.retries,
        "lost": len(lost),
        "lost_ids": lost[:10],
        "unfinished": len(unfinished),
        "faults": outcome.faults,
        "failover_s": round(outcome.failover.failover_s, 1) if outcome.failover else None,
        "failover": asdict(outcome.failover) if outcome.failover else None,
        "broker_outage_s": outcome.broker_outage_s,
        "events": len(log.deliveries),
        "invalid_records": log.invalid,
        "charges": in_log.recorded_count,
        "duplicate_command_ids": duplicate_ids(log, topics, TopicKind.COMMANDS),
        "duplicate_charge_ids": duplicate_ids(log, topics, TopicKind.LEDGER),
        "audit_identical": in_log.identical and in_database.identical,
        "audit_log_differences": in_log.differences[:5],
        "audit_read_models_differences": in_database.differences[:5],
        "view_equals_log": not view_diff,
        "view_differences": view_diff,
        "read_models_equal_log": not stored_diff,
        "read_model_differences": stored_diff,
    }
    not_yet = [
        name
        for name, bad in (
            ("unfinished workloads", bool(unfinished)),
            (
                f"audit differs ({(in_log.differences + in_database.differences)[:1]})",
                not result["audit_identical"],
            ),
            (f"view differs from the log ({view_diff[:1]})", view_diff),
            (f"read models differ from the log ({stored_diff[:1]})", stored_diff),
        )
        if bad
    ]
    result["ok"] = not not_yet and not lost
    result["not_yet"] = not_yet
    return result
