"""Run Apache Kafka in a Docker container through testcontainers (optional).

For developers who have Docker but no JDK/Maven. testcontainers is an optional
extra (``fairshare[containers]``), so it is imported only when a container is
actually requested; importing this module never needs it.

testcontainers' own ``KafkaContainer`` drives the Confluent ``cp-kafka`` images
through their ``/etc/confluent/docker`` scripts, which the official ``apache/kafka``
image does not have. So the container is configured directly with the environment
variables the apache/kafka image understands, using testcontainers only for the
container lifecycle (and its Ryuk reaper, which removes the container if this
process dies).
"""

from __future__ import annotations

import contextlib
import importlib
import os
import threading
from typing import Any

from .apache_kafka import KAFKA_VERSION
from .handle import BrokerHandle, BrokerStartError, free_port, wait_until_ready

__all__ = ["TESTCONTAINERS_IMAGE", "start_testcontainers_kafka"]

#: The official image of the same broker version the local launcher runs.
TESTCONTAINERS_IMAGE = f"apache/kafka:{KAFKA_VERSION}"
_CONTAINER_PORT = 9092


def _import_optional(module: str) -> Any:
    """Import an optional dependency, or explain how to get it."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise BrokerStartError(
            f"the 'testcontainers' broker needs the optional package {module.split('.')[0]!r}, "
            "which is not installed; install it with `pip install 'fairshare[containers]'` "
            "(and have a Docker engine running), or use another broker kind "
            "(apache-kafka, noida, external)"
        ) from exc


def _check_docker() -> None:
    """Fail early, and clearly, when no Docker engine answers.

    Without this, testcontainers fails deep inside the Docker SDK with an
    error about sockets that does not say what to do.
    """
    docker = _import_optional("docker")
    try:
        client = docker.from_env()
        client.ping()
        client.close()
    except Exception as exc:  # the SDK raises DockerException, requests and OS errors
        raise BrokerStartError(
            "no Docker engine answered (is Docker running, and is DOCKER_HOST right?); "
            f"the 'testcontainers' broker needs one: {exc}"
        ) from exc


def start_testcontainers_kafka(
    image: str = TESTCONTAINERS_IMAGE, *, startup_timeout_s: float = 120
) -> BrokerHandle:
    """Start ``image`` (apache/kafka) as a one-node KRaft broker in Docker.

    The broker advertises ``<docker host>:<port>`` where ``port`` is a free host port
    mapped to the same number inside the container; Kafka clients reconnect to the
    advertised address, so it must be reachable from the host, not only from inside
    the container. The data lives in the container and is discarded by ``stop()``.
    """
    core = _import_optional("testcontainers.core.container")
    _check_docker()
    host = os.environ.get("TESTCONTAINERS_HOST_OVERRIDE") or "localhost"
    port = free_port()
    container: Any = core.DockerContainer(image)
    settings = {
        "KAFKA_NODE_ID": "1",
        "KAFKA_PROCESS_ROLES": "broker,controller",
        "KAFKA_CONTROLLER_QUORUM_VOTERS": "1@localhost:9093",
        "KAFKA_LISTENERS": f"PLAINTEXT://0.0.0.0:{port},CONTROLLER://localhost:9093",
        "KAFKA_ADVERTISED_LISTENERS": f"PLAINTEXT://{host}:{port}",
        "KAFKA_CONTROLLER_LISTENER_NAMES": "CONTROLLER",
        "KAFKA_LISTENER_SECURITY_PROTOCOL_MAP": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
        "KAFKA_INTER_BROKER_LISTENER_NAME": "PLAINTEXT",
        "KAFKA_NUM_PARTITIONS": "1",
        "KAFKA_OFFSETS_TOPIC_REPLICATION_FACTOR": "1",
        "KAFKA_TRANSACTION_STATE_LOG_REPLICATION_FACTOR": "1",
        "KAFKA_TRANSACTION_STATE_LOG_MIN_ISR": "1",
        "KAFKA_SHARE_COORDINATOR_STATE_TOPIC_REPLICATION_FACTOR": "1",
        "KAFKA_SHARE_COORDINATOR_STATE_TOPIC_MIN_ISR": "1",
        "KAFKA_GROUP_INITIAL_REBALANCE_DELAY_MS": "0",
    }
    for key, value in settings.items():
        container.with_env(key, value)
    container.with_bind_ports(port, port)
    try:
        container.start()
    except Exception as exc:  # Docker SDK errors: pull failures, port clashes, ...
        with contextlib.suppress(Exception):
            container.stop()
        raise BrokerStartError(f"could not start the {image} container: {exc}") from exc

    lock = threading.Lock()
    stopped = False

    def stop() -> None:
        nonlocal stopped
        with lock:
            if stopped:
                return
            stopped = True
            container.stop()

    bootstrap = f"{host}:{port}"

    def exited_early() -> str | None:
        with contextlib.suppress(Exception):
            container.get_wrapped_container().reload()
            status = container.get_wrapped_container().status
            if status in ("exited", "dead"):
                logs = container.get_logs()
                return f"the {image} container {status} before it was ready:\n{logs!r}"
        return None

    try:
        wait_until_ready(bootstrap, startup_timeout_s, abort_check=exited_early)
    except BaseException:
        with contextlib.suppress(Exception):
            stop()
        raise
    return BrokerHandle(
        kind="testcontainers",
        bootstrap=bootstrap,
        description=f"{image} in Docker at {bootstrap} (data discarded on stop)",
        stop=stop,
    )
