"""Running an agent over Kafka: catch up with the log, then follow it.

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
from services.agents.agent import CATCH_UP_TOPICS, ClusterAgent
from services.agents.cadence import DEFAULT_CONFIRM_S
from services.bus.checkpoints import KafkaCheckpoints
from services.bus.follower import LogFollower
from services.bus.kafka import KafkaEventPublisher
from services.bus.port import EventPublisher
from services.bus.signing import signed
from services.runtime.fold_checkpoints import FoldCheckpoints

A = TypeVar("A", bound=ClusterAgent)

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
    checkpoints, start = _restore(agent, bootstrap, topics, checkpoint_every_s)
    follower = LogFollower(bootstrap, CATCH_UP_TOPICS, topics, eager=True, start=start)

    def after_step() -> None:
        if checkpoints is not None and checkpoints.due():
            checkpoints.save(agent.state, follower.positions)

    try:
        # folded as it is read (never the whole log in memory at once)
        history = (d.envelope for batch in follower.catch_up_in_batches() for d in batch)
        agent.run(follower, should_stop, poll_s=poll_s, history=history, after_step=after_step)
    finally:
        follower.close()


def _restore(
    agent: ClusterAgent, bootstrap: str, topics: Topics, every_s: float | None
) -> tuple[FoldCheckpoints | None, dict[tuple[str, int], int] | None]:
    """The agent's fold from its latest checkpoint (one per cluster), and where the log's tail
    starts; or no checkpoints at all."""
    if not every_s:
        return None, None
    name = f"agent-{agent.cluster}"
    checkpoints = FoldCheckpoints(KafkaCheckpoints(bootstrap, topics, name), every_s, name=name)
    restored = checkpoints.restore()
    if restored is None:
        checkpoints.due_now()  # the whole log is about to be read: keep it once read
        return checkpoints, None
    agent.state = restored.state
    return checkpoints, dict(restored.positions)


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
    checkpoint_every_s: float | None = None,
) -> ClusterAgent:
    """An agent for ``adapter`` publishing to ``bootstrap``, run until ``should_stop()``."""

    def make(publisher: EventPublisher) -> ClusterAgent:
        return ClusterAgent(
            adapter,
            publisher,
            cluster=cluster,
            pool=pool,
            heartbeat_s=heartbeat_s,
            confirm_s=confirm_s,
        )

    return serve_agent(
        make,
        bootstrap,
        topics,
        should_stop,
        cluster=cluster,
        poll_s=poll_s,
        checkpoint_every_s=checkpoint_every_s,
    )


def serve_agent(
    make: Callable[[EventPublisher], A],
    bootstrap: str,
    topics: Topics,
    should_stop: Callable[[], bool],
    *,
    cluster: str,
    poll_s: float = 0.2,
    checkpoint_every_s: float | None = None,
) -> A:
    """The agent ``make`` builds over a publisher to ``bootstrap``, run until
    ``should_stop()`` (every kind of agent is served so: the generic one, Slurm's,
    Kubernetes')."""
    # signed with the cluster's key ($FAIRSHARE_SIGNING_KEY): it speaks for this cluster only
    publisher = signed(KafkaEventPublisher(bootstrap, topics, client_id=f"agent-{cluster}"))
    agent = make(publisher)
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
