"""One ``fairshare up`` per data directory.

Two runs on one directory would share a broker's log files, the SQLite file and the service
logs, and a second broker would collide on the first one's ports: a crash then looks like
data loss. So ``fairshare up`` holds an exclusive lock on ``<data dir>/.up.lock`` for its whole
life (the kernel releases it when the process dies, even by ``kill -9``), and before taking it
looks for processes of an earlier run that still use the directory (an open file or working
directory inside it), naming each one (pid and command) instead of colliding with it.

The noida-db fallback broker is the one exception: it daemonizes by design and the next run on
the directory adopts it (see the README), so it is not counted as a user.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

LOCK_NAME = ".up.lock"


class DataDirInUseError(RuntimeError):
    """The data directory belongs to a live run, or processes of an earlier one use it."""


@dataclass(frozen=True)
class User:
    pid: int
    command: str

    def __str__(self) -> str:
        return f"pid {self.pid} ({self.command})"


def processes_using(directory: Path, proc: Path = Path("/proc")) -> list[User]:
    """Live processes (not this one) with a working directory or an open file inside
    ``directory``; empty where /proc does not exist (the check is Linux's)."""
    root = directory.resolve()
    found = []
    if not proc.is_dir():
        return []
    mine = _ancestors(proc)  # who started this run (a shell, a test) is no earlier run
    for entry in proc.iterdir():
        if not entry.name.isdigit() or int(entry.name) in mine:
            continue
        paths = [entry / "cwd"]
        with contextlib.suppress(OSError):
            paths += list((entry / "fd").iterdir())
        if any(_inside(path, root) for path in paths):
            command = _command(entry)
            if command is not None and "noida" not in command:
                found.append(User(int(entry.name), command))
    return sorted(found, key=lambda user: user.pid)


def _ancestors(proc: Path) -> set[int]:
    """This process and its parents, up to init."""
    chain = {os.getpid()}
    pid = os.getppid()
    while pid > 1 and pid not in chain:
        chain.add(pid)
        try:
            stat = (proc / str(pid) / "stat").read_text()
            pid = int(stat.rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            break
    return chain


def _inside(link: Path, root: Path) -> bool:
    try:
        target = Path(os.readlink(link))
    except OSError:
        return False
    return target == root or root in target.parents


def _command(entry: Path) -> str | None:
    """The command line, shortened; None for a process that ended or is a zombie."""
    try:
        state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        raw = (entry / "cmdline").read_bytes()
    except (OSError, IndexError):
        return None
    if state == "Z":
        return None
    command = " ".join(part.decode(errors="replace") for part in raw.split(b"\0") if part)
    return command if len(command) <= 160 else command[:157] + "..."


@contextlib.contextmanager
def exclusive_data_dir(directory: Path) -> Iterator[None]:
    """Hold ``directory`` for this run; raises :class:`DataDirInUseError` naming who has it."""
    directory.mkdir(parents=True, exist_ok=True)
    lock_path = directory / LOCK_NAME
    handle = lock_path.open("a+")
    try:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            holder = handle.read().strip() or "another process"
            raise DataDirInUseError(
                f"{directory} is in use by a running fairshare up ({holder}); stop it, or "
                "choose another --data-dir"
            ) from None
        users = processes_using(directory)
        if users:
            raise DataDirInUseError(
                f"{directory} is still used by processes of an earlier run: "
                + ", ".join(str(user) for user in users)
                + "; stop them (kill PID), or choose another --data-dir"
            )
        handle.seek(0)
        handle.truncate()
        handle.write(f"pid {os.getpid()}")
        handle.flush()
        yield
    finally:
        handle.close()  # closing releases the lock
