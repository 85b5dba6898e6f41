"""Run a real Apache Kafka broker (single-node KRaft) as a local subprocess.

Why not a container or a downloaded tarball: the reference broker is what the event
log's semantics (transactions, compaction, consumer groups) are specified against, and
the only things this needs are a JDK and Maven, which CI machines already have. The
broker jars come from Maven Central through ``kafka-pom.xml`` and are cached per
version, so only the first start pays for the download.

The broker keeps its state in the caller's data directory, and a second start on the
same directory reuses it (same cluster, same ports), so tests can check that events
survive a broker restart.
"""

from __future__ import annotations

import atexit
import base64
import contextlib
import fcntl
import os
import re
import shutil
import signal
import socket
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

from .handle import (
    PORTS_FILE,
    BrokerHandle,
    BrokerStartError,
    free_port,
    read_ports,
    tail_text,
    wait_until_ready,
    write_ports,
)

__all__ = [
    "KAFKA_VERSION",
    "default_cache_dir",
    "fetch_kafka_jars",
    "find_java",
    "new_cluster_id",
    "render_log4j2_properties",
    "render_server_properties",
    "start_apache_kafka",
    "summarize_java_output",
]

#: The broker version the project is tested against.
KAFKA_VERSION = "4.1.1"

_POM = Path(__file__).with_name("kafka-pom.xml")
_COMPLETE_MARKER = ".complete"
_VERSION_RE = re.compile(r"^[0-9]+(\.[0-9]+)*([.-][0-9A-Za-z]+)*$")
_STOP_GRACE_S = 30.0
_ANSI_ESCAPE = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
# Stack frames ("\tat kafka.X(...)", "... 6 more") bury the one line that says why.
_STACK_FRAME = re.compile(r"^\s+(at\s|\.\.\.\s+\d+\s+more)")


def default_cache_dir() -> Path:
    """``$FAIRSHARE_CACHE_DIR``, else ``~/.cache/fairshare``.

    Outside the repository and the data dirs so the jars (about 40 MB) survive
    ``git clean`` and are shared by every checkout and test session on the machine.
    """
    env = os.environ.get("FAIRSHARE_CACHE_DIR")
    if env:
        return Path(env).expanduser()
    return Path.home() / ".cache" / "fairshare"


@contextlib.contextmanager
def _exclusive_lock(path: Path) -> Iterator[None]:
    """Hold an exclusive ``flock`` on ``path`` for the duration of the block.

    Parallel test workers may all find the cache empty at once; the lock makes one
    of them fetch while the others wait and then reuse its result.
    """
    with path.open("a", encoding="utf-8") as handle:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle.fileno(), fcntl.LOCK_UN)


def fetch_kafka_jars(version: str = KAFKA_VERSION, cache_dir: Path | None = None) -> Path:
    """Return a directory holding the runtime jars of Apache Kafka ``version``.

    Downloads them with Maven into ``<cache>/apache-kafka-<version>/libs`` the first
    time. A completion marker is written only after Maven succeeded, so a fetch that
    was interrupted (or failed half-way) is started over, from an emptied directory,
    by the next caller instead of leaving a broken classpath behind.
    """
    if not _VERSION_RE.match(version):
        raise BrokerStartError(f"not a Kafka version: {version!r}")
    root = (cache_dir or default_cache_dir()) / f"apache-kafka-{version}"
    libs = root / "libs"
    marker = root / _COMPLETE_MARKER
    if marker.is_file():
        return libs
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise BrokerStartError(f"cannot create the jar cache {root}: {exc}") from exc
    with _exclusive_lock(root / ".lock"):
        if marker.is_file():  # another process finished while we waited
            return libs
        mvn = shutil.which("mvn")
        if mvn is None:
            raise BrokerStartError(
                "Maven ('mvn') is not on PATH; it is needed once to download the Apache "
                f"Kafka {version} jars into {libs}. Install Maven (and a JDK 17+), or use "
                "another broker kind (noida, external)."
            )
        shutil.rmtree(libs, ignore_errors=True)
        # A private copy of the pom: Maven then writes nothing next to the installed
        # package (which may be read-only), and the cache records what it came from.
        pom = root / "pom.xml"
        shutil.copyfile(_POM, pom)
        command = [
            mvn,
            "-q",
            "-B",
            "-Dstyle.color=never",
            "-f",
            str(pom),
            "dependency:copy-dependencies",
            f"-DoutputDirectory={libs}",
            "-DincludeScope=runtime",
            f"-Dkafka.version={version}",
        ]
        try:
            result = subprocess.run(
                command,
                cwd=root,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
                check=False,
            )
        except OSError as exc:
            raise BrokerStartError(f"could not run Maven ({mvn}): {exc}") from exc
        output = _ANSI_ESCAPE.sub("", result.stdout)
        if result.returncode != 0:
            raise BrokerStartError(
                f"Maven failed (exit {result.returncode}) to fetch the Apache Kafka "
                f"{version} jars into {libs}:\n{tail_text(output)}"
            )
        if not any(libs.glob("kafka_2.13-*.jar")):
            raise BrokerStartError(
                f"Maven succeeded but {libs} holds no kafka_2.13 jar:\n{tail_text(output)}"
            )
        tmp = root / (_COMPLETE_MARKER + ".tmp")
        tmp.write_text(version + "\n", encoding="utf-8")
        tmp.replace(marker)
    return libs


