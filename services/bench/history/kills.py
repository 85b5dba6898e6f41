"""``fairshare bench kills``: ``fairshare up`` on a pre-generated history, every service killed
with -9 in turn, each timed until it is back (issue 23).

A restart that reads the whole history grows with the fleet's age; one that starts from a
checkpoint of its fold reads only the tail. This puts that to the test the way an operator
meets it: a history of ``length`` (a week by default) is written into the broker of a data
directory (``services.bench.history.gen``, the fleet's real cadence), the stack is started on
it as ``fairshare up`` starts it (supervised, two schedulers, the demo stream submitting), and
once every checkpointing service has saved a checkpoint, each service is killed with -9 in
turn and timed from the kill until it is back:

* **projector**: its stored positions reach the ends its topics had at the kill and it has
  joined its group again (``services.bench.history.measure.ProjectorReady``);
* **charging**, **agent**: the restarted process logs that it caught up with the log;
* **api**: ``GET /health`` says ``caught_up: true`` again;
* **scheduler**: the one holding the lease is killed; back is when a scheduler leads a new
  epoch (the failover), and the killed one has also caught up again after its restart.

Then the stack is stopped, a charging process is run once more until it has caught up with
every fact (the stack stops while facts still flow), and the log is audited as an auditor
would: ``fairshare audit replay`` (every charge re-derived) and ``fairshare audit decisions``
(every scheduling pass re-derived) over the topics.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from events import Topics
from services.bench.history.measure import api_ready, log_since

Report = Callable[[str], None]
#: The services killed, in this order (the scheduler: whichever holds the lease).
FAULTS = ("projector", "charging", "api", "agent", "scheduler")
#: Their folds are checkpointed: each must have saved one before the kills (of the schedulers,
#: the one leading: a cold standby folds nothing and saves nothing).
CHECKPOINTED = ("charging", "api", "scheduler")


@dataclass(frozen=True)
class KillsConfig:
    length: str = "1w"
    nodes: int = 2
    gpus_per_node: int = 8
    checkpoint_every_s: float = 20.0
    #: The first start reads the whole history: how long it may take.
    first_start_timeout_s: float = 900.0
    #: How long a killed service may take to come back before it counts as failed.
    back_timeout_s: float = 180.0
    submit_every_s: float = 5.0


def kills_benchmark(config: KillsConfig, directory: Path, report: Report) -> dict[str, Any]:
    from services.brokers import start_embedded_broker
    from services.bus.admin import ensure_topics
    from services.bus.kafka import KafkaEventPublisher

    topics = Topics()
    report(f"{config.length} of {config.nodes} nodes: starting Apache Kafka in {directory}")
    # plain text, as the history bench's broker (services.bench.history.bench): the week is
    # written by this process before the stack starts, so a secured broker would need its admin
    # for that and every service's principal for the stack (`stack_identities`); not done yet
    broker, _ = start_embedded_broker(directory / "broker", "apache-kafka", "plaintext")
    try:
        from services.bench.history.bench import HistoryBenchConfig, write_history
        from services.bench.history.measure import service_env

        publisher = KafkaEventPublisher(broker.bootstrap, topics, client_id="bench-kills")
        try:
            partitions = ensure_topics(broker.bootstrap, topics)
            bench = HistoryBenchConfig(nodes=config.nodes, gpus_per_node=config.gpus_per_node)
            generator, written = write_history(
                bench, config.length, topics, partitions, publisher, report
            )
            written_until = generator.now
        finally:
            publisher.close()
        result: dict[str, Any] = {"history": config.length, "generated": written}
        with service_env(FAIRSHARE_CHECKPOINT_EVERY_S=str(config.checkpoint_every_s)):
            result.update(_kills_on_stack(config, broker.bootstrap, topics, directory, report))
        live_from = datetime.fromtimestamp(written_until, UTC)
        result.update(_settle_and_audit(broker.bootstrap, topics, directory, live_from, report))
    finally:
        broker.stop()
    result["ok"] = bool(
        result.get("audit_identical")
        and result.get("decision_violations") == 0
        and all("failed" not in kill for kill in result.get("kills", {}).values())
    )
    return result


def _kills_on_stack(
    config: KillsConfig, bootstrap: str, topics: Topics, directory: Path, report: Report
) -> dict[str, Any]:
    from services.brokers.handle import free_port
    from services.launcher import Stack, UpConfig
    from services.launcher.config import RestartPolicy

    up = UpConfig(
        bootstrap=bootstrap,
        topics=topics,
        data_dir=directory,
        database_url=f"sqlite:///{directory.resolve()}/fairshare.db",
        api_port=free_port(),
        cluster="bench",  # the history's pool: the stack's agent adds its nodes to it
        nodes=config.nodes,
        gpus_per_node=config.gpus_per_node,
        submit_every_s=config.submit_every_s,
        schedulers=2,
        restart=RestartPolicy(initial_s=0.5, max_s=5.0),
    )
    stack = Stack(up)
    began = time.monotonic()
    try:
        stack.start()
        stack.wait_for_api(timeout_s=config.first_start_timeout_s, report=report)
        first_start_s = round(time.monotonic() - began, 1)
        report(f"stack caught up with the history in {first_start_s} s ({stack.pids()})")
        _wait_for_checkpoints(stack, config.first_start_timeout_s, report)
        kills = {name: _kill_one(stack, name, topics, config, report) for name in FAULTS}
    finally:
        stack.stop()
    return {"first_start_s": first_start_s, "kills": kills}


def _log(stack: Any, name: str) -> Path:
    return Path(stack.child(name).log_path)


def _size(path: Path) -> int:
    return path.stat().st_size if path.exists() else 0


def _wait_for_checkpoints(stack: Any, timeout_s: float, report: Report) -> None:
    deadline = time.monotonic() + timeout_s
    waiting = set(CHECKPOINTED)
    while waiting:
        stack.supervise(report)
        waiting = {n for n in waiting if not _saved(stack, n)}
        if time.monotonic() > deadline:
            raise RuntimeError(f"no checkpoint saved by {', '.join(sorted(waiting))}")
        time.sleep(0.5)
    report("every checkpointing service has saved a checkpoint")


def _saved(stack: Any, name: str) -> bool:
    """Whether ``name``'s fold has been checkpointed: for the scheduler, by whichever of the
    schedulers leads (they share one checkpoint)."""
    savers = [name]
    if name == "scheduler":
        savers = [c.name for c in stack.children if c.name.startswith("scheduler")]
    return any("checkpoint saved" in log_since(_log(stack, s), 0) for s in savers)


def _kill_one(
    stack: Any, name: str, topics: Topics, config: KillsConfig, report: Report
) -> dict[str, Any]:
    from services.bench.chaos.faults import kill_lease_holder, kill_service

    if name == "scheduler":
        offsets = {c.name: _size(Path(c.log_path)) for c in stack.children}
        failover = kill_lease_holder(stack, topics, timeout_s=config.back_timeout_s, report=report)
        killed_at = time.monotonic() - failover.failover_s
        back = _wait_back(stack, failover.killed, offsets[failover.killed], killed_at, config)
        figures = {"failover_s": round(failover.failover_s, 1), "killed": failover.killed, **back}
    else:
        offset = _size(_log(stack, name))
        ends = _ends(stack.config.bootstrap, topics) if name == "projector" else {}
        kill_service(stack, name)
        killed_at = time.monotonic()
        figures = _wait_back(stack, name, offset, killed_at, config, ends)
    report(f"kill -9 {name}: {figures}")
    return figures


def _wait_back(
    stack: Any,
    name: str,
    offset: int,
    killed_at: float,
    config: KillsConfig,
    ends: dict[tuple[str, int], int] | None = None,
) -> dict[str, Any]:
    """Supervise (the restart is the supervisor's) until ``name`` is back."""
    ready = _readiness(stack, name, offset, ends or {})
    deadline = killed_at + config.back_timeout_s
    while time.monotonic() < deadline:
        stack.supervise(lambda _line: None)
        if ready():
            text = log_since(_log(stack, name), offset)
            return {
                "back_s": round(time.monotonic() - killed_at, 1),
                "from_checkpoint": "restored from a checkpoint" in text,
            }
        time.sleep(0.2)
    return {"failed": f"not back within {config.back_timeout_s:g} s"}


_CAUGHT_UP = re.compile(r"caught up with the log")


def _readiness(
    stack: Any, name: str, offset: int, ends: dict[tuple[str, int], int]
) -> Callable[[], bool]:
    if name == "api":
        seen: dict[str, Any] = {}
        api = api_ready(stack.config.api_url, seen)
        return lambda: api() is not None
    if name == "projector":
        from services.bench.history.measure import ProjectorReady

        projector = ProjectorReady(stack.config.bootstrap, stack.config.database_url, ends)
        return lambda: projector() is not None
    path = _log(stack, name)
    return lambda: _CAUGHT_UP.search(log_since(path, offset)) is not None


def _ends(bootstrap: str, topics: Topics) -> dict[tuple[str, int], int]:
    from services.bus.export import end_offsets
    from services.projector.host import PROJECTED

    return end_offsets(bootstrap, [topics.name(kind) for kind in PROJECTED])


def _settle_and_audit(
    bootstrap: str, topics: Topics, directory: Path, live_from: datetime, report: Report
) -> dict[str, Any]:
    """Charging once more, alone, until it has read every fact; then both audits: every
    charge, and every pass the stack's schedulers made (the history's were the generator's,
    not this policy's: they are folded as stated)."""
    from services.audit.decisions_live import audit_live_decisions
    from services.audit.replay import replay
    from services.audit.sources import deliveries_from_kafka

    _charge_to_the_end(bootstrap, topics, directory, report)
    deliveries, invalid = deliveries_from_kafka(bootstrap, topics)
    # a list, not a generator: the audit learns every key first (the keys topic is read last)
    charges = replay([d.envelope for d in deliveries])
    decisions = audit_live_decisions(deliveries, since=live_from)
    report(
        f"audit: {charges.recorded_count} charges recorded, {charges.recomputed_count} "
        f"recomputed, {len(charges.differences)} differences; decisions: {decisions.passes} "
        f"passes, {len(decisions.problems)} violations"
    )
    return {
        "events": charges.events,
        "invalid_records": invalid,
        "charges": charges.recorded_count,
        "audit_identical": charges.identical,
        "audit_differences": charges.differences[:10],
        "decision_passes": decisions.passes,
        "decision_violations": len(decisions.problems),
        "decision_problems": [str(p) for p in decisions.problems[:10]],
    }


def _charge_to_the_end(bootstrap: str, topics: Topics, directory: Path, report: Report) -> None:
    import subprocess
    import sys

    log_path = directory / "logs" / "charging-settle.log"
    command = [sys.executable, "-m", "services.cli", "charging", "--kafka", bootstrap]
    command += ["--topic-prefix", topics.prefix]
    from services.bus.signing import SIGNING_KEY_ENV
    from services.launcher.keys import KEYS_DIR

    env = {**os.environ, "FAIRSHARE_LOG_LEVEL": "INFO"}  # its caught-up line is an info
    # charging as the stack ran it: what it posts is signed with its registered key
    env[SIGNING_KEY_ENV] = str(directory / KEYS_DIR / "charging.key")
    with log_path.open("wb") as out:
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, env=env)
    try:
        deadline = time.monotonic() + 300
        while not _CAUGHT_UP.search(log_since(log_path, 0)):
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"charging did not catch up: see {log_path}")
            time.sleep(0.5)
        time.sleep(2.0)  # what it posts on catching up is flushed by then
    finally:
        process.terminate()
        process.wait(timeout=60)
    report("charging caught up with every fact")
