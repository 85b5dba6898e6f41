"""Export through a real broker: what the services published comes back as a file that the
audit replays to the same charges."""

from __future__ import annotations

from pathlib import Path

import pytest

from events import TopicKind, encode_binary, new_event
from events.ndjson import BadLine, read_events
from projections.ledger import Ledger, charge_event_id
from services.bus.export import export_events
from tests.integration.kafka_bus import KafkaBus
from tests.processes import run_fairshare
from tests.unit.test_ledger import T0, _at, run_events

pytestmark = [pytest.mark.broker]


@pytest.mark.broker_fast
def test_export_then_audit_replay_is_identical(bus: KafkaBus, tmp_path: Path) -> None:
    facts = run_events("w1", "lab/a", 2, T0 + 60, T0 + 3 * 3600, True, 600)
    facts += run_events("w2", "lab/b", 1, T0 + 900, T0 + 5000, True, 600, lost=True)
    facts.sort(key=lambda pair: pair[1])
    ledger = Ledger()
    publisher = bus.publisher()
    published = 0
    envelopes = []
    for data, t in facts:
        envelopes.append(new_event(data, source="tests", time=_at(t)))
        publisher.publish(envelopes[-1])
        published += 1
        for charge in ledger.apply(data, float(t)):
            publisher.publish(
                new_event(charge, source="projector", time=_at(t), event_id=charge_event_id(charge))
            )
            published += 1
    publisher.publish_raw(bus.topics.name(TopicKind.WORKLOADS), b"k", b"garbage")
    # Copies of a published fact under another key and on another topic: no consumer takes
    # them, so the export must not write that fact a second (and third) time.
    copy = encode_binary(envelopes[0])
    publisher.publish_raw(bus.topics.name(TopicKind.WORKLOADS), b"other", copy.value, copy.headers)
    publisher.publish_raw(bus.topics.name(TopicKind.BUDGETS), copy.key, copy.value, copy.headers)
    publisher.flush()
    out = tmp_path / "log.ndjson"
    result = export_events(bus.broker.bootstrap, out, bus.topics)
    assert result.events == published
    assert result.skipped == 3
    exported = list(read_events(out))
    assert not any(isinstance(e, BadLine) for e in exported)
    ids = [e.id for e in exported if not isinstance(e, BadLine)]
    assert len(ids) == len(set(ids)) == published, "each event written once"
    replay = run_fairshare("audit", "replay", "--events", str(out), timeout=120)
    assert replay.returncode == 0, replay.stdout + replay.stderr
    assert replay.stdout.strip().splitlines()[-1] == "identical"
