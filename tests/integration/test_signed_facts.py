"""Signed facts on a real broker: what no signer stated is dead-lettered, named by the audit,
and changes no figure.

A small signed history (keys registered by the admin; budgets and submissions by the API;
placements by the scheduler; nodes, starts, heartbeats and ends by each cluster's agent), and
three forgeries produced as any client with write access could:

* a submission under the API's key id, signed with another key;
* a heartbeat of cluster B's node, signed by cluster A's agent, that would confirm two more
  hours of a run there (and so post their charges);
* a charge typed in by hand onto the ledger topic.

Charging and the projector dead-letter each record of theirs once with the reason; charging
posts exactly the charges the genuine facts call for and the read models hold exactly those;
the live state (scheduler, API view) folds none of the forgeries; ``audit replay`` and
``audit decisions`` name all three, and nothing else differs.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import create_engine, select

from events import TopicKind
from events.envelope import Envelope
from events.models import (
    BudgetCreated,
    DeadLetter,
    GpuHeartbeat,
    GpuReading,
    LedgerCharge,
    NodeGpus,
    NodeRegistered,
    Placement,
    WorkloadFinished,
    WorkloadPlaced,
    WorkloadStarted,
    WorkloadSubmitted,
    charge_id,
)
from events.positions import Delivery
from projections.live_state import LiveState
from services.audit.decisions import signer_problems
from services.audit.replay import replay
from services.audit.sources import audit_log, deliveries_from_kafka, log_from_kafka
from services.bus.export import read_to_end
from services.bus.follower import LogFollower
from services.bus.records import check
from services.bus.signing import SIGNING_KEY_ENV, write_key
from services.charging.serve import kafka_charging_host
from services.projector.serve import run_projector
from services.read_models.migrate import migrate
from services.read_models.tables import ledger_entries, workloads
from services.scheduler.host import INPUTS
from tests.integration.kafka_bus import KafkaBus
from tests.integration.should_stop import until
from tests.signing import KEYS, fact, registrations

pytestmark = [pytest.mark.broker]

#: Four hours ago, on the hour: every hour of the history is closed.
T0 = (int(time.time()) // 3600 - 4) * 3600
HOUR = 3600


def _on(node: str) -> Placement:
    return Placement(nodes=(NodeGpus(node=node, gpus=(0,)),))


def _beat(node: str, cluster: str, workload: str, at: int) -> GpuHeartbeat:
    reading = GpuReading(
        index=0, occupant=workload, attempt=1, utilisation_pct=90.0, memory_used_bytes=1
    )
    return GpuHeartbeat(node=node, cluster=cluster, sequence=at, gpus=(reading,))


def _run(workload: str, node: str, cluster: str, agent: Any, start: int) -> list[Envelope[Any]]:
    pool = cluster
    return [
        fact(
            WorkloadSubmitted(
                workload_id=workload, budget="lab/vision", pools=(pool,), gpus=1,
                min_runtime_s=600, submitter="ana",
            ),
            start - 60, KEYS.api,
        ),
        fact(
            WorkloadPlaced(
                workload_id=workload, attempt=1, pool=pool, placement=_on(node), allocated=True,
                command_id=f"cmd-{workload}",
            ),
            start - 30, KEYS.scheduler,
        ),
        fact(
            WorkloadStarted(
                workload_id=workload, attempt=1, pool=pool, placement=_on(node), allocated=True,
                budget="lab/vision",
            ),
            start, agent,
        ),
    ]  # fmt: skip


def genuine() -> list[Envelope[Any]]:
    history = registrations(T0 - 900)
    history += [
        fact(BudgetCreated(budget="lab", created_by="admin"), T0 - 600, KEYS.api),
        fact(BudgetCreated(budget="lab/vision", created_by="admin"), T0 - 599, KEYS.api),
    ]
    for node, cluster, agent in (
        ("n-a", "cluster-a", KEYS.agent_a),
        ("n-b", "cluster-b", KEYS.agent_b),
    ):
        registered = NodeRegistered(node=node, cluster=cluster, pool=cluster, gpus=1, gpu_type="x")
        history.append(fact(registered, T0 - 300, agent))
    # wl-1 on cluster A: two hours and a bit, confirmed and ended
    history += _run("wl-1", "n-a", "cluster-a", KEYS.agent_a, T0 + 10)
    history.append(
        fact(_beat("n-a", "cluster-a", "wl-1", T0 + HOUR + 60), T0 + HOUR + 60, KEYS.agent_a)
    )
    history.append(
        fact(
            WorkloadFinished(workload_id="wl-1", attempt=1, outcome="succeeded"),
            T0 + 2 * HOUR + 100,
            KEYS.agent_a,
        )
    )
    # wl-2 on cluster B: still running, confirmed within its first hour only
    history += _run("wl-2", "n-b", "cluster-b", KEYS.agent_b, T0 + 20)
    history.append(fact(_beat("n-b", "cluster-b", "wl-2", T0 + 600), T0 + 600, KEYS.agent_b))
    return history  # fmt: skip


def forgeries() -> dict[str, Envelope[Any]]:
    submission = WorkloadSubmitted(
        workload_id="wl-forged", budget="lab/vision", pools=("cluster-a",), gpus=1,
        min_runtime_s=600, submitter="mallory",
    )  # fmt: skip
    as_api = KEYS.stranger.sign(fact(submission, T0 + 30)).model_copy(
        update={"signer": KEYS.api.key_id}
    )
    # would confirm wl-2's first two hours on B's node: two more charges
    a_for_b = fact(
        _beat("n-b", "cluster-b", "wl-2", T0 + 2 * HOUR + 60), T0 + 2 * HOUR + 60, KEYS.agent_a
    )
    by_hand = fact(
        LedgerCharge(
            charge_id=charge_id("wl-1", 1, T0 // HOUR + 3), workload_id="wl-1",
            budget="lab/vision", pool="cluster-a",
            bucket_start=datetime.fromtimestamp(T0 + 3 * HOUR, UTC), kind="allocated",
            debit_account="budget:lab/vision", credit_account="capacity:cluster-a",
            gpu_seconds=3600, amount=3600,
        ),
        T0 + 3 * HOUR, source="fairshare/charging",
    )  # fmt: skip
    return {"as-api": as_api, "a-for-b": a_for_b, "by-hand": by_hand}


def _publish(bus: KafkaBus, envelopes: list[Envelope[Any]]) -> None:
    publisher = bus.publisher()
    for envelope in envelopes:
        publisher.publish(envelope)
    publisher.flush()


def _dead_letters(bus: KafkaBus) -> list[DeadLetter]:
    letters = []
    for record in read_to_end(bus.broker.bootstrap, [bus.topics.name(TopicKind.DEADLETTER)]):
        checked = check(record, bus.topics)
        assert isinstance(checked, Delivery)
        assert isinstance(checked.envelope.data, DeadLetter)
        letters.append(checked.envelope.data)
    return letters


def _charges(bus: KafkaBus) -> dict[str, LedgerCharge]:
    found = {}
    for record in read_to_end(bus.broker.bootstrap, [bus.topics.name(TopicKind.LEDGER)]):
        checked = check(record, bus.topics)
        if isinstance(checked, Delivery) and checked.envelope.signer == KEYS.charging.key_id:
            found[checked.envelope.data.charge_id] = checked.envelope.data
    return found


def test_forgeries_are_dead_lettered_named_by_the_audit_and_change_no_figure(
    bus: KafkaBus, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bootstrap, topics = bus.broker.bootstrap, bus.topics
    history, forged = genuine(), forgeries()
    expected = {c.charge_id: c for c in replay(history, keep_recomputed=True).recomputed}
    # wl-1's three hours; wl-2's first hour is not confirmed closed (the forged heartbeat
    # would confirm two of its hours: two more charges)
    assert len(expected) == 3
    _publish(bus, history + list(forged.values()))

    # Charging, with its own key: the charges of the genuine facts, no more.
    key = tmp_path / "charging.key"
    write_key(key, KEYS.charging)
    monkeypatch.setenv(SIGNING_KEY_ENV, str(key))
    host = kafka_charging_host(bootstrap, topics, snapshot_every_s=3600, checkpoint_every_s=None)
    host.run(until(lambda: len(_dead_letters(bus)) >= 2 and len(_charges(bus)) >= 3, 90), 0.2)
    time.sleep(1.0)  # anything more it would post
    assert _charges(bus) == expected

    # The projector: the read models hold the genuine workloads and charges only.
    engine = create_engine(f"sqlite:///{tmp_path / 'read.db'}")
    migrate(engine)
    group = f"{topics.prefix}projector"
    run_projector(
        bootstrap, engine, until(lambda: len(_dead_letters(bus)) >= 4, 90), topics, group=group
    )
    with engine.connect() as connection:
        projected = {row[0] for row in connection.execute(select(workloads.c.workload_id))}
        entries = {row[0] for row in connection.execute(select(ledger_entries.c.charge_id))}
    engine.dispose()
    assert projected == {"wl-1", "wl-2"}
    assert entries == set(expected)

    # Each forgery dead-lettered once by each consumer that reads it, with the reason.
    letters = _dead_letters(bus)
    by = sorted((letter.consumer, letter.source_topic.rsplit(".", 1)[-1]) for letter in letters)
    assert by == sorted(
        [("charging", "workloads"), ("charging", "heartbeats"),
         (group, "workloads"), (group, "ledger")]
    )  # fmt: skip
    assert all(letter.reason.startswith("not believed: ") for letter in letters)
    reasons = " | ".join(letter.reason for letter in letters)
    assert "the signature is not api's" in reasons
    assert "agent:cluster-a may not state it: it names cluster cluster-b" in reasons
    assert "unsigned, and charging signs since" in reasons

    # The live state (the scheduler's, the API view's reading): none of them folded.
    follower = LogFollower(bootstrap, INPUTS, topics)
    try:
        state = LiveState()
        for delivery in follower.catch_up():
            state.apply(delivery.envelope)
    finally:
        follower.close()
    assert "wl-forged" not in state.cluster.workloads
    assert state.trust.refused == {"bad-signature": 1, "not-its-fact": 1}

    # The audit names the three, and nothing else differs.
    result = audit_log(list(log_from_kafka(bootstrap, topics)))
    named = [line for line in result.differences if line.startswith("not believed")]
    assert len(named) == 3, result.differences
    for envelope in forged.values():
        assert sum(envelope.id in line for line in named) == 1
    assert result.differences == named
    deliveries, _invalid = deliveries_from_kafka(bootstrap, topics)
    problems = signer_problems([d.envelope for d in deliveries])
    assert sorted(p.rule for p in problems) == ["signer"] * 3
    assert {e.id for e in forged.values()} == {
        line.rsplit("[event ", 1)[1].rstrip("]") for line in map(str, problems)
    }


def test_keys_setup_makes_and_registers_every_signers_key_once(
    bus: KafkaBus, tmp_path: Path
) -> None:
    """``fairshare keys setup`` (the compose file's kafka-setup): a key per signer, made in a
    private directory and registered by the admin; run again with another cluster, only that
    agent's key is made and registered."""
    from typer.testing import CliRunner

    from projections.trust import Trust
    from services.bus.trust import kafka_keys
    from services.launcher.keys_cli import keys_app

    bootstrap, prefix = bus.broker.bootstrap, bus.topics.prefix
    runner = CliRunner()
    where = ["--dir", str(tmp_path / "keys"), "--kafka", bootstrap, "--topic-prefix", prefix]
    first = runner.invoke(keys_app, ["setup", *where, "--cluster", "demo"])
    assert first.exit_code == 0, first.output
    assert "5 key(s) registered" in first.output
    assert (tmp_path / "keys").stat().st_mode & 0o777 == 0o700
    names = sorted(path.name for path in (tmp_path / "keys").iterdir())
    assert names == ["admin.key", "agent-demo.key", "api.key", "charging.key", "scheduler.key"]

    again = runner.invoke(keys_app, ["setup", *where, "--cluster", "demo", "--cluster", "b"])
    assert again.exit_code == 0, again.output
    assert "1 key(s) registered" in again.output
    trust = Trust()
    trust.learn_keys(kafka_keys(bootstrap, bus.topics)())
    assert trust.refusals == []
    identities = sorted(key.identity for key in trust.book.keys.values())
    assert identities == ["admin", "agent:b", "agent:demo", "api", "charging", "scheduler"]
