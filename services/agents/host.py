"""The agent host: one cluster's agent over the bus port, whichever family's adapter it drives.

Every agent is put together here, the same way: the adapter its family builds from its own
options (``services/agents/<family>/``), the settings every agent shares
(:class:`~services.agents.agent.AgentSettings`), a publisher, and the loop that drives the
adapter (an :class:`AgentLoop`: the generic :class:`~services.agents.agent.ClusterAgent`, or a
family's own: Slurm's and Kubernetes' add what a cluster shared with work around Fairshare has,
:mod:`services.agents.shared_cluster`). :func:`run_agent` then catches the agent up with the
log, from the latest checkpoint of its fold when there is one (only the log's tail is read),
registers its nodes and follows the log until told to stop, saving a checkpoint whenever one
is due.

The host speaks to ports only (a publisher, a reader of the log, a checkpoint store), so the
unit tests run it on the in-memory bus; :mod:`services.agents.serve` wires it to Kafka.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Protocol, TypeVar

from events.positions import Delivery, TopicPartition
from services.agents.adapter import ClusterAdapter
from services.agents.agent import AgentSettings, ClusterAgent
from services.bus.port import EventPublisher
from services.runtime.fold_checkpoints import FoldCheckpoints

A = TypeVar("A", bound=ClusterAdapter)
A_contra = TypeVar("A_contra", bound=ClusterAdapter, contravariant=True)

#: Where to start reading each partition (a checkpoint's positions); None: the first offset.
Start = dict[TopicPartition, int] | None


class AgentLoop(Protocol[A_contra]):
    """What drives an adapter of one family: :class:`ClusterAgent`, and the families' own
    loops (``SlurmAgent``, ``KubernetesAgent``) are each one."""

    def __call__(
        self,
        adapter: A_contra,
        publisher: EventPublisher,
        settings: AgentSettings,
        *,
        clock: Callable[[], float] = ...,
    ) -> ClusterAgent: ...


class LogReader(Protocol):
    """What the host follows the log with (a :class:`~services.bus.follower.LogFollower`):
    the log up to its end in batches, then whatever comes, and how far it has read."""

    positions: dict[TopicPartition, int]

    def poll(self, timeout_s: float = ..., max_records: int = ...) -> list[Delivery]: ...

    def commit(self) -> None: ...

    def catch_up_in_batches(self, stall_timeout_s: float = ...) -> Iterator[list[Delivery]]: ...

    def close(self) -> None: ...


def host_agent(
    adapter: A,
    publisher: EventPublisher,
    settings: AgentSettings,
    *,
    loop: AgentLoop[A] = ClusterAgent,
    clock: Callable[[], float] = time.time,
) -> ClusterAgent:
    """The agent of ``adapter``'s cluster: ``loop`` driving it, publishing to ``publisher``."""
    return loop(adapter, publisher, settings, clock=clock)


def run_agent(
    agent: ClusterAgent,
    follow: Callable[[Start], LogReader],
    should_stop: Callable[[], bool],
    *,
    checkpoints: FoldCheckpoints | None = None,
    poll_s: float = 0.2,
) -> None:
    """Catch ``agent`` up with the log (read by ``follow(start)``: from ``start``, a
    checkpoint's positions, or from the first offset), then run its loop until
    ``should_stop()``. With ``checkpoints``: its fold restored from the latest one, a new one
    saved whenever due (and at once after a catch-up from the first offset). Closes the
    adapter, and the reader."""
    start = _restore(agent, checkpoints)
    reader = follow(start)

    def after_step() -> None:
        if checkpoints is not None and checkpoints.due():
            checkpoints.save(agent.state, reader.positions)

    try:
        # folded as it is read (never the whole log in memory at once)
        history = (d.envelope for batch in reader.catch_up_in_batches() for d in batch)
        agent.run(reader, should_stop, poll_s=poll_s, history=history, after_step=after_step)
    finally:
        reader.close()


def _restore(agent: ClusterAgent, checkpoints: FoldCheckpoints | None) -> Start:
    """The agent's fold from the latest checkpoint, and where the log's tail starts; None
    (the first offset) without checkpoints or without one saved yet."""
    if checkpoints is None:
        return None
    restored = checkpoints.restore()
    if restored is None:
        checkpoints.due_now()  # the whole log is about to be read: keep it once read
        return None
    agent.state = restored.state
    return dict(restored.positions)
