"""Run the embedded noida-db server as a Kafka-protocol broker.

noida-db ships as a Python dependency with a native binary, so it works on machines
with neither Java nor Docker; that makes it the broker behind ``fairshare up`` and the
fast test subset. It daemonizes itself (``noida-db up`` returns at once) and keeps its
data in a directory across ``down``/``up``, which this module maps onto the same
`BrokerHandle` contract as the other launchers.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import re
import shutil
import subprocess
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import orjson

from .handle import (
    BrokerHandle,
    BrokerStartError,
    free_port,
    read_ports,
    tail_text,
    wait_until_ready,
    write_ports,
)

__all__ = [
    "filter_noida_output",
    "find_noida_binary",
    "parse_kafka_address",
    "server_pid",
    "start_noida",
]

_log = logging.getLogger(__name__)

# The bundled binary is linked against a newer glibc symbol version than some hosts
# have; the loader prints a warning on every run although the binary works. Such
# lines are noise in error messages, so they are dropped.
_GLIBC_NOISE = re.compile(r"version\s+`GLIBC_[0-9.]+'\s+not found")
# e.g. "  ✔ kafka          127.0.0.1:19092  (18 KB saved)" in the output of `up`.
_KAFKA_LINE = re.compile(r"^\W*kafka\s+([^\s:]+):(\d+)\b", re.MULTILINE)
_COMMAND_TIMEOUT_S = 60.0
#: What ``noida-db`` writes in its data dir while a server runs there (its pid, among others).
_CONTROL_FILE = "noida.control.json"


def filter_noida_output(text: str) -> str:
    """``text`` without the loader's harmless GLIBC version warning lines."""
    return "\n".join(line for line in text.splitlines() if not _GLIBC_NOISE.search(line))


def parse_kafka_address(status_text: str) -> tuple[str, int] | None:
    """The (host, port) noida-db reports for its running Kafka service, if any.

    ``up`` prints the status of the server it started, or of the one that was
    already running on that data dir, and only the printed address says which.
    """
    match = _KAFKA_LINE.search(status_text)
    if match is None:
        return None
    return match.group(1), int(match.group(2))


def find_noida_binary() -> Path:
    """The ``noida-db`` console script of the running interpreter's environment.

    Looked up next to ``sys.executable`` first so the version pinned in this venv is
    used even when the venv is not activated; PATH is the fallback.
    """
    beside = Path(sys.executable).parent / "noida-db"
    if beside.is_file():
        return beside
    found = shutil.which("noida-db")
    if found is None:
        raise BrokerStartError(
            "the 'noida-db' command was not found next to "
            f"{sys.executable} nor on PATH; install it with "
            "`pip install 'noida-db>=0.2.3,<0.3'` (a dependency of fairshare)"
        )
    return Path(found)


