"""Running an agent over Kafka: catch up with the log, then follow it.

On start the agent reads every topic it needs from the first offset up to the end offsets seen
then (heartbeats included, for the last heartbeat of runs it cannot recover), merged across
partitions by event time with each partition's order kept, so that a node is known before the
work placed on it. It then follows the log through a consumer group of its own (a fresh one per
start: the state is rebuilt from the log every time, nothing is committed), deduplicating what
it already read.
"""

from __future__ import annotations

import heapq
import logging
import time
import uuid
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

from events import EventDecodeError, TopicKind, Topics, decode_binary
from events.envelope import Envelope
from services.agents.adapter import ClusterAdapter
from services.agents.agent import AGENT_TOPICS, CATCH_UP_TOPICS, ClusterAgent
from services.bus.kafka import KafkaEventPublisher, KafkaEventSubscriber, raw_record
from services.bus.records import RawRecord

log = logging.getLogger(__name__)

_TOPIC_RANK = {kind: rank for rank, kind in enumerate(CATCH_UP_TOPICS)}


def _merge_key(envelope: Envelope[Any]) -> tuple[float, int]:
    return (envelope.time.timestamp(), _TOPIC_RANK.get(type(envelope.data).topic, 99))


def read_to_end(
    bootstrap: str, topic_names: list[str], *, timeout_s: float = 10.0
) -> Iterator[RawRecord]:
    """Every record of ``topic_names`` up to the end offsets seen when called; commits nothing.

    Like :func:`services.bus.export.read_to_end`, but it polls in short slices: a consume of
    1,000 records waits its whole timeout when fewer are left, which made each catch-up of a
    small log take ``timeout_s``. ``timeout_s`` bounds each metadata call and any stall."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"fairshare-agent-reader-{uuid.uuid4().hex}",
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
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
                low, high = consumer.get_watermark_offsets(
                    TopicPartition(name, partition), timeout=timeout_s
                )
                if high > low:
                    remaining[(name, partition)] = high
                    assignments.append(TopicPartition(name, partition, OFFSET_BEGINNING))
        if not assignments:
            return
        consumer.assign(assignments)
        stalled_at = time.monotonic() + timeout_s
        while remaining:
            messages = consumer.consume(num_messages=1000, timeout=0.1)
            if not messages:
                if time.monotonic() > stalled_at:
                    raise TimeoutError(f"reading stalled with {len(remaining)} partition(s) left")
                continue
            stalled_at = time.monotonic() + timeout_s
            for message in messages:
                if message.error() is not None:
                    continue
                record = raw_record(message)
                end = remaining.get((record.topic, record.partition))
                if end is None or record.offset >= end:
                    continue
                yield record
                if record.offset + 1 >= end:
                    del remaining[(record.topic, record.partition)]
    finally:
        consumer.close()


def read_history(
    bootstrap: str,
    topics: Topics,
    kinds: Iterable[TopicKind] = CATCH_UP_TOPICS,
    *,
    timeout_s: float = 10.0,
) -> list[Envelope[Any]]:
    """The log up to its current end, partitions merged by event time (each kept in order).
    Records that are not valid events are skipped (their consumers dead-letter them)."""
    partitions: dict[tuple[str, int], list[Envelope[Any]]] = {}
    skipped = 0
    names = [topics.name(kind) for kind in kinds]
    for record in read_to_end(bootstrap, names, timeout_s=timeout_s):
        try:
            envelope = decode_binary(record.value, record.headers)
        except EventDecodeError:
            skipped += 1
            continue
        partitions.setdefault((record.topic, record.partition), []).append(envelope)
    if skipped:
        log.warning("skipped invalid records while catching up", extra={"skipped": skipped})
    return list(heapq.merge(*partitions.values(), key=_merge_key))


def run_on_kafka(
    agent: ClusterAgent,
    bootstrap: str,
    topics: Topics,
    should_stop: Callable[[], bool],
    *,
    poll_s: float = 0.2,
) -> None:
    """Catch ``agent`` up with the log, then run its loop until ``should_stop()``."""
    history = read_history(bootstrap, topics)
    subscriber = KafkaEventSubscriber(
        bootstrap,
        f"agent-{agent.cluster}-{time.time_ns()}",  # from the first offset, every start
        AGENT_TOPICS,
        topics,
    )
    try:
        agent.run(subscriber, should_stop, poll_s=poll_s, history=history)
    finally:
        subscriber.close()


def serve(
    adapter: ClusterAdapter,
    bootstrap: str,
    topics: Topics,
    should_stop: Callable[[], bool],
    *,
    cluster: str,
    pool: str,
    heartbeat_s: float = 10.0,
    poll_s: float = 0.2,
) -> ClusterAgent:
    """An agent for ``adapter`` publishing to ``bootstrap``, run until ``should_stop()``."""
    publisher = KafkaEventPublisher(bootstrap, topics, client_id=f"agent-{cluster}")
    agent = ClusterAgent(adapter, publisher, cluster=cluster, pool=pool, heartbeat_s=heartbeat_s)
    try:
        run_on_kafka(agent, bootstrap, topics, should_stop, poll_s=poll_s)
    finally:
        publisher.close()
    return agent
