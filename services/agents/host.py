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
from collections.abc import Callable, Iterable
from typing import Any

from events import EventDecodeError, TopicKind, Topics, decode_binary
from events.envelope import Envelope
from services.agents.adapter import ClusterAdapter
from services.agents.agent import AGENT_TOPICS, CATCH_UP_TOPICS, ClusterAgent
from services.bus.export import read_to_end
from services.bus.kafka import KafkaEventPublisher, KafkaEventSubscriber

log = logging.getLogger(__name__)

_TOPIC_RANK = {kind: rank for rank, kind in enumerate(CATCH_UP_TOPICS)}


def _merge_key(envelope: Envelope[Any]) -> tuple[float, int]:
    return (envelope.time.timestamp(), _TOPIC_RANK.get(type(envelope.data).topic, 99))


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
