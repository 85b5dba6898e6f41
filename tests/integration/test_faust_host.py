"""The charging fold hosted by a faust-streaming worker (a real worker process, real broker):
the same charges as the fold computes, and nothing published twice after a restart."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from events import TopicKind, new_event
from events.models import LedgerCharge
from events.positions import Delivery
from projections.ledger import Ledger
from tests.bus_contract import drain
from tests.integration.kafka_bus import KafkaBus
from tests.unit.test_ledger import T0, _at, run_events

pytestmark = [pytest.mark.broker]
REPO = Path(__file__).resolve().parents[2]


def _ledger_while_a_worker_runs(
    bus: KafkaBus,
    log: Path,
    group: str,
    count: int,
    settle_s: float,
    timeout_s: float,
    env: dict[str, str] | None = None,
) -> list[Delivery]:
    """Start a faust worker (``env`` added to its environment), read the ledger topic as
    ``drain`` does (``count`` records, then ``settle_s`` more for extras), stop the worker."""
    worker = subprocess.Popen(
        [sys.executable, "-m", "services.charging.faust_serve"],
        env={
            **os.environ,
            "FAIRSHARE_KAFKA_BOOTSTRAP": bus.broker.bootstrap,
            "FAIRSHARE_TOPIC_PREFIX": bus.topics.prefix,
            **(env or {}),
        },
        cwd=REPO,
        stdout=log.open("wb"),
        stderr=subprocess.STDOUT,
    )
    try:
        reader = bus.subscriber(group, [TopicKind.LEDGER])
        got = drain(reader, count, settle_s=settle_s, timeout_s=timeout_s)
        reader.close()
    finally:
        worker.terminate()
        worker.wait(30)
    return got


def _charges(deliveries: list[Delivery]) -> dict[str, LedgerCharge]:
    return {
        d.envelope.data.charge_id: d.envelope.data
        for d in deliveries
        if isinstance(d.envelope.data, LedgerCharge)
    }


@pytest.mark.slow  # 14-32 s: the default run stays under 10 minutes; CI runs it with -m slow
def test_faust_worker_posts_the_folds_charges_once(bus: KafkaBus, tmp_path: Path) -> None:
    facts = run_events("w1", "lab/a", 2, T0 + 60, T0 + 3 * 3600, True, 600)
    facts += run_events("w2", "lab/b", 1, T0 + 900, T0 + 5000, False, 600)
    expected = Ledger()
    publisher = bus.publisher()
    for data, t in sorted(facts, key=lambda pair: pair[1]):
        expected.apply(data, float(t))
        publisher.publish(new_event(data, source="tests", time=_at(t)))
    publisher.flush()

    first = tmp_path / "worker-1.log"
    got = _ledger_while_a_worker_runs(bus, first, "check", len(expected.entries), 2.0, 90)
    assert _charges(got) == {c.charge_id: c for c in expected}, first.read_text()

    again = _ledger_while_a_worker_runs(
        bus, tmp_path / "worker-2.log", "recheck", len(expected.entries) + 1, 5.0, 20
    )
    assert len(again) == len(expected.entries), "a restarted worker publishes nothing twice"


@pytest.mark.slow  # a faust worker: CI runs it with -m slow
def test_faust_worker_charges_no_forged_fact(bus: KafkaBus, tmp_path: Path) -> None:
    """The faust host judges what it reads as the plain host does: the heartbeat cluster A's
    agent signed for cluster B's node (which would confirm two more hours) is never charged."""
    from services.audit.replay import replay
    from services.bus.signing import SIGNING_KEY_ENV, write_key
    from tests.integration.test_signed_facts import forgeries, genuine
    from tests.signing import KEYS

    history, forged = genuine(), forgeries()
    expected = {c.charge_id: c for c in replay(history, keep_recomputed=True).recomputed}
    publisher = bus.publisher()
    for envelope in [*history, forged["as-api"], forged["a-for-b"]]:
        publisher.publish(envelope)
    publisher.flush()
    key = tmp_path / "charging.key"
    write_key(key, KEYS.charging)
    log = tmp_path / "worker.log"
    # what the genuine facts call for, then 5 s more in which a forged charge would arrive
    got = _ledger_while_a_worker_runs(
        bus, log, "check", len(expected), 5.0, 90, env={SIGNING_KEY_ENV: str(key)}
    )
    assert _charges(got) == expected, log.read_text()
    assert "not believed" in log.read_text()
