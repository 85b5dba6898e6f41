"""Real parts inside the hosts of a :class:`~tests.partitions.netns.Network`: Apache Kafka nodes
(KRaft, plain text, the project's own ``server.properties``) listening on a host's address, and
Fairshare's services started as an operator runs them, each in its host.

A client in the test process reaches them through :meth:`Network.call_in` (an HTTP request, or
a Kafka client whose threads librdkafka starts from that thread, so they are the host's too).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from services.brokers.apache_kafka import kafka_runtime
from services.brokers.kafka_config import render_log4j2_properties, render_server_properties
from tests.partitions.netns import Network
from tests.processes import FAIRSHARE

KAFKA_PORT = 9092
CONTROLLER_PORT = 9093
API_PORT = 8000


@dataclass
class Started:
    """Processes started in hosts, stopped (their process groups) at the end."""

    processes: list[subprocess.Popen[bytes]] = field(default_factory=list)

    def add(self, process: subprocess.Popen[bytes]) -> subprocess.Popen[bytes]:
        self.processes.append(process)
        return process

    def stop(self) -> None:
        for process in self.processes:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGTERM)
        for process in self.processes:
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGKILL)
                process.wait()


def start_kafka(net: Network, hosts: Sequence[str], directory: Path, started: Started) -> str:
    """A KRaft cluster, one node per host (broker and controller), plain text; returns the
    bootstrap servers."""
    java, libs = kafka_runtime()
    addresses = [net.address(host) for host in hosts]
    voters = ",".join(f"{i}@{ip}:{CONTROLLER_PORT}" for i, ip in enumerate(addresses, 1))
    cluster_id = subprocess.run(
        [str(java.path), "-cp", f"{libs}/*", "kafka.tools.StorageTool", "random-uuid"],
        capture_output=True, text=True, check=True, timeout=120,
    ).stdout.strip()  # fmt: skip
    for node, (host, ip) in enumerate(zip(hosts, addresses, strict=True), 1):
        home = directory / host
        home.mkdir(parents=True, exist_ok=True)
        config = home / "server.properties"
        config.write_text(
            render_server_properties(
                port=KAFKA_PORT,
                controller_port=CONTROLLER_PORT,
                log_dir=home / "data",
                node_id=node,
                voters=voters,
                cluster_size=len(hosts),
                host=ip,
                bind=ip,
            )
        )
        (home / "log4j2.properties").write_text(render_log4j2_properties())
        subprocess.run(
            [str(java.path), "-cp", f"{libs}/*", "kafka.tools.StorageTool", "format",
             "-t", cluster_id, "-c", str(config)],
            capture_output=True, check=True, timeout=120,
        )  # fmt: skip
        with (home / "broker.log").open("ab") as log:
            started.add(
                net.run(
                    host,
                    [
                        str(java.path),
                        "-Xmx512m",
                        "-Djava.awt.headless=true",
                        f"-Dlog4j2.configurationFile={home / 'log4j2.properties'}",
                        "-cp",
                        f"{libs}/*",
                        "kafka.Kafka",
                        str(config),
                    ],
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
            )
    return ",".join(f"{ip}:{KAFKA_PORT}" for ip in addresses)


def admin_token(directory: Path) -> tuple[Path, str]:
    """A tokens file with one admin token; the file and the token."""
    path = directory / "tokens.json"
    out = subprocess.run(
        [*FAIRSHARE, "tokens", "add", "admin", "--admin", "--no-expiry", "--file", str(path)],
        capture_output=True, text=True, check=True, timeout=60,
    ).stdout  # fmt: skip
    return path, out.strip().split()[-1]


def start_api(
    net: Network, host: str, bootstrap: str, tokens: Path, directory: Path, started: Started
) -> str:
    """``fairshare api serve`` in ``host``; returns its URL."""
    address = net.address(host)
    with (directory / "api.log").open("ab") as log:
        started.add(
            net.run(
                host,
                [
                    *FAIRSHARE,
                    "api",
                    "serve",
                    "--kafka",
                    bootstrap,
                    "--topic-prefix",
                    "part.",
                    "--tokens",
                    str(tokens),
                    "--host",
                    address,
                    "--port",
                    str(API_PORT),
                    "--insecure-http",
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        )
    return f"http://{address}:{API_PORT}"


@dataclass
class ApiClient:
    """Requests to the API as a client in host ``host`` sends them."""

    net: Network
    host: str
    url: str
    token: str

    def call(
        self, method: str, path: str, body: Any = None, timeout_s: float = 60.0
    ) -> httpx.Response:
        def send() -> httpx.Response:
            with httpx.Client(base_url=self.url, timeout=timeout_s) as client:
                headers = {"Authorization": f"Bearer {self.token}"}
                return client.request(method, path, json=body, headers=headers)

        return self.net.call_in(self.host, send)

    def wait_ready(self, timeout_s: float = 180.0) -> None:
        deadline = time.monotonic() + timeout_s
        while True:
            with contextlib.suppress(httpx.HTTPError):
                if self.call("GET", "/health", timeout_s=5).status_code == 200:
                    return
            if time.monotonic() > deadline:
                raise AssertionError(f"the API at {self.url} did not answer within {timeout_s} s")
            time.sleep(1)


def records_keyed(
    net: Network, host: str, bootstrap: str, topic: str, timeout_s: float = 30.0
) -> list[bytes]:
    """The keys of every record of ``topic``, read from the start as a client in ``host``."""

    def read() -> list[bytes]:
        from confluent_kafka import Consumer, TopicPartition

        consumer = Consumer(
            {"bootstrap.servers": bootstrap, "group.id": f"check-{time.monotonic_ns()}",
             "enable.auto.commit": False, "auto.offset.reset": "earliest"}
        )  # fmt: skip
        try:
            partitions = consumer.list_topics(topic, timeout=timeout_s).topics[topic].partitions
            ends = {}
            for number in partitions:
                _low, high = consumer.get_watermark_offsets(
                    TopicPartition(topic, number), timeout=timeout_s
                )
                ends[number] = high
            consumer.assign([TopicPartition(topic, n, 0) for n in partitions])
            keys: list[bytes] = []
            deadline = time.monotonic() + timeout_s
            done = {n for n, high in ends.items() if high == 0}
            while len(done) < len(ends) and time.monotonic() < deadline:
                message = consumer.poll(0.5)
                if message is None or message.error():
                    continue
                keys.append(message.key() or b"")
                if message.offset() + 1 >= ends[message.partition()]:
                    done.add(message.partition())
            return keys
        finally:
            consumer.close()

    return net.call_in(host, read)


@contextlib.contextmanager
def stopping(started: Started) -> Iterator[Started]:
    try:
        yield started
    finally:
        started.stop()
