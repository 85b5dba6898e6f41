"""The one order in which the ledger's facts are folded (docs/spec/log-v1.md 8.9).

A charge depends on the order its facts are read in, not only on the facts: an hour confirmed
by a heartbeat and then cut short by a loss dated earlier is posted and corrected by a reader
that meets them in that order, and posted once, smaller, by one that meets the loss first. The
totals agree either way; the entries, their ids and revisions do not. So the specification
names one order and every reader that sorts into it derives the same entries with the same
ids: event time to the microsecond, then the topic (what a fact can depend on first, as the
live merge ranks topics: a workload fact before a heartbeat of the same instant), then the
event id. Live charging interleaves its partitions by the same time and rank
(``services.bus.follower.time_order``); the spec says where it can differ.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from events.envelope import Envelope
from events.topics import TopicKind

#: Topics in the order a fact of one can depend on a fact of another at the same instant.
TOPIC_RANK: dict[TopicKind, int] = {
    kind: rank
    for rank, kind in enumerate(
        (
            TopicKind.BUDGETS,
            TopicKind.CLUSTER,
            TopicKind.WORKLOADS,
            TopicKind.COMMANDS,
            TopicKind.HEARTBEATS,
            TopicKind.LIVENESS,
            TopicKind.USAGE,
            TopicKind.LEDGER,
            TopicKind.DEADLETTER,
        )
    )
}
#: The rank of a topic not in :data:`TOPIC_RANK` (after every one that is).
LAST_RANK = len(TOPIC_RANK)

FactKey = tuple[datetime, int, str]


def fact_key(envelope: Envelope[Any]) -> FactKey:
    """Where ``envelope`` comes in the canonical order: (event time, topic rank, event id)."""
    topic = getattr(type(envelope.data), "topic", None)
    rank = TOPIC_RANK.get(topic, LAST_RANK) if isinstance(topic, TopicKind) else LAST_RANK
    return (envelope.time, rank, envelope.id)


def in_fact_order(envelopes: list[Envelope[Any]]) -> list[Envelope[Any]]:
    """``envelopes`` in the canonical order (a new list; the sort is stable, and a log already
    in order costs one pass)."""
    return sorted(envelopes, key=fact_key)
