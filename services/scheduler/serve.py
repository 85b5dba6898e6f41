"""The scheduler wired to Kafka: the one place its adapters are chosen (the log's follower, the
signed publisher, the fold's checkpoints on the broker and the leases' topic) around
:class:`services.scheduler.host.SchedulerService` (``fairshare scheduler``)."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

from events import Topics
from services.bus.checkpoints import KafkaCheckpoints
from services.bus.follower import LogFollower
from services.bus.kafka import KafkaEventPublisher
from services.bus.lease import KafkaLeaseLog
from services.bus.signing import signed
from services.runtime.fold_checkpoints import FoldCheckpoints
from services.scheduler.host import INPUTS, SchedulerConfig, SchedulerService
from services.scheduler.lease import Lease, LeaseTiming, LogLease, LogPoolLeases, PoolLeases


def kafka_scheduler(
    bootstrap: str,
    topics: Topics | None = None,
    *,
    lease: Lease | None = None,
    pool_leases: PoolLeases | None = None,
    config: SchedulerConfig | None = None,
    clock: Callable[[], float] = time.time,
    checkpoint_every_s: float | None = 300.0,
) -> SchedulerService:
    """The scheduler over Kafka at ``bootstrap``. ``checkpoint_every_s``: how often to
    checkpoint the fold (None: never, and start from the log's first offset)."""
    topics = topics or Topics()
    checkpoints = None
    if checkpoint_every_s is not None:
        store = KafkaCheckpoints(bootstrap, topics, "scheduler")
        checkpoints = FoldCheckpoints(store, checkpoint_every_s, name="scheduler")
    return SchedulerService(
        lambda: LogFollower(bootstrap, INPUTS, topics, eager=True),
        signed(KafkaEventPublisher(bootstrap, topics, client_id="scheduler")),
        lease=lease,
        pool_leases=pool_leases,
        config=config,
        clock=clock,
        checkpoints=checkpoints,
        resume=lambda start: LogFollower(bootstrap, INPUTS, topics, eager=True, start=start),
    )


def kafka_leases(
    bootstrap: str,
    topics: Topics,
    timing: LeaseTiming,
    *,
    per_pool: bool = False,
    preferred: Sequence[str] = (),
    adopt_s: float | None = None,
) -> LogLease | LogPoolLeases:
    """The scheduler's lease on the log's lease topic at ``bootstrap``: one for the whole
    cluster, or (``per_pool``) one per pool, competing first for the ``preferred`` pools."""
    lease_log = KafkaLeaseLog(bootstrap, topics, record_timeout_s=timing.ttl_s)
    if per_pool:
        return LogPoolLeases(
            lease_log, preferred=preferred, adopt_s=adopt_s, timing=timing, clock=time.monotonic
        )
    return LogLease(lease_log, timing=timing, clock=time.monotonic)
