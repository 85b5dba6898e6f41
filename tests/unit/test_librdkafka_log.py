"""librdkafka's own lines become log records of ``fairshare.kafka.client``, never raw lines
on stderr: ``fairshare up`` showed its user "SASL SCRAM-SHA-512 mechanism handshake failed"
and "Coordinator load in progress: retrying" while its brokers settled."""

from __future__ import annotations

import logging
import socket

import pytest
from confluent_kafka import Producer

from services.bus.connection import LibrdkafkaLog, client_config


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


def test_a_client_that_cannot_connect_logs_records_not_raw_lines(
    capfd: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="fairshare.kafka.client")
    producer = Producer(client_config(f"127.0.0.1:{_closed_port()}", identity={}))
    for _ in range(20):
        producer.poll(0.1)
        if caplog.records:
            break
    assert caplog.records, "librdkafka said nothing of a refused connection"
    assert all(r.name == "fairshare.kafka.client" for r in caplog.records)
    assert any("Connection refused" in r.getMessage() for r in caplog.records)
    # retried by itself: info, not a warning an interactive command would print
    assert max(r.levelno for r in caplog.records) <= logging.INFO
    _out, err = capfd.readouterr()
    # librdkafka's raw form: "%3|1733580000.123|FAIL|rdkafka#producer-1| [thrd:...]: ..."
    raw = [line for line in err.splitlines() if line.startswith("%") and "|FAIL|" in line]
    assert raw == []


def test_only_what_librdkafka_calls_critical_stays_an_error(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG, logger="fairshare.kafka.client")
    log = LibrdkafkaLog()
    for level in (logging.DEBUG, logging.INFO, logging.WARNING, logging.ERROR, logging.CRITICAL):
        log.log(level, "FAIL [rdkafka#producer-1]: %s", "said")
    assert [r.levelno for r in caplog.records] == [
        logging.DEBUG,
        logging.INFO,
        logging.INFO,
        logging.INFO,
        logging.ERROR,
    ]