def find_java() -> Path:
    """The ``java`` to run: ``$JAVA_HOME/bin/java`` if JAVA_HOME is set, else PATH's.

    JAVA_HOME wins because that is how CI images and developers pin a JDK; a set but
    broken JAVA_HOME is reported rather than silently bypassed.
    """
    java_home = os.environ.get("JAVA_HOME")
    if java_home:
        java = Path(java_home) / "bin" / "java"
        if not os.access(java, os.X_OK):
            raise BrokerStartError(f"JAVA_HOME is {java_home!r} but {java} is not executable")
        return java
    found = shutil.which("java")
    if found is None:
        raise BrokerStartError(
            "no 'java' on PATH and JAVA_HOME is not set; Apache Kafka needs a JDK 17+"
        )
    return Path(found)


def new_cluster_id() -> str:
    """A fresh KRaft cluster id, in the same form as Kafka's ``Uuid.randomUuid()``.

    That is 16 random bytes, URL-safe base64 without padding (22 characters).
    Like Kafka, ids starting with '-' are rejected: the command line would read them
    as an option.
    """
    while True:
        raw = base64.urlsafe_b64encode(os.urandom(16)).decode("ascii").rstrip("=")
        if not raw.startswith("-"):
            return raw


def render_server_properties(*, port: int, controller_port: int, log_dir: Path) -> str:
    """``server.properties`` for a one-node KRaft cluster on loopback.

    Replication factors and ISR are 1 because there is one node; without that the
    internal topics (consumer offsets, transactions) could never be created.
    ``group.initial.rebalance.delay.ms=0`` makes consumer groups start at once,
    which keeps tests fast.
    """
    settings = {
        "process.roles": "broker,controller",
        "node.id": "1",
        "controller.quorum.voters": f"1@127.0.0.1:{controller_port}",
        "listeners": f"PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{controller_port}",
        "advertised.listeners": f"PLAINTEXT://127.0.0.1:{port}",
        "inter.broker.listener.name": "PLAINTEXT",
        "controller.listener.names": "CONTROLLER",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
        "log.dirs": str(log_dir),
        "num.partitions": "1",
        "offsets.topic.replication.factor": "1",
        "transaction.state.log.replication.factor": "1",
        "transaction.state.log.min.isr": "1",
        "share.coordinator.state.topic.replication.factor": "1",
        "share.coordinator.state.topic.min.isr": "1",
        "group.initial.rebalance.delay.ms": "0",
    }
    lines = ["# Written by services/brokers/apache_kafka.py; rewritten on every start."]
    lines += [f"{key}={_escape_property(value)}" for key, value in settings.items()]
    return "\n".join(lines) + "\n"


def _escape_property(value: str) -> str:
    r"""Escape a value for a Java ``.properties`` file (``\`` is special there)."""
    return value.replace("\\", "\\\\")


