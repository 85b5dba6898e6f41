"""Kafka-protocol brokers for Fairshare: start one, get a bootstrap address, stop it.

Every launcher returns a `BrokerHandle` and raises `BrokerStartError`, so callers
(the CLI, test fixtures) choose a broker by name with `start_broker` and need not
know how it runs: a local Apache Kafka JVM (one node or a replicated cluster), the
embedded noida-db, an external cluster, or a Docker container.
"""

from .apache_kafka import (
    KAFKA_VERSION,
    KafkaCluster,
    KafkaUnavailableError,
    fetch_kafka_jars,
    start_apache_kafka,
    start_kafka_cluster,
)
from .containers import start_testcontainers_kafka
from .external import external_broker
from .handle import BrokerHandle, BrokerStartError, free_port, wait_until_ready
from .java import JavaRuntime, find_java
from .noida import start_noida
from .select import (
    BROKER_KINDS,
    DEFAULT_EMBEDDED_SECURITY,
    EMBEDDED_KINDS,
    NOT_CRASH_SAFE,
    embedded_security,
    start_broker,
    start_embedded_broker,
)
from .watch import BrokerGaveUpError, BrokerWatch

__all__ = [
    "BROKER_KINDS",
    "DEFAULT_EMBEDDED_SECURITY",
    "EMBEDDED_KINDS",
    "KAFKA_VERSION",
    "NOT_CRASH_SAFE",
    "BrokerGaveUpError",
    "BrokerHandle",
    "BrokerStartError",
    "BrokerWatch",
    "JavaRuntime",
    "KafkaCluster",
    "KafkaUnavailableError",
    "embedded_security",
    "external_broker",
    "fetch_kafka_jars",
    "find_java",
    "free_port",
    "start_apache_kafka",
    "start_broker",
    "start_embedded_broker",
    "start_kafka_cluster",
    "start_noida",
    "start_testcontainers_kafka",
    "wait_until_ready",
]
