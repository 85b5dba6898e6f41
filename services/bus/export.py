"""Exporting the whole event log from Kafka to a file an auditor can take away.

Reads every Fairshare topic from its first offset up to the end offsets seen when the export
started (so it terminates on a live cluster), with a throw-away consumer that commits nothing.
Each record is written at most once, and only if it passes the check every consumer applies
(:func:`~services.bus.records.check`). Records that do not are counted and skipped: their
consumers dead-letter them, and the dead-letter topic is exported too (as dead-letter events
carrying the original bytes). The export used to decode without that check, so a copy of a
valid event produced onto another topic, or with another key, was written beside the original:
the same event twice in the file, where no consumer had it even once.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, TopicPartition

from events.ndjson import EventLogWriter
from events.positions import Delivery
from events.topics import Topics
from services.bus.connection import client_config
from services.bus.fatal import FatalLatch
from services.bus.records import RawRecord, check, raw_record, skip


@dataclass(frozen=True)
class ExportResult:
    events: int
    skipped: int
    partitions: int


def watermarks(consumer: Consumer, partition: TopicPartition, timeout_s: float) -> tuple[int, int]:
    """(low, high) offsets of a partition. A topic created a moment ago may not have a leader
    yet: that is retried until ``timeout_s``, other errors are raised."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            low, high = consumer.get_watermark_offsets(partition, timeout=timeout_s)
            return int(low), int(high)
        except KafkaException as error:
            retriable = error.args[0].code() in _NO_LEADER_YET
            if not retriable or time.monotonic() > deadline:
                raise
            time.sleep(0.2)


_NO_LEADER_YET = {
    KafkaError.NOT_LEADER_FOR_PARTITION,
    KafkaError.LEADER_NOT_AVAILABLE,
    KafkaError.UNKNOWN_TOPIC_OR_PART,
}


def end_offsets(
    bootstrap: str, topic_names: list[str], timeout_s: float = 10.0
) -> dict[tuple[str, int], int]:
    """The high watermark of every partition of ``topic_names`` (missing topics: none)."""
    group = f"fairshare-ends-{uuid.uuid4().hex}"
    consumer = Consumer(client_config(bootstrap) | {"group.id": group})
    try:
        metadata = consumer.list_topics(timeout=timeout_s)
        ends: dict[tuple[str, int], int] = {}
        for name in topic_names:
            topic = metadata.topics.get(name)
            if topic is None or topic.error is not None:
                continue
            for partition in topic.partitions:
                _low, high = watermarks(consumer, TopicPartition(name, partition), timeout_s)
                ends[(name, partition)] = high
        return ends
    finally:
        consumer.close()


def read_to_end(
    bootstrap: str, topic_names: list[str], *, timeout_s: float = 10.0
) -> Iterator[RawRecord]:
    """Every record of ``topic_names`` from the first offset up to the end offsets seen when
    called, partition by partition in offset order; commits nothing. A fatal client error
    raises :class:`~services.bus.fatal.FatalBusError`, as from every Kafka reader."""
    return _read(bootstrap, topic_names, None, timeout_s)


def read_range(
    bootstrap: str,
    ranges: Mapping[tuple[str, int], tuple[int, int]],
    *,
    timeout_s: float = 10.0,
) -> Iterator[RawRecord]:
    """The records of each (topic, partition) in ``ranges`` from its first offset up to, not
    including, its last (``ranges``: (first, stop)), as :func:`read_to_end` reads (a stop past
    the partition's end is its end now). What an audit of one closed period reads."""
    names = sorted({topic for topic, _ in ranges})
    return _read(bootstrap, names, ranges, timeout_s)


def _read(
    bootstrap: str,
    topic_names: list[str],
    ranges: Mapping[tuple[str, int], tuple[int, int]] | None,
    timeout_s: float,
) -> Iterator[RawRecord]:
    fatal = FatalLatch("reader")
    consumer = Consumer(
        client_config(bootstrap)
        | {
            "group.id": f"fairshare-reader-{uuid.uuid4().hex}",
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
            "fetch.wait.max.ms": 100,
            "error_cb": fatal.on_error,
        }
    )
    try:
        metadata = consumer.list_topics(timeout=timeout_s).topics
        assignments: list[TopicPartition] = []
        remaining: dict[tuple[str, int], int] = {}
        for name in topic_names:
            if name not in metadata:
                continue
            for partition in sorted(metadata[name].partitions):
                low, high = watermarks(consumer, TopicPartition(name, partition), timeout_s)
                wanted = (low, high) if ranges is None else ranges.get((name, partition), (0, 0))
                first, stop = max(wanted[0], low), min(wanted[1], high)
                if stop > first:
                    remaining[(name, partition)] = stop
                    offset = OFFSET_BEGINNING if ranges is None else first
                    assignments.append(TopicPartition(name, partition, offset))
        if not assignments:
            return
        consumer.assign(assignments)
        last_progress = time.monotonic()
        while remaining:
            # A short wait per call: consume() blocks until it has the full batch or the
            # timeout passes, and the tail of a log is usually less than a batch.
            messages = fatal.consume(consumer, 1000, 0.2)
            if not messages:
                if time.monotonic() - last_progress > timeout_s:
                    raise TimeoutError(f"reading stalled with {len(remaining)} partition(s) left")
                continue
            last_progress = time.monotonic()
            for message in messages:
                record = raw_record(message)
                end = remaining.get((record.topic, record.partition))
                if end is None or record.offset >= end:
                    continue
                yield record
                if record.offset + 1 >= end:
                    del remaining[(record.topic, record.partition)]
    finally:
        consumer.close()


def export_events(
    bootstrap: str,
    out: Path,
    topics: Topics | None = None,
    *,
    timeout_s: float = 10.0,
) -> ExportResult:
    topics = topics or Topics()
    records = read_to_end(bootstrap, topics.all_names(), timeout_s=timeout_s)
    return write_export(records, out, topics)


def write_export(records: Iterable[RawRecord], out: Path, topics: Topics) -> ExportResult:
    """Write each record that passes the check once, in the order read; count the others."""
    events = skipped = 0
    partitions: set[tuple[str, int]] = set()
    with EventLogWriter(out) as writer:
        for record in records:
            partitions.add((record.topic, record.partition))
            checked = check(record, topics)
            if isinstance(checked, Delivery):
                writer.write(checked.envelope)
                events += 1
            else:
                skip(checked, "export")
                skipped += 1
    return ExportResult(events=events, skipped=skipped, partitions=len(partitions))
