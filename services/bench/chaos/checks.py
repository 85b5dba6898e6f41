"""What ``fairshare bench chaos`` checks once the faults are over, each against the log read
back from the broker as an auditor would read it:

* **lost**: submissions the API acknowledged that the log does not hold;
* **duplicates**: a command or charge id that appears twice (a restarted charging host or a
  new leader re-posting what was already there);
* **audit**: ``fairshare audit replay`` of the log, against the charges in the log and against
  those in the read models (``--database-url``);
* **views**: every workload's status, attempt and pool in the API's view equal the offline
  fold of the same log sorted by event time (the one ordering rule), and the read models'
  status and attempt equal it too.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from events import TopicKind, Topics
from events.models import WorkloadSubmitted
from events.positions import Delivery
from projections.live_state import LiveState
from services.audit.sources import deliveries_from_kafka
from services.bus.follower import in_time_order

#: A workload as every view must show it: status, attempt, pool (None while unplaced).
Shown = tuple[str, int, str | None]


@dataclass
class LogRead:
    deliveries: list[Delivery] = field(default_factory=list)
    #: Records that are no valid event (their consumers dead-letter them).
    invalid: int = 0


def read_log(bootstrap: str, topics: Topics) -> LogRead:
    """Every record of every event topic, up to the end offsets seen now, with positions."""
    # the one record check every reader makes: a record its consumers dead-letter
    # (undecodable, on another type's topic, keyed by another subject) is not the log's
    deliveries, invalid = deliveries_from_kafka(bootstrap, topics)
    return LogRead(deliveries, invalid)


def submitted_ids(read: LogRead) -> set[str]:
    return {
        d.envelope.data.workload_id
        for d in read.deliveries
        if isinstance(d.envelope.data, WorkloadSubmitted)
    }


def duplicate_ids(read: LogRead, topics: Topics, kind: TopicKind) -> int:
    """Records of ``kind``'s topic whose event id an earlier record already had."""
    name = topics.name(kind)
    counts = Counter(d.envelope.id for d in read.deliveries if d.position.topic == name)
    return sum(n - 1 for n in counts.values())


def folded(read: LogRead, topics: Topics) -> dict[str, Shown]:
    """The offline fold of the log sorted by event time: what a caught-up view must show."""
    from services.api.view import VIEW_KINDS

    names = {topics.name(kind) for kind in VIEW_KINDS}
    state = LiveState()
    for delivery in in_time_order(
        [d for d in read.deliveries if d.position.topic in names], topics
    ):
        state.apply(delivery.envelope)
    return {w.workload_id: (w.status, w.attempt, w.pool) for w in state.cluster.workloads.values()}


def api_view(api_url: str, token: str = "admin-token") -> dict[str, Shown]:
    from services.client.api import FairshareClient

    with FairshareClient(api_url, token, timeout_s=30) as client:
        items = client.workloads(limit=100_000).workloads
    return {w.workload_id: (w.status, w.attempt, w.pool) for w in items}


def read_model_view(database_url: str) -> dict[str, tuple[str, int]]:
    from sqlalchemy import create_engine, select

    from services.read_models.tables import workloads

    engine = create_engine(database_url)
    try:
        with engine.connect() as connection:
            rows = connection.execute(
                select(workloads.c.workload_id, workloads.c.status, workloads.c.attempt)
            )
            return {row.workload_id: (row.status, row.attempt) for row in rows}
    finally:
        engine.dispose()


def differences(expected: dict[str, Any], actual: dict[str, Any], limit: int = 5) -> list[str]:
    """The first few workloads that differ (for the report; empty when equal)."""
    out = []
    for workload_id in sorted(set(expected) | set(actual)):
        want, got = expected.get(workload_id), actual.get(workload_id)
        if want != got:
            out.append(f"{workload_id}: log {want}, view {got}")
            if len(out) >= limit:
                break
    return out
