"""Running an agent over Kafka: catch up with the log, then follow it.

The agent reads with a :class:`~services.bus.follower.LogFollower`, the one ordering rule of
every reader of LiveState: every topic it needs from the first offset still there (heartbeats
and liveness signals included, for the last time a run it cannot recover was seen), partitions
merged by event time up to each partition's end, each kept in offset order, so that a node is
known before the work placed on it. It first reads to the end offsets seen on start, then
keeps following with the same follower (no consumer group: the state is rebuilt from the log
every start, nothing is committed).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from typing import Any

from events import TopicKind, Topics
from events.envelope import Envelope
from services.agents.adapter import ClusterAdapter
from services.agents.agent import CATCH_UP_TOPICS, ClusterAgent
from services.agents.cadence import DEFAULT_CONFIRM_S
from services.bus.follower import LogFollower
from services.bus.kafka import KafkaEventPublisher

log = logging.getLogger(__name__)


def read_history(
    bootstrap: str,
    topics: Topics,
    kinds: Iterable[TopicKind] = CATCH_UP_TOPICS,
    *,
    timeout_s: float = 10.0,
) -> list[Envelope[Any]]:
    """The log up to its current end, merged by event time (each partition kept in order).
    Records that are not valid events are skipped (their consumers dead-letter them)."""
    follower = LogFollower(bootstrap, tuple(kinds), topics, timeout_s=timeout_s)
    try:
        history = [delivery.envelope for delivery in follower.catch_up()]
    finally:
        follower.close()
    if follower.skipped:
        log.warning(
            "skipped invalid records while catching up", extra={"skipped": follower.skipped}
        )
    return history


def run_on_kafka(
    agent: ClusterAgent,
    bootstrap: str,
    topics: Topics,
    should_stop: Callable[[], bool],
    *,
    poll_s: float = 0.2,
) -> None:
    """Catch ``agent`` up with the log, then run its loop until ``should_stop()``."""
    follower = LogFollower(bootstrap, CATCH_UP_TOPICS, topics, eager=True)
    try:
        # folded as it is read (never the whole log in memory at once)
        history = (d.envelope for batch in follower.catch_up_in_batches() for d in batch)
        agent.run(follower, should_stop, poll_s=poll_s, history=history)
    finally:
        follower.close()


def serve(
    adapter: ClusterAdapter,
    bootstrap: str,
    topics: Topics,
    should_stop: Callable[[], bool],
    *,
    cluster: str,
    pool: str,
    heartbeat_s: float = 10.0,
    confirm_s: float = DEFAULT_CONFIRM_S,
    poll_s: float = 0.2,
) -> ClusterAgent:
    """An agent for ``adapter`` publishing to ``bootstrap``, run until ``should_stop()``."""
    publisher = KafkaEventPublisher(bootstrap, topics, client_id=f"agent-{cluster}")
    agent = ClusterAgent(
        adapter,
        publisher,
        cluster=cluster,
        pool=pool,
        heartbeat_s=heartbeat_s,
        confirm_s=confirm_s,
    )
    try:
        run_on_kafka(agent, bootstrap, topics, should_stop, poll_s=poll_s)
    finally:
        publisher.close()
    return agent
