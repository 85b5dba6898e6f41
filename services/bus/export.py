"""Exporting the whole event log from Kafka to a file an auditor can take away.

Reads every Fairshare topic from its first offset up to the end offsets seen when the export
started (so it terminates on a live cluster), with a throw-away consumer that commits nothing.
Records that are not valid events are counted and skipped: they are already in the dead-letter
topic, which is exported too (as dead-letter events carrying the original bytes).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

from events.ndjson import EventLogWriter
from events.serde import EventDecodeError, decode_binary
from events.topics import Topics
from services.bus.kafka import raw_record


@dataclass(frozen=True)
class ExportResult:
    events: int
    skipped: int
    partitions: int


def export_events(
    bootstrap: str,
    out: Path,
    topics: Topics | None = None,
    *,
    timeout_s: float = 10.0,
    progress: Callable[[int], None] | None = None,
) -> ExportResult:
    topics = topics or Topics()
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"fairshare-export-{uuid.uuid4().hex}",
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
        }
    )
    try:
        metadata = consumer.list_topics(timeout=timeout_s).topics
        assignments: list[TopicPartition] = []
        remaining: dict[tuple[str, int], int] = {}
        for name in topics.all_names():
            if name not in metadata:
                continue
            for partition in sorted(metadata[name].partitions):
                low, high = consumer.get_watermark_offsets(
                    TopicPartition(name, partition), timeout=timeout_s
                )
                if high > low:
                    remaining[(name, partition)] = high
                    assignments.append(TopicPartition(name, partition, OFFSET_BEGINNING))
        consumer.assign(assignments)
        events = skipped = 0
        with EventLogWriter(out) as writer:
            while remaining:
                messages = consumer.consume(num_messages=1000, timeout=timeout_s)
                if not messages:
                    raise TimeoutError(f"export stalled with {len(remaining)} partition(s) left")
                for message in messages:
                    if message.error() is not None:
                        continue
                    key = (message.topic() or "", message.partition() or 0)
                    offset = message.offset() or 0
                    end = remaining.get(key)
                    if end is None or offset >= end:
                        continue
                    try:
                        record = raw_record(message)
                        writer.write(decode_binary(record.value, record.headers))
                        events += 1
                    except EventDecodeError:
                        skipped += 1
                    if offset + 1 >= end:
                        del remaining[key]
                if progress is not None:
                    progress(events)
        return ExportResult(events=events, skipped=skipped, partitions=len(assignments))
    finally:
        consumer.close()
