"""The load and the baseline of ``fairshare bench latency``.

:class:`OpenLoop` submits at a steady rate *open loop*: submission ``i`` is due at
``start + i / rate`` whatever the answers to the earlier ones took (a pool of threads sends
them, so a slow answer delays no other submission), and each one's send time is kept, taken
from the wall clock just before the request goes out, to be compared with event times.

:class:`RoundTrip` is the baseline measured beside it: one record produced to a scratch topic
with the producer settings every service publishes with (``producer_config``: acks=all,
idempotence, linger.ms 5) and consumed back by a consumer with the followers' fetch settings,
one at a time; from just before ``produce`` to the consumer holding the record.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from services.bench.chaos.load import ACKNOWLEDGED
from services.launcher.lab import USERS


def latency_request(
    index: int, cluster: str, job_s: float, run_id: str
) -> tuple[str, dict[str, Any]]:
    """The user and body of submission ``index``: one GPU, free (no contract), ``job_s`` long;
    the users take turns, so the budgets share the load."""
    users = sorted(USERS)
    user = users[index % len(users)]
    return user, {
        "workload_id": f"lat-{run_id}-{index:06d}",
        "budget": USERS[user][1],
        "pools": [cluster],
        "gpus": 1,
        "min_runtime_s": 0,
        "spec": {"duration_s": job_s},
    }


@dataclass
class OpenLoop:
    """``count`` submissions at ``rate_per_s``, by ``workers`` threads; :meth:`run` blocks."""

    api_url: str
    cluster: str
    count: int
    rate_per_s: float
    job_s: float = 1.0
    workers: int = 16
    run_id: str = field(default_factory=lambda: uuid.uuid4().hex[:6])
    #: workload id -> wall-clock send time (seconds since the epoch)
    sent: dict[str, float] = field(default_factory=dict)
    #: workload id -> HTTP status (0: no answer)
    status: dict[str, int] = field(default_factory=dict)
    #: workload id -> seconds from send to the answer
    answered_s: dict[str, float] = field(default_factory=dict)
    errors: dict[str, str] = field(default_factory=dict)
    started_at: float = 0.0
    ended_at: float = 0.0
    _next: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    @property
    def acknowledged(self) -> set[str]:
        return {w for w, code in self.status.items() if code in ACKNOWLEDGED}

    def run(self, should_stop: Callable[[], bool]) -> None:
        ready = threading.Barrier(self.workers + 1)
        go = threading.Event()
        threads = [
            threading.Thread(target=self._work, args=(should_stop, ready, go), daemon=True)
            for _ in range(self.workers)
        ]
        for thread in threads:
            thread.start()
        ready.wait(timeout=120)  # every worker has its clients: the schedule starts now
        self.started_at = time.monotonic()
        go.set()
        for thread in threads:
            thread.join()
        self.ended_at = time.monotonic()

    def _take(self) -> int | None:
        with self._lock:
            if self._next >= self.count:
                return None
            self._next += 1
            return self._next - 1

    def _work(
        self, should_stop: Callable[[], bool], ready: threading.Barrier, go: threading.Event
    ) -> None:
        from services.client.api import ApiError, FairshareClient

        clients = {
            user: FairshareClient(self.api_url, token, timeout_s=30)
            for user, (token, _) in USERS.items()
        }
        try:
            ready.wait(timeout=120)
            go.wait()
            while not should_stop() and (index := self._take()) is not None:
                ahead = self.started_at + index / self.rate_per_s - time.monotonic()
                if ahead > 0:
                    time.sleep(ahead)
                user, body = latency_request(index, self.cluster, self.job_s, self.run_id)
                client = clients[user]
                workload_id = body["workload_id"]
                sent = time.time()
                began = time.monotonic()
                try:
                    client.submit(body)
                    code = client.last_status
                except ApiError as error:
                    code = error.status
                    self.errors[workload_id] = str(error)[:200]
                self.answered_s[workload_id] = time.monotonic() - began
                self.sent[workload_id] = sent
                self.status[workload_id] = code
        finally:
            for client in clients.values():
                client.close()


@dataclass
class RoundTrip:
    """Produce one record, consume it back; repeated every ``every_s`` until stopped."""

    bootstrap: str
    topic: str
    every_s: float = 0.1
    samples_s: list[float] = field(default_factory=list)
    timeouts: int = 0

    def run(self, should_stop: Callable[[], bool]) -> None:
        from confluent_kafka import Consumer, Producer, TopicPartition
        from confluent_kafka.admin import AdminClient
        from confluent_kafka.cimpl import NewTopic

        from services.bus.connection import client_config
        from services.bus.kafka import producer_config

        admin = AdminClient(client_config(self.bootstrap))
        futures = admin.create_topics([NewTopic(self.topic, num_partitions=1)])
        for future in futures.values():
            try:
                future.result(timeout=30)
            except Exception as error:  # already there (a rerun against an external Kafka)
                if "TOPIC_ALREADY_EXISTS" not in str(error):
                    raise
        producer = Producer(producer_config(self.bootstrap, "bench-roundtrip"))
        consumer = Consumer(
            client_config(
                self.bootstrap,
                {
                    "group.id": f"bench-roundtrip-{uuid.uuid4().hex}",
                    "enable.auto.commit": False,
                    "isolation.level": "read_committed",
                    "fetch.wait.max.ms": 50,  # as the followers (services/bus/follower.py)
                },
            )
        )
        try:
            _, high = consumer.get_watermark_offsets(TopicPartition(self.topic, 0), timeout=30)
            consumer.assign([TopicPartition(self.topic, 0, high)])
            self._warm_up(producer, consumer)
            while not should_stop():
                sample = self._one(producer, consumer)
                if sample is None:
                    self.timeouts += 1
                else:
                    self.samples_s.append(sample)
                time.sleep(self.every_s)
        finally:
            consumer.close()
            producer.flush(10)

    def _warm_up(self, producer: Any, consumer: Any) -> None:
        """Connections and the fetch position settle before the first sample counts."""
        for _ in range(3):
            self._one(producer, consumer)

    def _one(self, producer: Any, consumer: Any, timeout_s: float = 10.0) -> float | None:
        token = uuid.uuid4().hex.encode()
        began = time.monotonic()
        producer.produce(self.topic, key=b"bench", value=token)
        producer.poll(0)
        deadline = began + timeout_s
        while time.monotonic() < deadline:
            message = consumer.poll(0.5)
            producer.poll(0)
            if message is not None and message.error() is None and message.value() == token:
                return time.monotonic() - began
        return None
