"""One Apache Kafka node (a JVM) kept in a directory: its ports, storage, process and log.

A node directory holds ``server.properties``, ``log4j2.properties``, ``ports.json``, the
broker's output in ``broker.log`` and the topic data under ``kraft-logs/``. Starting again on
the same directory brings back the same node on the same ports with the same log, which is
what lets a killed broker be restarted and its acknowledged records be checked.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import re
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from services.bus.connection import write_private

from .handle import PORTS_FILE, BrokerStartError, free_port, read_ports, tail_text, write_ports
from .java import JavaRuntime
from .kafka_config import render_log4j2_properties, render_server_properties

__all__ = [
    "PID_FILE",
    "KafkaNode",
    "argfile_text",
    "format_storage",
    "summarize_java_output",
    "write_pid_file",
]

_STOP_GRACE_S = 30.0
#: The running JVM's process id, in the node's directory.
PID_FILE = "broker.pid"
_PR_SET_PDEATHSIG = 1
# Stack frames ("\tat kafka.X(...)", "... 6 more") bury the one line that says why.
_STACK_FRAME = re.compile(r"^\s+(at\s|\.\.\.\s+\d+\s+more)")


def summarize_java_output(text: str, lines: int = 25) -> str:
    """The last ``lines`` lines of a JVM's output, without stack frames.

    What remains ("ERROR ...", "Caused by: ... Address already in use") is what
    a person needs to see in an error message; the full log stays on disk.
    """
    kept = [line for line in text.splitlines() if not _STACK_FRAME.match(line)]
    return tail_text("\n".join(kept), lines)


def _read_from(path: Path, offset: int) -> str:
    """The text of ``path`` after byte ``offset`` (this start's part of an append-only log)."""
    try:
        with path.open("rb") as handle:
            handle.seek(offset)
            return handle.read().decode("utf-8", errors="replace")
    except OSError as exc:
        return f"(could not read {path}: {exc})"


def _die_with_parent_hook() -> Callable[[], None] | None:
    """A hook for the child, run before exec: ask Linux to SIGTERM it when its parent dies.

    ``fairshare up`` may itself be killed with -9; its broker must not live on as an orphan
    holding the data dir's lock and ports (the next ``up`` could not start). SIGTERM, not
    SIGKILL, so the broker still closes its log cleanly. ``prctl`` is looked up here, in the
    parent: after a fork only the call itself is safe. None where there is no prctl.
    """
    if sys.platform != "linux":
        return None
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None

    def hook() -> None:
        prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)

    return hook


@dataclass
class KafkaNode:
    """A node of a loopback KRaft cluster; ``start``/``stop``/``kill`` may be repeated."""

    node_id: int
    directory: Path
    port: int
    controller_port: int
    process: subprocess.Popen[bytes] | None = None
    log_offset: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    @classmethod
    def in_directory(
        cls,
        node_id: int,
        directory: Path,
        port: int | None = None,
        *,
        avoid: set[int] | None = None,
    ) -> KafkaNode:
        """The node kept in ``directory``: remembered ports first, then fresh free ones.

        The controller port is part of the quorum the storage was formatted with, so it is
        always reused once chosen; the client port may be overridden by ``port``. Fresh ports
        skip ``avoid`` (the ports other nodes of the same cluster just picked).
        """
        directory.mkdir(parents=True, exist_ok=True)
        stored = read_ports(directory)
        taken = set(avoid or ())
        broker_port = port if port is not None else stored.get("port")
        while broker_port is None or broker_port in taken:
            broker_port = free_port()
        taken.add(broker_port)
        controller_port = stored.get("controller_port")
        while controller_port is None or controller_port in taken:
            controller_port = free_port()
        return cls(node_id, directory, broker_port, controller_port)

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def log_dir(self) -> Path:
        return self.directory / "kraft-logs"

    @property
    def broker_log(self) -> Path:
        return self.directory / "broker.log"

    @property
    def pid_file(self) -> Path:
        return self.directory / PID_FILE

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process is not None else None

    def prepare(
        self, voters: str, cluster_size: int, security: Mapping[str, str] | None = None
    ) -> Path:
        """Check the ports are free, remember them, write the config; the server.properties.

        The port check fails fast when a broker still runs on this directory: without it the
        new JVM would die on the log-dir lock while the readiness probe talked to the old one.
        ``security``: the secured listeners' settings (they hold the admin's password, so the
        file is then readable by its owner only).
        """
        ports = {"port": self.port, "controller port": self.controller_port}
        for name, number in ports.items():
            _ensure_port_free(self.directory, name, number)
        write_ports(self.directory, {"port": self.port, "controller_port": self.controller_port})
        config = self.directory / "server.properties"
        write_private(
            config,
            render_server_properties(
                port=self.port,
                controller_port=self.controller_port,
                log_dir=self.log_dir,
                node_id=self.node_id,
                voters=voters,
                cluster_size=cluster_size,
                security=security,
            ),
        )
        (self.directory / "log4j2.properties").write_text(
            render_log4j2_properties(), encoding="utf-8"
        )
        return config

    def launch(self, java: JavaRuntime, libs: Path, *, die_with_parent: bool = False) -> None:
        """Start the JVM in its own process group (a Ctrl-C meant for the caller must not
        kill it mid-write), appending its output to ``broker.log``."""
        command = [str(java.path), "-Xmx512m", "-Djava.awt.headless=true", *_jvm_flags(java)]
        command.append(f"-Dlog4j2.configurationFile={self.directory / 'log4j2.properties'}")
        command += ["-cp", f"{libs}/*", "kafka.Kafka", str(self.directory / "server.properties")]
        preexec = _die_with_parent_hook() if die_with_parent else None
        with self.broker_log.open("ab") as log_file:
            self.log_offset = log_file.tell()
            try:
                self.process = subprocess.Popen(
                    command,
                    cwd=self.directory,
                    stdin=subprocess.DEVNULL,
                    stdout=log_file,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                    preexec_fn=preexec,  # only prctl: safe after fork
                )
            except OSError as exc:
                raise BrokerStartError(f"could not start {java.path}: {exc}") from exc
        # where operators (and tests) find the JVM to signal; rewritten by every start
        write_pid_file(self.pid_file, self.process.pid)

    def exit_reason(self) -> str | None:
        """Why the node is not running (its exit code and output), or None while it runs."""
        process = self.process
        if process is None:
            return f"Kafka node {self.node_id} was not started"
        code = process.poll()
        if code is None:
            return None
        output = summarize_java_output(_read_from(self.broker_log, self.log_offset))
        how = f"exited with code {code}"
        if code < 0:
            with contextlib.suppress(ValueError):
                how = f"was killed by {signal.Signals(-code).name}"
        return f"Kafka node {self.node_id} {how} (log: {self.broker_log})\n{output}"

    def output(self) -> str:
        """This start's part of ``broker.log``, summarised, for error messages."""
        return summarize_java_output(_read_from(self.broker_log, self.log_offset))

    def stop(self) -> None:
        """SIGTERM the process group, then SIGKILL after the grace period.

        SIGTERM first so Kafka flushes and closes its logs cleanly (a killed broker
        recovers, but slowly); the process group so nothing it forked survives.
        """
        with self._lock:
            process = self.process
            if process is None or process.poll() is not None:
                return
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGTERM)
            try:
                process.wait(timeout=_STOP_GRACE_S)
            except subprocess.TimeoutExpired:
                self._signal(signal.SIGKILL)

    def kill(self) -> None:
        """``kill -9``: no flush, no clean shutdown (what a crash or the OOM killer does)."""
        with self._lock:
            self._signal(signal.SIGKILL)

    def _signal(self, signum: int) -> None:
        process = self.process
        if process is None or process.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signum)
        process.wait()


