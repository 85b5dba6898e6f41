"""Unit tests of services.brokers that need no running broker, JVM or network.

The launchers themselves are exercised against real brokers by the integration
suite; these tests pin the parts that decide *what* gets run: generated config,
port memory, the jar cache's completion/locking contract, output parsing, and the
error messages for missing tools.
"""

from __future__ import annotations

import base64
import importlib.util
import socket
from pathlib import Path

import pytest

from services.brokers import (
    BROKER_KINDS,
    BrokerHandle,
    BrokerStartError,
    external_broker,
    fetch_kafka_jars,
    free_port,
    start_broker,
    wait_until_ready,
)
from services.brokers.apache_kafka import (
    find_java,
    new_cluster_id,
    render_log4j2_properties,
    render_server_properties,
    summarize_java_output,
)
from services.brokers.handle import PORTS_FILE, read_ports, write_ports
from services.brokers.kafka_config import replication_for, voters_string
from services.brokers.noida import filter_noida_output, parse_kafka_address

NOIDA_UP_OUTPUT = """\
✔ noida-db is running in the background (pid 3395)
noida-db 0.2.3 · pid 3395 · up 0s · 7.0 MB RAM

  ○ postgres       stopped · start it: noida-db start postgres --data-dir /tmp/nd1
  ✔ kafka          127.0.0.1:19092  (18 KB saved)
  ○ mongodb        stopped · start it: noida-db start mongodb --data-dir /tmp/nd1
"""


def _properties(text: str) -> dict[str, str]:
    pairs = (line.split("=", 1) for line in text.splitlines() if line and line[0] != "#")
    return {key: value for key, value in pairs}


def test_server_properties_describe_a_one_node_loopback_kraft_cluster(tmp_path: Path) -> None:
    props = _properties(
        render_server_properties(port=19092, controller_port=19093, log_dir=tmp_path / "logs")
    )
    assert props["process.roles"] == "broker,controller"
    assert props["controller.quorum.voters"] == "1@127.0.0.1:19093"
    assert props["listeners"] == "PLAINTEXT://127.0.0.1:19092,CONTROLLER://127.0.0.1:19093"
    assert props["advertised.listeners"] == "PLAINTEXT://127.0.0.1:19092"
    assert props["log.dirs"] == str(tmp_path / "logs")
    for key in (
        "offsets.topic.replication.factor",
        "transaction.state.log.replication.factor",
        "transaction.state.log.min.isr",
    ):
        assert props[key] == "1"
    assert props["group.initial.rebalance.delay.ms"] == "0"


def test_a_three_node_cluster_replicates_three_times_with_two_in_sync(tmp_path: Path) -> None:
    voters = voters_string([19093, 19193, 19293])
    assert voters == "1@127.0.0.1:19093,2@127.0.0.1:19193,3@127.0.0.1:19293"
    props = _properties(
        render_server_properties(
            port=19192,
            controller_port=19193,
            log_dir=tmp_path / "logs",
            node_id=2,
            voters=voters,
            cluster_size=3,
        )
    )
    assert props["node.id"] == "2"
    assert props["controller.quorum.voters"] == voters
    assert props["listeners"] == "PLAINTEXT://127.0.0.1:19192,CONTROLLER://127.0.0.1:19193"
    assert props["unclean.leader.election.enable"] == "false"
    for key in (
        "default.replication.factor",
        "offsets.topic.replication.factor",
        "transaction.state.log.replication.factor",
    ):
        assert props[key] == "3"
    assert props["min.insync.replicas"] == props["transaction.state.log.min.isr"] == "2"
    assert [replication_for(n) for n in (1, 2, 3, 5)] == [(1, 1), (2, 1), (3, 2), (3, 2)]


def test_log4j2_config_keeps_the_broker_quiet() -> None:
    props = _properties(render_log4j2_properties().replace(" = ", "="))
    assert props["rootLogger.level"] == "warn"


def test_cluster_ids_have_kafkas_uuid_form() -> None:
    for _ in range(200):
        cluster_id = new_cluster_id()
        assert len(cluster_id) == 22
        assert not cluster_id.startswith("-")
        assert len(base64.urlsafe_b64decode(cluster_id + "==")) == 16


def test_ports_round_trip_and_a_corrupt_file_is_ignored(tmp_path: Path) -> None:
    assert read_ports(tmp_path) == {}
    write_ports(tmp_path, {"port": 1234, "controller_port": 1235})
    assert read_ports(tmp_path) == {"port": 1234, "controller_port": 1235}
    (tmp_path / PORTS_FILE).write_text("{not json", encoding="utf-8")
    assert read_ports(tmp_path) == {}