def _run_noida(binary: Path, args: list[str]) -> subprocess.CompletedProcess[str]:
    """Run one noida-db command, with the GLIBC noise removed from its output."""
    try:
        result = subprocess.run(
            [str(binary), *args],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            check=False,
            timeout=_COMMAND_TIMEOUT_S,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise BrokerStartError(f"could not run {binary} {' '.join(args)}: {exc}") from exc
    return subprocess.CompletedProcess(
        result.args,
        result.returncode,
        filter_noida_output(result.stdout),
        filter_noida_output(result.stderr),
    )


def _describe(result: subprocess.CompletedProcess[str]) -> str:
    output = "\n".join(part for part in (result.stdout, result.stderr) if part.strip())
    return tail_text(output) or "(no output)"


def _bring_up(binary: Path, data_dir: Path, port: int | None) -> tuple[str, int]:
    """``noida-db up`` on ``data_dir`` (or adopt the server already running there); the Kafka
    host and port it serves, remembered in ``ports.json`` for the next start."""
    stored = read_ports(data_dir).get("port")
    wanted = port if port is not None else stored or free_port()
    directory = ["--data-dir", str(data_dir)]
    up = _run_noida(binary, ["up", "--only", "kafka", "--kafka-port", str(wanted), *directory])
    if up.returncode != 0:
        raise BrokerStartError(
            f"`noida-db up` failed (exit {up.returncode}) for {data_dir}:\n{_describe(up)}"
        )
    # `up` on a data dir whose server is already running just reports that server.
    adopted = "already running" in up.stdout
    address = parse_kafka_address(up.stdout)
    if address is None:
        if not adopted:
            _run_noida(binary, ["down", *directory])
        raise BrokerStartError(
            f"noida-db on {data_dir} is running but reports no Kafka service "
            f"(started without kafka?); run `noida-db down --data-dir {data_dir}` "
            f"and try again:\n{_describe(up)}"
        )
    host, actual = address
    if actual != wanted and port is not None:
        raise BrokerStartError(
            f"noida-db is already running on {data_dir} with Kafka on port {actual}, "
            f"not the requested {port}; stop it with `noida-db down --data-dir {data_dir}` "
            "first"
        )
    write_ports(data_dir, {"port": actual})
    if adopted:
        _log.info("adopting the noida-db server already running on %s", data_dir)
    return host, actual


def _stopper(binary: Path, data_dir: Path) -> Callable[[], None]:
    """``noida-db down`` (which keeps the data), once, however often it is called."""
    lock = threading.Lock()
    stopped = False

    def stop() -> None:
        nonlocal stopped
        with lock:
            if stopped:
                return
            stopped = True
            atexit.unregister(stop)
            down = _run_noida(binary, ["down", "--data-dir", str(data_dir)])
            if down.returncode != 0:
                # Not raised: stop() runs in teardown paths where an exception would
                # hide the real test failure. `down` on a stopped server exits 0.
                _log.warning("`noida-db down` failed for %s:\n%s", data_dir, _describe(down))

    return stop


def start_noida(
    data_dir: Path,
    *,
    port: int | None = None,
    startup_timeout_s: float = 30,
    stop_at_exit: bool = True,
) -> BrokerHandle:
    """Start noida-db with only its Kafka service, on ``data_dir``; wait until it serves.

    The Kafka port is remembered in ``data_dir/ports.json``, so a restart on the same
    directory comes back on the same address unless ``port`` says otherwise. If a
    noida-db server is already running on ``data_dir`` (for example left behind by a
    crashed session) it is adopted, as long as its Kafka port is the one asked for.
    ``stop()`` runs ``noida-db down``, which keeps the data. Because noida-db
    daemonizes, the server would outlive this interpreter; with ``stop_at_exit``
    (the default) ``stop()`` is also registered to run at interpreter exit, pass
    False for a broker meant to keep running (e.g. ``fairshare up``).
    """
    data_dir = data_dir.expanduser().resolve()
    data_dir.mkdir(parents=True, exist_ok=True)
    binary = find_noida_binary()
    host, actual = _bring_up(binary, data_dir, port)
    stop = _stopper(binary, data_dir)
    if stop_at_exit:
        atexit.register(stop)
    bootstrap = f"{host}:{actual}"
    try:
        wait_until_ready(bootstrap, startup_timeout_s)
    except BaseException:
        with contextlib.suppress(BrokerStartError):
            stop()
        raise
    daemon = _Daemon(binary, data_dir, actual, startup_timeout_s, server_pid(data_dir), stop)
    return BrokerHandle(
        kind="noida",
        bootstrap=bootstrap,
        description=f"noida-db Kafka at {bootstrap}, data in {data_dir}",
        stop=daemon.stop,
        exited=daemon.exited,
        revive=daemon.revive,
        pid=daemon.pid,
    )


def server_pid(data_dir: Path) -> int | None:
    """The pid of the server running (or last run) on ``data_dir``, from its control file."""
    try:
        found = orjson.loads((data_dir / _CONTROL_FILE).read_bytes()).get("pid")
    except (OSError, orjson.JSONDecodeError, AttributeError):
        return None
    return found if isinstance(found, int) else None


def _is_noida(pid: int) -> bool:
    """Whether ``pid`` runs and is a noida-db server (not another process given its pid)."""
    try:
        command = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        try:
            os.kill(pid, 0)  # no /proc (macOS): alive is the best it can tell
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True
    return b"noida" in command


@dataclass
class _Daemon:
    """The noida-db server a handle started, watched through its pid: it daemonizes, so it is
    no child of ours, and a supervisor polls whether it still runs and starts it again (same
    data dir, same Kafka port) when it does not."""

    binary: Path
    data_dir: Path
    port: int
    startup_timeout_s: float
    pid: int | None
    _stop: Callable[[], None]
    stopped: bool = False

    def stop(self) -> None:
        self.stopped = True  # a stopped server did not die: nothing to start again
        self._stop()

    def exited(self) -> str | None:
        if self.stopped or self.pid is None or _is_noida(self.pid):
            return None
        return (
            f"noida-db (pid {self.pid}) is no longer running (log: {self.data_dir / 'noida.log'})"
        )

    def revive(self) -> str:
        host, port = _bring_up(self.binary, self.data_dir, self.port)
        wait_until_ready(f"{host}:{port}", self.startup_timeout_s)
        self.pid = server_pid(self.data_dir)
        return f"noida-db started again (pid {self.pid})"