def render_log4j2_properties() -> str:
    """A log4j2 config that prints only warnings and errors to the console.

    The broker's INFO output is hundreds of lines per start; broker.log stays
    small enough that its tail in an error message shows the actual failure.
    """
    return (
        "status = warn\n"
        "appender.console.type = Console\n"
        "appender.console.name = STDOUT\n"
        "appender.console.layout.type = PatternLayout\n"
        "appender.console.layout.pattern = [%d] %p %m (%c)%n\n"
        "rootLogger.level = warn\n"
        "rootLogger.appenderRef.stdout.ref = STDOUT\n"
    )


def _choose_ports(data_dir: Path, port: int | None) -> tuple[int, int]:
    """Broker and controller ports: remembered ones first, then fresh free ones.

    The controller port is part of the quorum configuration the storage was
    formatted with, so it is always reused once chosen; the client port may be
    overridden by an explicit ``port``.
    """
    stored = read_ports(data_dir)
    broker_port = port if port is not None else stored.get("port") or free_port()
    controller_port = stored.get("controller_port")
    while controller_port is None or controller_port == broker_port:
        controller_port = free_port()
    return broker_port, controller_port


def _read_from(path: Path, offset: int) -> str:
    """The text of ``path`` after byte ``offset`` (this start's part of an append-only log)."""
    try:
        with path.open("rb") as handle:
            handle.seek(offset)
            return handle.read().decode("utf-8", errors="replace")
    except OSError as exc:
        return f"(could not read {path}: {exc})"


def summarize_java_output(text: str, lines: int = 25) -> str:
    """The last ``lines`` lines of a JVM's output, without stack frames.

    What remains ("ERROR ...", "Caused by: ... Address already in use") is what
    a person needs to see in an error message; the full log stays on disk.
    """
    kept = [line for line in text.splitlines() if not _STACK_FRAME.match(line)]
    return tail_text("\n".join(kept), lines)


def _ensure_ports_free(data_dir: Path, ports: dict[str, int]) -> None:
    """Fail fast if a broker port is already taken.

    Most likely by a broker still running on this same data dir: without this
    check the new JVM would die on the log-dir lock while the readiness probe
    happily talks to the old broker on the same port. SO_REUSEADDR makes the
    check ignore TIME_WAIT leftovers of a broker that was just stopped, exactly
    as Kafka's own bind does.
    """
    for name, number in ports.items():
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                sock.bind(("127.0.0.1", number))
            except OSError as exc:
                raise BrokerStartError(
                    f"cannot start Apache Kafka on {data_dir}: its {name} 127.0.0.1:{number} "
                    f"is in use ({exc.strerror}); is a broker already running on this data "
                    f"dir? Stop it, or pass another port (controller port: edit "
                    f"{data_dir / PORTS_FILE})"
                ) from exc


