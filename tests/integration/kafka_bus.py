"""A bus factory over a real broker, isolating each test by its own topic prefix."""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from pathlib import Path

from events import TopicKind, Topics
from services.brokers import BrokerHandle
from services.bus.admin import ensure_topics
from services.bus.kafka import KafkaEventPublisher, KafkaEventSubscriber
from services.bus.principals import set_up_principals


def service_principals(
    broker: BrokerHandle, topics: Topics, clusters: Iterable[str], directory: Path
) -> dict[str, Path]:
    """Each service's own principal, set up as ``fairshare up`` sets them up, when the
    session's broker is secured (``--broker-security sasl_ssl``): a stack started with them
    runs under the ACLs of each role. None on a plain broker."""
    if broker.security_dir is None:
        return {}
    return set_up_principals(broker.bootstrap, broker.identity, topics, clusters, directory)


class KafkaBus:
    def __init__(self, broker: BrokerHandle, partitions: int = 3) -> None:
        self.broker = broker
        self.partitions = partitions
        self.settle_s = 1.0
        self.topics = Topics(prefix=f"t{uuid.uuid4().hex[:10]}.")
        self._open: list[KafkaEventPublisher | KafkaEventSubscriber] = []
        ensure_topics(broker.bootstrap, self.topics, partitions=partitions)

    def publisher(self) -> KafkaEventPublisher:
        publisher = KafkaEventPublisher(self.broker.bootstrap, self.topics)
        self._open.append(publisher)
        return publisher

    def subscriber(self, group: str, kinds: Iterable[TopicKind]) -> KafkaEventSubscriber:
        subscriber = KafkaEventSubscriber(
            self.broker.bootstrap,
            f"{self.topics.prefix}{group}",
            kinds,
            self.topics,
            config={"session.timeout.ms": 10_000},
        )
        return subscriber

    def close(self) -> None:
        for client in self._open:
            client.close()
