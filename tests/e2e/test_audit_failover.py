"""Every decision of the live services re-derived from their log, across a failover.

The stack runs as ``fairshare up`` runs it (each service its own process, supervised, two
schedulers: one leads by lease, one stands by) on a real broker, with the demo's lab and its
stream of workloads, and busier than the demo (submissions every second, a short grace) so
that preemptions happen. Mid-run the scheduler holding the lease is killed with -9 and the
standby takes over. Then the whole log, read back from the broker with its positions, must
audit with 0 violations: every pass of both leaders re-derived from the records below the cut
its commands name (``services/audit/decisions_live.py``), the old leader's last pass allowed
to be cut short by the kill.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections import Counter
from pathlib import Path

import pytest

from events import TopicKind, Topics
from events.models import PlaceCommand, PreemptCommand
from services.audit.decisions_live import audit_live_decisions
from services.audit.sources import deliveries_from_kafka
from services.bench.chaos.faults import kill_lease_holder
from services.brokers import BrokerHandle
from services.brokers.handle import free_port
from services.launcher import Stack, UpConfig
from services.launcher.config import RestartPolicy

pytestmark = [pytest.mark.slow, pytest.mark.broker, pytest.mark.timeout(600)]

#: Seconds of scheduling before and after the kill.
BEFORE_S = 60.0
AFTER_S = 60.0


def _supervise_for(stack: Stack, seconds: float) -> None:
    until = time.monotonic() + seconds
    while time.monotonic() < until:
        stack.supervise(print)
        time.sleep(0.2)


def test_a_live_log_audits_clean_across_a_leader_killed_mid_run(
    broker: BrokerHandle, tmp_path: Path
) -> None:
    topics = Topics(prefix=f"failover-{uuid.uuid4().hex[:8]}.")
    config = UpConfig(
        bootstrap=broker.bootstrap,
        topics=topics,
        data_dir=tmp_path,
        database_url=f"sqlite:///{tmp_path.resolve()}/fairshare.db",
        api_port=free_port(),
        heartbeat_s=1.0,
        heartbeat_timeout_s=15.0,
        scheduler_tick_s=1.0,
        grace_period_s=2,
        submit_every_s=1.0,
        schedulers=2,
        restart=RestartPolicy(initial_s=0.5, max_s=5.0),
    )
    stack = Stack(config)
    halt = threading.Event()
    stream = threading.Thread(target=stack.submit_stream, args=(halt.is_set,), daemon=True)
    try:
        stack.start()
        stack.wait_for_api(timeout_s=240, report=print)
        stream.start()  # the demo's stream of workloads, as fairshare up runs it
        _supervise_for(stack, BEFORE_S)
        failover = kill_lease_holder(stack, topics, report=print)
        print(f"killed {failover.killed}; {failover.new_leader} leads epoch {failover.epoch_after}")
        _supervise_for(stack, AFTER_S)
    finally:
        halt.set()
        if stream.is_alive():
            stream.join(timeout=10)
        stack.stop()

    deliveries, invalid = deliveries_from_kafka(broker.bootstrap, topics)
    assert invalid == 0
    audit = audit_live_decisions(deliveries)
    print(
        f"audit: {audit.passes} passes, {audit.commands} commands, {audit.preemptions} "
        f"preemptions, {audit.cut_short} cut short, {len(audit.problems)} violations"
    )
    assert audit.problems == [], [str(p) for p in audit.problems[:10]]
    assert audit.bad_lines == []

    # The audit covered both leaders, and passes that preempted.
    commands = [
        d.envelope.data
        for d in deliveries
        if d.position.topic == topics.name(TopicKind.COMMANDS)
        and isinstance(d.envelope.data, PlaceCommand | PreemptCommand)
    ]
    epochs = Counter(c.epoch for c in commands)
    assert failover.epoch_before in epochs, epochs
    assert failover.epoch_after in epochs, epochs
    assert audit.commands == len(commands)
    assert audit.passes >= 10
    assert audit.preemptions >= 1
    assert audit.cut_short <= 1
