"""``fairshare bench idle``: what an idle ``fairshare up`` costs in CPU.

Runs ``fairshare up`` itself (a child process: embedded Apache Kafka, every service, the
launcher's own loop) with the demo workload stream off (``--submit-every 0``) and four
simulated nodes, waits until the API shows the nodes and a warm-up has passed, then reads
``utime + stime`` of every process of its tree from ``/proc/<pid>/stat`` before and after the
measured window, and of every thread (``/proc/<pid>/task/<tid>/stat``, named by ``comm``: the
librdkafka threads are ``rdk:main``, ``rdk:broker<N>`` ..., the JVM's carry their Java names),
so that the figures also say where inside a process the time goes. Each service is reported
with its descendants; CPU as a percentage of one core over the window.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

Report = Callable[[str], None]

#: The issue's target for the whole idle stack, in percent of one core.
TARGET_TOTAL_PCT = 10.0


@dataclass(frozen=True)
class IdleConfig:
    duration_s: float = 30.0
    #: The JVM compiles for a minute or more after its start: measured earlier, the broker's
    #: compiler threads are most of the figure.
    warmup_s: float = 60.0
    nodes: int = 4
    #: Threads listed per process (the busiest).
    top_threads: int = 6


@dataclass(frozen=True)
class ProcStat:
    pid: int
    ppid: int
    comm: str
    ticks: int  # utime + stime, in clock ticks


def read_stat(path: Path) -> ProcStat | None:
    """One ``/proc/.../stat``; None when the process (or thread) is gone."""
    try:
        text = path.read_text()
    except OSError:
        return None
    return parse_stat(text)


def parse_stat(text: str) -> ProcStat:
    """``comm`` is in parentheses and may hold spaces and parentheses: split after the last
    ``)``. Fields (1-based, man 5 proc): 4 ppid, 14 utime, 15 stime."""
    head, _, rest = text.rpartition(")")
    pid_text, _, comm = head.partition(" (")
    fields = rest.split()
    # rest starts at field 3 (state)
    return ProcStat(int(pid_text), int(fields[1]), comm, int(fields[11]) + int(fields[12]))


def process_tree(root: int, proc: Path = Path("/proc")) -> dict[int, ProcStat]:
    """``root`` and every process descended from it, as they are now."""
    stats: dict[int, ProcStat] = {}
    for entry in proc.iterdir():
        if entry.name.isdigit():
            stat = read_stat(entry / "stat")
            if stat is not None:
                stats[stat.pid] = stat
    children: dict[int, list[int]] = {}
    for stat in stats.values():
        children.setdefault(stat.ppid, []).append(stat.pid)
    tree: dict[int, ProcStat] = {}
    todo = [root]
    while todo:
        pid = todo.pop()
        if pid in stats:
            tree[pid] = stats[pid]
            todo += children.get(pid, [])
    return tree


def thread_ticks(pid: int, proc: Path = Path("/proc")) -> dict[int, tuple[str, int]]:
    """tid -> (thread name, utime + stime) of every thread of ``pid``."""
    out: dict[int, tuple[str, int]] = {}
    try:
        tasks = list((proc / str(pid) / "task").iterdir())
    except OSError:
        return out
    for task in tasks:
        stat = read_stat(task / "stat")
        if stat is not None:
            out[stat.pid] = (stat.comm, stat.ticks)
    return out


def label(pid: int, proc: Path = Path("/proc")) -> str:
    """A service's name from its command line (``python -m services.cli scheduler ...`` is
    "scheduler", ``... agent simulated`` "agent simulated"); "broker (java)" for the JVM."""
    try:
        argv = (proc / str(pid) / "cmdline").read_bytes().split(b"\0")
    except OSError:
        return "?"
    words = [a.decode(errors="replace") for a in argv if a]
    if words and Path(words[0]).name.startswith("java"):
        return "broker (java)"
    if "services.cli" in words:
        rest = words[words.index("services.cli") + 1 :]
        name = [w for w in rest[:2] if not w.startswith("-")]
        if name[:1] in (["agent"], ["api"]):
            return " ".join(name)
        return name[0] if name else "fairshare"
    return Path(words[0]).name if words else "?"


@dataclass
class Snapshot:
    at: float
    tree: dict[int, ProcStat]
    threads: dict[int, dict[int, tuple[str, int]]] = field(default_factory=dict)


def snapshot(root: int) -> Snapshot:
    tree = process_tree(root)
    return Snapshot(time.monotonic(), tree, {pid: thread_ticks(pid) for pid in tree})


def cpu_figures(
    root: int,
    before: Snapshot,
    after: Snapshot,
    names: dict[int, str],
    top_threads: int = 6,
    clock_ticks: int | None = None,
) -> dict[str, Any]:
    """Per top-level process (``root`` itself, and each child with its descendants), percent of
    one core between the snapshots; and the busiest threads of each."""
    hz = clock_ticks or os.sysconf("SC_CLK_TCK")
    wall = after.at - before.at

    def pct(ticks: int) -> float:
        return round(ticks / hz / wall * 100, 2)

    def used(pid: int) -> int:
        end = after.tree.get(pid)
        if end is None:
            return 0  # ended within the window: its last ticks are not known
        start = before.tree.get(pid)
        return end.ticks - (start.ticks if start else 0)

    def descendants(pid: int) -> list[int]:
        found, todo = [], [pid]
        while todo:
            current = todo.pop()
            found.append(current)
            todo += [p for p, s in after.tree.items() if s.ppid == current and p != current]
        return found

    def thread_rows(pids: list[int]) -> list[tuple[int, str, int]]:
        rows = []
        for pid in pids:
            start = before.threads.get(pid, {})
            for tid, (name, ticks) in after.threads.get(pid, {}).items():
                delta = ticks - start.get(tid, (name, 0))[1]
                if delta > 0:
                    rows.append((delta, name, tid))
        return sorted(rows, reverse=True)

    tops = [root, *sorted(p for p, s in after.tree.items() if s.ppid == root)]
    processes: list[dict[str, Any]] = []
    jit_ticks = 0
    for pid in tops:
        pids = [pid] if pid == root else descendants(pid)
        rows = thread_rows(pids)
        jit = sum(d for d, name, _ in rows if is_jit(name))
        jit_ticks += jit
        processes.append(
            {
                "name": names.get(pid) or label(pid),
                "pid": pid,
                "processes": len(pids),
                "cpu_pct": pct(sum(used(p) for p in pids)),
                **({"jit_pct": pct(jit)} if jit else {}),
                "threads": [
                    {"thread": n, "tid": t, "cpu_pct": pct(d)} for d, n, t in rows[:top_threads]
                ],
            }
        )
    processes.sort(key=lambda row: -float(row["cpu_pct"]))
    total = sum(used(p) for p in after.tree)
    return {
        "window_s": round(wall, 1),
        "total_cpu_pct": pct(total),
        # the JVM's compiler threads: a warm-up cost that fades, not a steady one
        "total_without_jit_pct": pct(total - jit_ticks),
        "processes": processes,
    }


def is_jit(thread: str) -> bool:
    """HotSpot's compiler threads ("C1 CompilerThread0", cut to 15 characters by comm)."""
    return thread.startswith(("C1 CompilerThre", "C2 CompilerThre"))