def _format_storage(java: Path, libs: Path, config: Path, log_dir: Path) -> None:
    """Format the KRaft metadata log, unless ``log_dir`` already holds a cluster.

    Skipping an already formatted directory is what lets a restart keep its topics
    and offsets (formatting again would fail, or with a new id, orphan the data).
    """
    if (log_dir / "meta.properties").is_file():
        return
    command = [
        str(java),
        "-cp",
        f"{libs}/*",
        "kafka.tools.StorageTool",
        "format",
        "-t",
        new_cluster_id(),
        "-c",
        str(config),
    ]
    try:
        result = subprocess.run(
            command,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            check=False,
            timeout=120,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise BrokerStartError(f"could not format Kafka storage in {log_dir}: {exc}") from exc
    if result.returncode != 0:
        raise BrokerStartError(
            f"formatting Kafka storage in {log_dir} failed (exit {result.returncode}):\n"
            f"{summarize_java_output(result.stdout)}"
        )


def _terminate(process: subprocess.Popen[bytes]) -> None:
    """SIGTERM the broker's process group, then SIGKILL after the grace period.

    SIGTERM first so Kafka flushes and closes its logs cleanly (a killed broker
    recovers, but slowly); the process group so nothing it forked survives.
    """
    if process.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(timeout=_STOP_GRACE_S)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait()


def start_apache_kafka(
    data_dir: Path,
    *,
    version: str = KAFKA_VERSION,
    port: int | None = None,
    startup_timeout_s: float = 90,
    stop_at_exit: bool = True,
) -> BrokerHandle:
    """Start an Apache Kafka broker whose state lives in ``data_dir``; wait until it serves.

    ``data_dir`` receives server.properties, log4j2.properties, ports.json, the
    broker's output in broker.log, and the topic data under kraft-logs/. Starting
    again on the same directory (after ``stop()``) brings back the same cluster on
    the same ports. The broker runs in its own process group, so a Ctrl-C meant for
    the caller does not kill it mid-write; ``stop()`` shuts it down, and with
    ``stop_at_exit`` (the default) it also runs at interpreter exit, so a crashed
    caller does not leave an orphaned JVM holding the data dir's lock. Raises
    `BrokerStartError` with the broker's output on failure.
    """
    data_dir = data_dir.expanduser().resolve()
    data_dir.mkdir(parents=True, exist_ok=True)
    java = find_java()
    libs = fetch_kafka_jars(version)
    broker_port, controller_port = _choose_ports(data_dir, port)
    _ensure_ports_free(data_dir, {"port": broker_port, "controller port": controller_port})
    write_ports(data_dir, {"port": broker_port, "controller_port": controller_port})
    server_config, log4j_config = _write_config(data_dir, broker_port, controller_port)
    _format_storage(java, libs, server_config, data_dir / "kraft-logs")

    broker_log = data_dir / "broker.log"
    process, log_offset = _launch(java, libs, data_dir, server_config, log4j_config, broker_log)
    lock = threading.Lock()

    def stop() -> None:
        with lock:
            _terminate(process)
        atexit.unregister(stop)

    if stop_at_exit:
        atexit.register(stop)
    bootstrap = f"127.0.0.1:{broker_port}"

    def exited_early() -> str | None:
        code = process.poll()
        if code is None:
            return None
        return (
            f"Apache Kafka {version} exited with code {code} before it was ready "
            f"(log: {broker_log}):\n{summarize_java_output(_read_from(broker_log, log_offset))}"
        )

    try:
        wait_until_ready(bootstrap, startup_timeout_s, abort_check=exited_early)
    except BrokerStartError as exc:
        stop()
        output = summarize_java_output(_read_from(broker_log, log_offset))
        message = str(exc)
        if output and output not in message:
            message += f"\nbroker output ({broker_log}):\n{output}"
        raise BrokerStartError(message) from None
    except BaseException:
        stop()
        raise

    return BrokerHandle(
        kind="apache-kafka",
        bootstrap=bootstrap,
        description=(
            f"Apache Kafka {version} (KRaft, pid {process.pid}) at {bootstrap}, data in {data_dir}"
        ),
        stop=stop,
    )


def _write_config(data_dir: Path, broker_port: int, controller_port: int) -> tuple[Path, Path]:
    """server.properties and log4j2.properties, rewritten on every start so a changed port or
    a newer version of this module takes effect on a kept data dir."""
    server_config = data_dir / "server.properties"
    log4j_config = data_dir / "log4j2.properties"
    server_config.write_text(
        render_server_properties(
            port=broker_port, controller_port=controller_port, log_dir=data_dir / "kraft-logs"
        ),
        encoding="utf-8",
    )
    log4j_config.write_text(render_log4j2_properties(), encoding="utf-8")
    return server_config, log4j_config


def _launch(
    java: Path,
    libs: Path,
    data_dir: Path,
    server_config: Path,
    log4j_config: Path,
    broker_log: Path,
) -> tuple[subprocess.Popen[bytes], int]:
    """The broker's JVM, and where this start's output begins in ``broker_log`` (it is
    appended to across starts, and an error message shows only this start's part)."""
    command = [
        str(java),
        "-Xmx512m",
        "-Djava.awt.headless=true",
        f"-Dlog4j2.configurationFile={log4j_config}",
        "-cp",
        f"{libs}/*",
        "kafka.Kafka",
        str(server_config),
    ]
    with broker_log.open("ab") as log_file:
        log_offset = log_file.tell()
        try:
            process = subprocess.Popen(
                command,
                cwd=data_dir,
                stdin=subprocess.DEVNULL,
                stdout=log_file,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        except OSError as exc:
            raise BrokerStartError(f"could not start {java}: {exc}") from exc
    return process, log_offset
