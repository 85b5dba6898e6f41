"""Kafka-protocol brokers for Fairshare: start one, get a bootstrap address, stop it.

Every launcher returns a `BrokerHandle` and raises `BrokerStartError`, so callers
(the CLI, test fixtures) choose a broker by name with `start_broker` and need not
know how it runs: a local Apache Kafka JVM, the embedded noida-db, an external
cluster, or a Docker container.
"""

from .apache_kafka import KAFKA_VERSION, fetch_kafka_jars, start_apache_kafka
from .containers import start_testcontainers_kafka
from .external import external_broker
from .handle import BrokerHandle, BrokerStartError, free_port, wait_until_ready
from .noida import start_noida
from .select import BROKER_KINDS, start_broker

__all__ = [
    "BROKER_KINDS",
    "KAFKA_VERSION",
    "BrokerHandle",
    "BrokerStartError",
    "external_broker",
    "fetch_kafka_jars",
    "free_port",
    "start_apache_kafka",
    "start_broker",
    "start_noida",
    "start_testcontainers_kafka",
    "wait_until_ready",
]
