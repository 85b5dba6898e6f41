"""The agent's process: the agent host (:mod:`services.agents.host`) wired to Kafka.

Every ``fairshare agent`` command ends here, with its family's adapter and the loop that drives
it: :func:`serve_agent` signs what the agent publishes with the cluster's key (a secured log
believes an agent for its own cluster only), publishes to Kafka, keeps checkpoints of its fold
on Kafka, and reads the log as follows.

The agent reads with a :class:`~services.bus.follower.LogFollower`, the one ordering rule of
every reader of LiveState: every topic it needs from the first offset still there (heartbeats
and liveness signals included, for the last time a run it cannot recover was seen), partitions
merged by event time up to each partition's end, each kept in offset order, so that a node is
known before the work placed on it. It first reads to the end offsets seen on start, then
keeps following with the same follower (no consumer group, nothing is committed: the state is
the fold of the log, rebuilt on every start from the latest checkpoint of it, or from the first
offset).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from typing import Any, TypeVar

from events import TopicKind, Topics
from events.envelope import Envelope
from services.agents.adapter import ClusterAdapter
from services.agents.agent import CATCH_UP_TOPICS, AgentSettings, ClusterAgent
from services.agents.host import AgentLoop, Start, host_agent, run_agent
from services.bus.checkpoints import KafkaCheckpoints
from services.bus.follower import LogFollower
from services.bus.kafka import KafkaEventPublisher
from services.bus.signing import signed
from services.runtime.fold_checkpoints import FoldCheckpoints

A = TypeVar("A", bound=ClusterAdapter)

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
    checkpoint_every_s: float | None = None,
) -> None:
    """Catch ``agent`` up with the log, then run its loop until ``should_stop()``. With
    ``checkpoint_every_s``: from the latest checkpoint of its fold (then only the log's tail),
    saving one that often (and at once after a catch-up from the first offset)."""

    def follow(start: Start) -> LogFollower:
        return LogFollower(bootstrap, CATCH_UP_TOPICS, topics, eager=True, start=start)

    checkpoints = None
    if checkpoint_every_s:
        name = f"agent-{agent.cluster}"  # one checkpoint per cluster
        store = KafkaCheckpoints(bootstrap, topics, name)
        checkpoints = FoldCheckpoints(store, checkpoint_every_s, name=name)
    run_agent(agent, follow, should_stop, checkpoints=checkpoints, poll_s=poll_s)


def serve_agent(
    adapter: A,
    settings: AgentSettings,
    bootstrap: str,
    topics: Topics,
    should_stop: Callable[[], bool],
    *,
    loop: AgentLoop[A] = ClusterAgent,
    poll_s: float = 0.2,
    checkpoint_every_s: float | None = None,
) -> ClusterAgent:
    """The agent of ``adapter`` (``loop`` driving it) publishing to ``bootstrap``, run until
    ``should_stop()``: every family's agent is served so."""
    # signed with the cluster's key ($FAIRSHARE_SIGNING_KEY): it speaks for this cluster only
    publisher = signed(
        KafkaEventPublisher(bootstrap, topics, client_id=f"agent-{settings.cluster}")
    )
    agent = host_agent(adapter, publisher, settings, loop=loop)
    try:
        run_on_kafka(
            agent,
            bootstrap,
            topics,
            should_stop,
            poll_s=poll_s,
            checkpoint_every_s=checkpoint_every_s,
        )
    finally:
        publisher.close()
    return agent
