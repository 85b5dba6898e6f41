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
from projections.ledger import Ledger
from tests.bus_contract import drain
from tests.integration.kafka_bus import KafkaBus
from tests.unit.test_ledger import T0, _at, run_events

pytestmark = [pytest.mark.broker]
REPO = Path(__file__).resolve().parents[2]


def _worker(bus: KafkaBus, log: Path) -> subprocess.Popen[bytes]:
    env = {
        **os.environ,
        "FAIRSHARE_KAFKA_BOOTSTRAP": bus.broker.bootstrap,
        "FAIRSHARE_TOPIC_PREFIX": bus.topics.prefix,
    }
    return subprocess.Popen(
        [sys.executable, "-m", "services.charging.faust_host"],
        env=env,
        cwd=REPO,
        stdout=log.open("wb"),
        stderr=subprocess.STDOUT,
    )


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

    first = _worker(bus, tmp_path / "worker-1.log")
    try:
        reader = bus.subscriber("check", [TopicKind.LEDGER])
        got = drain(reader, len(expected.entries), settle_s=2.0, timeout_s=90)
        reader.close()
    finally:
        first.terminate()
        first.wait(30)
    charges = {
        d.envelope.data.charge_id: d.envelope.data
        for d in got
        if isinstance(d.envelope.data, LedgerCharge)
    }
    assert charges == {c.charge_id: c for c in expected}, (tmp_path / "worker-1.log").read_text()

    second = _worker(bus, tmp_path / "worker-2.log")
    try:
        reader = bus.subscriber("recheck", [TopicKind.LEDGER])
        again = drain(reader, len(expected.entries) + 1, settle_s=5.0, timeout_s=20)
        reader.close()
    finally:
        second.terminate()
        second.wait(30)
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
    os.environ[SIGNING_KEY_ENV] = str(key)
    try:
        worker = _worker(bus, tmp_path / "worker.log")
    finally:
        del os.environ[SIGNING_KEY_ENV]
    try:
        reader = bus.subscriber("check", [TopicKind.LEDGER])
        # what the genuine facts call for, then 5 s more in which a forged charge would arrive
        got = drain(reader, len(expected), settle_s=5.0, timeout_s=90)
        reader.close()
    finally:
        worker.terminate()
        worker.wait(30)
    charges = {
        d.envelope.data.charge_id: d.envelope.data
        for d in got
        if isinstance(d.envelope.data, LedgerCharge)
    }
    assert charges == expected, (tmp_path / "worker.log").read_text()
    assert "not believed" in (tmp_path / "worker.log").read_text()
