"""Runs the SQL projector over the bus: poll a batch, apply it in one transaction (rows and
positions together), then commit the consumer offsets. A crash between the two commits only
causes a redelivery, which the stored positions skip."""

from __future__ import annotations

from collections.abc import Callable

from sqlalchemy import Engine

from events import TopicKind, Topics
from services.bus.kafka import KafkaEventSubscriber
from services.projector.sql_projector import PROJECTOR_NAME, SqlProjector
from services.runtime.gc_pause import gc_paused

#: The topics whose events change a read model. Heartbeats (the bulk of the log) reach the
#: tables only as charges, usage snapshots are the scheduler's, dead letters are the operators'.
PROJECTED = (
    TopicKind.WORKLOADS,
    TopicKind.COMMANDS,
    TopicKind.CLUSTER,
    TopicKind.BUDGETS,
    TopicKind.LEDGER,
)


def run_projector(
    bootstrap: str,
    engine: Engine,
    should_stop: Callable[[], bool],
    topics: Topics | None = None,
    *,
    group: str = PROJECTOR_NAME,
    max_batches: int | None = None,
    commit_offsets: bool = True,
) -> int:
    """Project until ``should_stop()``; returns the number of events applied."""
    projector = SqlProjector(engine, name=group)
    subscriber = KafkaEventSubscriber(bootstrap, group, PROJECTED, topics)
    applied = batches = 0
    try:
        while not should_stop() and (max_batches is None or batches < max_batches):
            with gc_paused():  # decoding and applying allocate no cycles; see gc_pause.py
                batch = subscriber.poll(timeout_s=0.5, max_records=5000)
                if not batch:
                    continue
                applied += projector.apply(batch)
            batches += 1
            if commit_offsets:
                # The positions in SQL are the truth; the group's offsets only save re-reading.
                subscriber.commit(asynchronous=True)
    finally:
        subscriber.close()
    return applied
