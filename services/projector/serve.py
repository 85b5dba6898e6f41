"""The projector wired to Kafka: its group's consumer, the keys it judges records by and the log's
ends, around :func:`services.projector.host.project` (``fairshare projector``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from sqlalchemy import Engine

from events import Topics
from services.bus.export import end_offsets
from services.bus.kafka import KafkaEventSubscriber
from services.bus.trust import Believing, KeysFromLog, kafka_keys
from services.metrics.trust import watch_refusals
from services.projector.host import PROJECTED, project
from services.projector.sql_projector import PROJECTOR_NAME, SqlProjector


def believing(subscriber: KafkaEventSubscriber | Any, trust: KeysFromLog) -> Believing:
    """The projector's subscriber handing out only what ``trust`` believes: a record not
    believed is dead-lettered by the projector (it owns the topics it projects) and changes no
    table, exactly as a record that does not decode."""
    return Believing(
        subscriber,
        trust.judge,
        subscriber.dead_letters.reject,
        subscriber.dead_letters.flush,
    )


def run_projector(
    bootstrap: str,
    engine: Engine,
    should_stop: Callable[[], bool],
    topics: Topics | None = None,
    *,
    group: str = PROJECTOR_NAME,
    instance: str = "static",
    max_batches: int | None = None,
    commit_offsets: bool = True,
) -> int:
    """Project until ``should_stop()``; returns the number of events applied. Projectors of
    one ``group`` share its partitions out, each by its own ``instance`` (its static member
    id); positions are stored per partition under the group's name, so a partition that moves
    to another instance resumes where the last one stopped."""
    topics = topics or Topics()
    names = [topics.name(kind) for kind in PROJECTED]
    projector = SqlProjector(engine, name=group)
    # Static membership: a projector restarted after a kill -9 rejoins as the same member and
    # gets its partitions back at once, instead of waiting out the dead member's session
    # (45 s) in a rebalance; a second projector of the same instance is fenced (a fatal error).
    # Its group is its stable name, which also signs (and derives the ids of) its dead letters.
    subscriber = KafkaEventSubscriber(
        bootstrap,
        group,
        PROJECTED,
        topics,
        consumer=group,
        config={"group.instance.id": f"{group}-{instance}"},
    )
    trust = KeysFromLog(kafka_keys(bootstrap, topics))
    watch_refusals("projector", lambda: trust.trust.refused)
    try:
        return project(
            believing(subscriber, trust),
            projector,
            lambda: end_offsets(bootstrap, names),
            should_stop,
            topics=names,
            max_batches=max_batches,
            commit=(lambda: subscriber.commit(asynchronous=True)) if commit_offsets else None,
        )
    finally:
        subscriber.close()
