"""``fairshare bench rebuild``: the SQL projector's first start on an existing log, the read
models rebuilt from its first fact. The log is read as a catching-up projector reads it, a
partition at a time (each topic's facts in turn, out of time order across them), in the
projector's batches; the figure is facts per second overall, per topic (each costs the
projector differently: the workloads topic, read last, most per fact) and per tenth of the log,
whose last over first says whether it stays flat as history grows. The baseline in the same run
is the decode of the same log alone (what any reader pays before projecting)."""

from __future__ import annotations

import tempfile
import time
from pathlib import Path
from typing import Any

#: Facts per transaction, as the projector service batches what it polls.
BATCH = 500


def rebuild_benchmark(events: int, database_url: str | None = None) -> dict[str, Any]:
    from sqlalchemy import create_engine

    from events.ndjson import BadLine, read_events
    from events.positions import Delivery, Position
    from services.bench.fixtures import synthetic_log
    from services.projector.sql_projector import SqlProjector
    from services.read_models.migrate import migrate

    with tempfile.TemporaryDirectory() as tmp:
        log = Path(tmp) / "events.ndjson"
        synthetic_log(log, events)
        started = time.perf_counter()
        decoded = [item for item in read_events(log) if not isinstance(item, BadLine)]
        decode_s = time.perf_counter() - started
        by_topic: dict[str, list[Any]] = {}
        for item in decoded:
            by_topic.setdefault(str(item.data.topic), []).append(item)
        deliveries = [
            Delivery(item, Position(topic, 0, offset))
            for topic, items in sorted(by_topic.items())
            for offset, item in enumerate(items)
        ]
        engine = create_engine(database_url or f"sqlite:///{Path(tmp) / 'read-models.db'}")
        migrate(engine)
        projector = SqlProjector(engine)
        tenth = max(1, len(deliveries) // 10)
        tenths: list[float] = []
        topic_s: dict[str, float] = {}
        started = last = time.perf_counter()
        done = 0
        for i in range(0, len(deliveries), BATCH):
            batch = deliveries[i : i + BATCH]
            before = time.perf_counter()
            projector.apply(batch)
            batch_s = time.perf_counter() - before
            for delivery in batch:  # a batch across two topics: its time shared by facts
                topic = delivery.position.topic
                topic_s[topic] = topic_s.get(topic, 0.0) + batch_s / len(batch)
            done = min(len(deliveries), i + BATCH)
            if done // tenth > len(tenths) and len(tenths) < 10:
                now = time.perf_counter()
                tenths.append(round(tenth / (now - last)))
                last = now
        projected_s = time.perf_counter() - started
        engine.dispose()
    rate = len(deliveries) / projected_s
    return {
        "facts": len(deliveries),
        "batch": BATCH,
        "facts_per_s": round(rate),
        "per_tenth_facts_per_s": tenths,
        "last_over_first_tenth": round(tenths[-1] / tenths[0], 3) if tenths else None,
        "per_topic_facts_per_s": {
            topic: round(len(by_topic[topic]) / seconds) for topic, seconds in topic_s.items()
        },
        "decode_facts_per_s": round(len(decoded) / decode_s),
        "ratio_to_decode": round(rate / (len(decoded) / decode_s), 4),
    }
