"""Through a real broker: facts in, charges and usage snapshots out, read models in SQL.
Restarts of the charging host and of the projector change nothing."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
from sqlalchemy import create_engine, func, select

from events import TopicKind, new_event
from events.models import DeadLetter, LedgerCharge, NodeRegistered, UsageSnapshot
from projections.ledger import Ledger
from services.charging.driver import ChargingDriver
from services.charging.serve import kafka_charging_host
from services.projector.serve import run_projector
from services.projector.sql_projector import SqlProjector
from services.read_models.migrate import migrate
from services.read_models.tables import hourly_usage, ledger_entries, workloads
from tests.bus_contract import drain
from tests.integration.kafka_bus import KafkaBus
from tests.processes import run_fairshare
from tests.unit.test_ledger import T0, _at, run_events

pytestmark = [pytest.mark.broker]


def _facts() -> list[tuple[object, int]]:
    facts = run_events("w1", "lab/a", 2, T0 + 60, T0 + 3 * 3600, True, 600)
    facts += run_events("w2", "lab/b", 1, T0 + 900, T0 + 5000, True, 600, lost=True)
    facts += run_events("w3", "lab/a", 4, T0 + 100, T0 + 2000, False, 300)
    facts += [
        (NodeRegistered(node=f"node-{w}", cluster="c", pool="p", gpus=8, gpu_type="x"), T0 - 60)
        for w in ("w1", "w2", "w3")
    ]
    return sorted(facts, key=lambda pair: pair[1])


def _charge_host_until(charging: ChargingDriver, charges: int, timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    done = threading.Event()
    host = charging.host

    def stop() -> bool:
        caught_up = host.published >= charges and sum(host.positions.values()) > 0
        return done.is_set() or caught_up or time.monotonic() > deadline

    charging.run(stop, poll_s=0.3)


@pytest.mark.broker_fast
def test_charges_usage_and_read_models_through_the_broker(bus: KafkaBus, tmp_path: Path) -> None:
    # Long on purpose: one pipeline run through a real broker, checked stage by stage (charges,
    # a restart of the host, snapshots, dead letters, read models, the audit).
    facts = _facts()
    expected = Ledger()
    for data, t in facts:
        expected.apply(data, float(t))  # type: ignore[arg-type]
    publisher = bus.publisher()
    for data, t in facts:
        publisher.publish(new_event(data, source="tests", time=_at(t)))  # type: ignore[type-var]
    publisher.publish_raw(bus.topics.name(TopicKind.HEARTBEATS), b"node-x", b"{not json")
    publisher.flush()

    charging = kafka_charging_host(bus.broker.bootstrap, bus.topics, snapshot_every_s=0)
    _charge_host_until(charging, len(expected.entries))
    assert charging.host.published == len(expected.entries)

    ledger_reader = bus.subscriber("check-ledger", [TopicKind.LEDGER])
    published = drain(ledger_reader, len(expected.entries), bus.settle_s)
    ledger_reader.close()
    charges = [d.envelope.data for d in published if isinstance(d.envelope.data, LedgerCharge)]
    assert sorted(c.charge_id for c in charges) == sorted(c.charge_id for c in expected)
    assert {c.charge_id: c for c in charges} == {c.charge_id: c for c in expected}

    # Every fact again, in reverse order (duplicated and reordered), then a restart: the
    # host restores its fold (saved when it stopped), reads the tail and publishes nothing
    # twice.
    for data, t in reversed(facts):
        if not isinstance(data, NodeRegistered):
            publisher.publish(new_event(data, source="tests", time=_at(t)))  # type: ignore[type-var]
    publisher.flush()
    charging = kafka_charging_host(bus.broker.bootstrap, bus.topics, snapshot_every_s=3600)
    restarted = charging.host
    deadline = time.monotonic() + 60
    inputs = 2 * sum(1 for data, _t in facts if not isinstance(data, NodeRegistered))
    charging.run(
        lambda: sum(restarted.positions.values()) >= inputs or time.monotonic() > deadline,
        poll_s=0.3,
    )
    assert charging.restored, "from the checkpoint it saved when it stopped"
    assert sum(restarted.positions.values()) == inputs, "it read every fact, the tail after it"
    assert restarted.published == 0

    usage_reader = bus.subscriber("check-usage", [TopicKind.USAGE, TopicKind.DEADLETTER])
    rest = drain(usage_reader, 2, bus.settle_s)
    usage_reader.close()
    snapshots = [d.envelope.data for d in rest if isinstance(d.envelope.data, UsageSnapshot)]
    assert snapshots
    latest = {u.budget: u for u in snapshots[-1].budgets}
    assert latest["lab/a"].allocated_gpu_s == 2 * (3 * 3600 - 60)
    assert latest["lab/a"].unallocated_gpu_s == 4 * 1900
    assert any(isinstance(d.envelope.data, DeadLetter) for d in rest), "bad record dead-lettered"

    # The projector dies after one batch without committing offsets, then runs again.
    engine = create_engine(f"sqlite:///{tmp_path / 'read.db'}")
    migrate(engine)
    run_projector(
        bus.broker.bootstrap,
        engine,
        lambda: False,
        bus.topics,
        group="rm",
        max_batches=1,
        commit_offsets=False,
    )
    deadline = time.monotonic() + 60

    def caught_up() -> bool:
        with engine.connect() as connection:
            count = connection.execute(select(func.count()).select_from(ledger_entries)).scalar()
        return count == len(expected.entries) or time.monotonic() > deadline

    run_projector(bus.broker.bootstrap, engine, caught_up, bus.topics, group="rm")
    with engine.connect() as connection:
        ids = sorted(connection.execute(select(ledger_entries.c.charge_id)).scalars())
        allocated = connection.execute(
            select(func.sum(hourly_usage.c.allocated_gpu_s)).where(hourly_usage.c.budget == "lab/a")
        ).scalar()
        statuses = dict(
            connection.execute(select(workloads.c.workload_id, workloads.c.status)).all()
        )
    assert ids == sorted(c.charge_id for c in expected)
    assert statuses == {"w1": "succeeded", "w2": "lost", "w3": "succeeded"}, (
        "duplicated and reordered facts do not move a workload back"
    )
    assert allocated == 2 * (3 * 3600 - 60)
    assert SqlProjector(engine, name="rm").positions(), "positions stored with the rows"
    engine.dispose()

    # The auditor: recompute every charge from the facts on Kafka, compare with the read models.
    where = ["--kafka", bus.broker.bootstrap, "--topic-prefix", bus.topics.prefix]
    database = f"sqlite:///{tmp_path / 'read.db'}"
    replay = run_fairshare("audit", "replay", *where, "--database-url", database, timeout=120)
    assert replay.returncode == 0, replay.stdout + replay.stderr
    assert replay.stdout.strip().splitlines()[-1] == "identical"
    verify = run_fairshare("audit", "verify", *where, timeout=120)
    # The bad heartbeat is no fact: reported as skipped, and the ledger is sound.
    assert "1 invalid record(s) on the topics skipped" in replay.stderr
    assert verify.returncode == 0, verify.stdout
    assert "0 violation(s)" in verify.stdout