def write_pid_file(path: Path, pid: int) -> None:
    """Atomically, so a reader sees the old pid or the new one."""
    tmp = path.with_suffix(".pid.tmp")
    tmp.write_text(f"{pid}\n", encoding="utf-8")
    tmp.replace(path)


def _jvm_flags(java: JavaRuntime) -> list[str]:
    """Flags for this Java version. Kafka unmaps its index files through sun.misc.Unsafe, and
    Java 23+ warns about that on every start; allowing it keeps broker.log to what matters."""
    return ["--sun-misc-unsafe-memory-access=allow"] if java.major >= 23 else []


def _ensure_port_free(directory: Path, name: str, number: int) -> None:
    """`BrokerStartError` if 127.0.0.1:``number`` is taken. SO_REUSEADDR ignores TIME_WAIT
    leftovers of a broker that was just stopped, exactly as Kafka's own bind does."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", number))
        except OSError as exc:
            raise BrokerStartError(
                f"cannot start Apache Kafka on {directory}: its {name} 127.0.0.1:{number} "
                f"is in use ({exc.strerror}); is a broker already running on this data "
                f"dir? Stop it, or pass another port (controller port: edit "
                f"{directory / PORTS_FILE})"
            ) from exc


def format_storage(
    java: JavaRuntime,
    libs: Path,
    node: KafkaNode,
    cluster_id: str,
    extra: Sequence[str] = (),
) -> None:
    """Format the node's KRaft metadata log, unless it already holds a cluster.

    Skipping an already formatted directory is what lets a restart keep its topics
    and offsets (formatting again would fail, or with a new id, orphan the data). ``extra``:
    more arguments of ``format`` (the admin's SCRAM credential of a secured cluster).
    """
    if (node.log_dir / "meta.properties").is_file():
        return
    config = node.directory / "server.properties"
    command = [str(java.path), *_jvm_flags(java), "-cp", f"{libs}/*"]
    command += ["kafka.tools.StorageTool", "format"]
    command += ["-t", cluster_id, "-c", str(config), *extra]
    # The arguments go through a Java @argfile (owner-only, deleted after): a password on a
    # command line is readable by every local user in ps while the tool runs.
    argfile = write_private(node.directory / "format.args", argfile_text(command[1:]))
    try:
        result = subprocess.run(
            [command[0], f"@{argfile}"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            check=False,
            timeout=120,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise BrokerStartError(f"could not format Kafka storage in {node.log_dir}: {exc}") from exc
    finally:
        argfile.unlink(missing_ok=True)
    if result.returncode != 0:
        raise BrokerStartError(
            f"formatting Kafka storage in {node.log_dir} failed (exit {result.returncode}):\n"
            f"{summarize_java_output(result.stdout)}"
        )


def argfile_text(arguments: Sequence[str]) -> str:
    """A Java launcher @argfile holding ``arguments``: each quoted, with backslashes and quotes
    escaped (the launcher's own rules), one per line."""
    quoted = ['"' + a.replace("\\", "\\\\").replace('"', '\\"') + '"' for a in arguments]
    return "\n".join(quoted) + "\n"
