"""``fairshare bench pipeline``: facts through a live broker into SQL charges, against a bare
consume of the same topics (the floor any Kafka consumer pays)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from services.bench.fixtures import synthetic_log

if TYPE_CHECKING:
    from multiprocessing.context import SpawnProcess

    from sqlalchemy import Engine

    from events import Topics


def _charging_process(bootstrap: str, prefix: str, done: Any) -> None:
    from events import Topics
    from services.charging.serve import kafka_charging_host

    kafka_charging_host(bootstrap, Topics(prefix=prefix), snapshot_every_s=3600).run(done.is_set)


def _projector_process(bootstrap: str, prefix: str, database_url: str, done: Any) -> None:
    from sqlalchemy import create_engine

    from events import Topics
    from services.projector.serve import run_projector

    run_projector(bootstrap, create_engine(database_url), done.is_set, Topics(prefix=prefix))


def pipeline_benchmark(events: int, kafka: str | None = None) -> dict[str, Any]:
    """End to end through a broker: facts (mostly heartbeats) produced to the topics, the
    charging host folding them into charges, the projector writing those into SQL; timed until
    SQL holds every charge. Baseline: a bare confluent-kafka consume of the same input topics."""
    import multiprocessing
    import tempfile
    import uuid

    from sqlalchemy import create_engine

    from events import Topics
    from events.models import LedgerCharge
    from events.ndjson import BadLine, read_events
    from services.brokers import external_broker, start_noida
    from services.bus.admin import ensure_topics
    from services.bus.kafka import KafkaEventPublisher
    from services.read_models.migrate import migrate

    with tempfile.TemporaryDirectory() as tmp:
        broker = external_broker(kafka) if kafka else start_noida(Path(tmp) / "broker")
        try:
            topics = Topics(prefix=f"bench{uuid.uuid4().hex[:6]}.")
            ensure_topics(broker.bootstrap, topics)
            log = Path(tmp) / "facts.ndjson"
            synthetic_log(log, events)
            log_items = [e for e in read_events(log) if not isinstance(e, BadLine)]
            facts = [e for e in log_items if not isinstance(e.data, LedgerCharge)]
            expected = len(log_items) - len(facts)
            publisher = KafkaEventPublisher(broker.bootstrap, topics)
            engine = create_engine(f"sqlite:///{Path(tmp) / 'read.db'}")
            migrate(engine)
            # Separate processes, as deployed: the charging host and the projector do not share
            # one interpreter (and its GIL) in production either.
            context = multiprocessing.get_context("spawn")
            done = context.Event()
            database_url = f"sqlite:///{Path(tmp) / 'read.db'}"
            threads = [
                context.Process(
                    target=_charging_process, args=(broker.bootstrap, topics.prefix, done)
                ),
                context.Process(
                    target=_projector_process,
                    args=(broker.bootstrap, topics.prefix, database_url, done),
                ),
            ]
            started = time.perf_counter()
            for thread in threads:
                thread.start()
            for envelope in facts:
                publisher.publish(envelope)
            publisher.flush()
            stored = _wait_for_charges(engine, expected)
            elapsed = time.perf_counter() - started
            _stop(done, threads)
            seen, bare = _bare_consume(broker.bootstrap, topics, len(facts))
            publisher.close()
            engine.dispose()
            return {
                "events": len(facts),
                "charges_in_sql": stored,
                "charges_expected": expected,
                "seconds": round(elapsed, 3),
                "events_per_s": round(len(facts) / elapsed),
                "baseline_events_per_s": round(seen / bare),
                "ratio": round((len(facts) / elapsed) / (seen / bare), 4),
                "broker": broker.description,
            }
        finally:
            broker.stop()


def _wait_for_charges(engine: Engine, expected: int) -> int:
    """The charges in SQL once there are ``expected`` of them (or after 10 minutes)."""
    from sqlalchemy import func, select

    from services.read_models.tables import ledger_entries

    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:
        with engine.connect() as connection:
            stored: int = connection.execute(
                select(func.count()).select_from(ledger_entries)
            ).scalar_one()
        if stored >= expected:
            break
        time.sleep(0.2)
    return stored


def _stop(done: Any, processes: list[SpawnProcess]) -> None:
    done.set()
    for process in processes:
        process.join(30)
        if process.is_alive():
            process.terminate()


def _bare_consume(bootstrap: str, topics: Topics, count: int) -> tuple[int, float]:
    """How many of ``count`` input facts a bare consumer read, and in how many seconds."""
    import uuid

    from confluent_kafka import Consumer

    from events import TopicKind
    from services.bus.connection import client_config

    consumer = Consumer(
        client_config(
            bootstrap,
            {
                "group.id": f"bench-bare-{uuid.uuid4().hex}",
                "auto.offset.reset": "earliest",
                "enable.auto.commit": False,
            },
        )
    )
    consumer.subscribe([topics.name(TopicKind.WORKLOADS), topics.name(TopicKind.HEARTBEATS)])
    seen = 0
    bare_started = time.perf_counter()
    while seen < count and time.perf_counter() - bare_started < 300:
        seen += sum(1 for m in consumer.consume(1000, 1.0) if m.error() is None)
    bare = time.perf_counter() - bare_started
    consumer.close()
    return seen, bare