def test_free_port_can_be_bound() -> None:
    port = free_port()
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", port))


def test_noida_output_parsing() -> None:
    noisy = (
        "/x/noida-db: /lib/x86_64-linux-gnu/libc.so.6: weak version `GLIBC_2.39' not found "
        "(required by /x/noida-db)\nreal line"
    )
    assert filter_noida_output(noisy) == "real line"
    assert parse_kafka_address(NOIDA_UP_OUTPUT) == ("127.0.0.1", 19092)
    assert parse_kafka_address("  ○ kafka          stopped · start it: ...") is None


def test_java_output_summary_drops_stack_frames() -> None:
    log = (
        "ERROR Exiting Kafka\n"
        "java.lang.RuntimeException: boom\n"
        "\tat kafka.Kafka.main(Kafka.scala:1)\n"
        "\t... 6 more\n"
        "Caused by: java.net.BindException: Address already in use\n"
    )
    assert summarize_java_output(log).splitlines() == [
        "ERROR Exiting Kafka",
        "java.lang.RuntimeException: boom",
        "Caused by: java.net.BindException: Address already in use",
    ]


def test_a_set_but_broken_java_home_is_reported(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("JAVA_HOME", str(tmp_path))
    with pytest.raises(BrokerStartError, match="JAVA_HOME"):
        find_java()


def test_fetch_rejects_a_version_that_is_not_one(tmp_path: Path) -> None:
    with pytest.raises(BrokerStartError, match="not a Kafka version"):
        fetch_kafka_jars("../../etc", cache_dir=tmp_path)


def test_unknown_kind_lists_the_valid_ones(tmp_path: Path) -> None:
    with pytest.raises(BrokerStartError, match="apache-kafka, noida, external, testcontainers"):
        start_broker("zookeeper", tmp_path)
    assert BROKER_KINDS == ("apache-kafka", "noida", "external", "testcontainers")


def test_only_apache_kafka_runs_as_a_cluster(tmp_path: Path) -> None:
    with pytest.raises(BrokerStartError, match="only apache-kafka runs as a cluster"):
        start_broker("noida", tmp_path, brokers=3)


def test_external_needs_an_address(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("FAIRSHARE_KAFKA_BOOTSTRAP", raising=False)
    with pytest.raises(BrokerStartError, match="FAIRSHARE_KAFKA_BOOTSTRAP"):
        external_broker()


def test_readiness_times_out_with_the_address_in_the_message() -> None:
    port = free_port()  # nothing listens there
    with pytest.raises(BrokerStartError, match=f"127.0.0.1:{port}"):
        wait_until_ready(f"127.0.0.1:{port}", timeout_s=0.5)


def test_a_plain_probe_that_gets_no_answer_names_the_secured_default(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A plain client on a secured listener fails like a missing broker: the message says
    where the settings of `fairshare up`'s secured Kafka are; a secured probe is not told."""
    monkeypatch.delenv("FAIRSHARE_KAFKA_CONFIG", raising=False)
    port = free_port()
    with pytest.raises(BrokerStartError, match="--kafka-config <data dir>/broker/security"):
        wait_until_ready(f"127.0.0.1:{port}", timeout_s=0.3)
    secured = {"security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512"}
    with pytest.raises(BrokerStartError) as raised:
        wait_until_ready(f"127.0.0.1:{port}", timeout_s=0.3, identity=secured)
    assert "--kafka-config" not in str(raised.value)


def test_readiness_stops_when_the_launcher_says_so() -> None:
    with pytest.raises(BrokerStartError, match="process died"):
        wait_until_ready("127.0.0.1:1", timeout_s=30, abort_check=lambda: "process died")


@pytest.mark.skipif(
    importlib.util.find_spec("testcontainers") is not None,
    reason="testcontainers is installed here",
)
def test_testcontainers_kind_without_the_package_says_how_to_get_it(tmp_path: Path) -> None:
    with pytest.raises(BrokerStartError, match="not installed"):
        start_broker("testcontainers", tmp_path)


def test_handle_is_a_context_manager_that_stops() -> None:
    stopped: list[bool] = []
    with BrokerHandle("external", "x:1", "test", stop=lambda: stopped.append(True)) as handle:
        assert handle.bootstrap == "x:1"
    assert stopped == [True]