def idle_benchmark(
    config: IdleConfig, data_dir: Path | None = None, report: Report = lambda _line: None
) -> dict[str, Any]:
    """``fairshare up`` in ``data_dir`` (a temporary directory unless given), measured idle."""
    from services.bench.workdir import bench_dir

    with bench_dir(data_dir, "idle") as directory:
        return _run(config, directory, report)


def _run(config: IdleConfig, data_dir: Path, report: Report) -> dict[str, Any]:
    from services.brokers import free_port

    port = free_port()
    argv = [
        sys.executable,
        "-m",
        "services.cli",
        "up",
        "--broker",
        "apache-kafka",
        "--data-dir",
        str(data_dir),
        "--api-port",
        str(port),
        "--nodes",
        str(config.nodes),
        "--submit-every",
        "0",
    ]
    log_path = data_dir / "up.log"
    report(f"starting {' '.join(argv[2:])} (output in {log_path})")
    with log_path.open("ab") as log:
        up = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        _wait_ready(up, f"http://127.0.0.1:{port}", config.nodes, log_path)
        report(f"up and showing {config.nodes} nodes; warming up {config.warmup_s:g} s")
        time.sleep(config.warmup_s)
        names = {up.pid: "launcher (fairshare up)"}
        before = snapshot(up.pid)
        report(f"measuring {config.duration_s:g} s over {len(before.tree)} processes")
        time.sleep(config.duration_s)
        after = snapshot(up.pid)
        if up.poll() is not None:
            raise RuntimeError(f"fairshare up exited during the measurement; see {log_path}")
        result = cpu_figures(up.pid, before, after, names, config.top_threads)
    finally:
        _stop(up)
    result["target_total_pct"] = TARGET_TOTAL_PCT
    result["met"] = result["total_cpu_pct"] <= TARGET_TOTAL_PCT
    result["nodes"] = config.nodes
    result["warmup_s"] = config.warmup_s
    result["cores"] = os.cpu_count()
    return result


def _wait_ready(up: subprocess.Popen[bytes], api_url: str, nodes: int, log_path: Path) -> None:
    import httpx

    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        if up.poll() is not None:
            raise RuntimeError(f"fairshare up exited ({up.returncode}); see {log_path}")
        try:
            answer = httpx.get(
                f"{api_url}/nodes", headers={"Authorization": "Bearer admin-token"}, timeout=5
            )
            if answer.status_code == 200 and len(answer.json()["nodes"]) >= nodes:
                return
        except httpx.HTTPError:
            pass
        time.sleep(1)
    raise RuntimeError(f"fairshare up did not show {nodes} nodes in time; see {log_path}")


def _stop(up: subprocess.Popen[bytes], timeout_s: float = 60) -> None:
    """SIGINT as Ctrl-C would (it stops its services and the broker), then SIGKILL the group."""
    if up.poll() is not None:
        return
    up.send_signal(signal.SIGINT)
    try:
        up.wait(timeout_s)
    except subprocess.TimeoutExpired:
        os.killpg(up.pid, signal.SIGKILL)
        up.wait()
