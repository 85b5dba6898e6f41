"""The job_submit plugin's column of ``fairshare bench throughput``: ``sbatch`` into Fairshare's
partition, through ``deploy/slurm/job_submit.lua``, against plain ``sbatch`` into a partition
the plugin leaves alone (:data:`~services.bench.throughput.slurm.PARTITION`), in the same run.
The plugin is slurmctld's, so the plain side is not plugin-free: the script still runs for it,
reads the bindings file and returns at its first check (not Fairshare's partition). What is
compared is the plugin's whole path (its checks, the hold, its log lines) against that.

Two measurements, one after the other, each job one GPU (``--gres=gpu:1``, ``sleep job_s``),
``count`` of them per side, one ``sbatch`` at a time as a user's loop sends them:

1. **The door** (:func:`door`): jobs accepted per second, each side timed from the call of the
   first ``sbatch`` of a block to the return of its last, summed over its blocks. The bindings
   file is the benchmark's for the measurement (an account bound, :func:`bound_account`) and
   put back byte for byte after. No Fairshare runs then: the plugin's jobs stay held, and the
   plain ones are sent ``--hold`` too, so that slurmctld does the same for both (plain jobs
   that can start would have slurmctld schedule, launch and end them while the next
   submissions arrive, which held ones spare it: that would slow the plain side and flatter
   the plugin). The sides alternate in blocks, ABBA (plain, plugin, plugin, plain, ...):
   slurmctld keeps every job ``MinJobAge`` (an hour on ``.ci/start-slurm``'s cluster), so
   each submission finds a longer job table than the one before; alternating gives both sides
   the same mean table, and a drift of the machine in between reaches both alike.
   slurmctld's CPU per submission is read from ``/proc`` around each block.
2. **Submit to start** (:func:`starts`): first the plain side, jobs that run, until every one
   started; then the plugin's, with Fairshare taking them (``native.py``: the Slurm agent
   with native work on the plugin's partition, a scheduler, the account bound to a budget),
   until every one started. Per job from its ``sbatch`` returning to its start in Slurm. These
   run one side after the other, not interleaved: both sides use the same GPUs, and the agent
   counts GPUs that plain jobs hold as taken.

Every job made is cancelled (``scancel`` by the phase's job name) before the next step.
"""

from __future__ import annotations

import os
import subprocess
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from services.bench.latency.bench import percentiles
from services.bench.throughput import slurm

Report = Callable[[str], None]

#: Fairshare's partition on ``.ci/start-slurm``'s cluster (the plugin holds its jobs).
PLUGIN_PARTITION = "gpu"
#: The file the plugin reads (the path at the top of ``deploy/slurm/job_submit.lua``).
BINDINGS = Path("/etc/slurm/fairshare-bindings")
#: The Slurm account the benchmark's jobs name, bound to :data:`BUDGET` for the run.
ACCOUNT = "fsbench"
#: A budget of the demo lab (``services.launcher.lab``), which the native stack seeds.
BUDGET = "lab/vision"
#: The issue's target: the plugin's door at least this fraction of plain sbatch's.
TARGET_DOOR_RATIO = 0.9


def _slurm_config() -> dict[str, str]:
    """slurmctld's settings as ``scontrol show config`` lists them."""
    listed = subprocess.run(
        ["scontrol", "show", "config"], capture_output=True, text=True, timeout=30
    ).stdout
    settings = {}
    for line in listed.splitlines():
        key, _, value = line.partition("=")
        settings[key.strip()] = value.strip()
    return settings


def plugin_missing() -> str | None:
    """Why the plugin cannot be measured here (Slurm answering is checked before), or None."""
    if "lua" not in _slurm_config().get("JobSubmitPlugins", ""):
        return "slurmctld runs no job_submit/lua (bash .ci/start-slurm installs Fairshare's)"
    partitions = subprocess.run(
        ["sinfo", "-h", "-o", "%R"], capture_output=True, text=True, timeout=30
    ).stdout.split()
    for needed in (PLUGIN_PARTITION, slurm.PARTITION):
        if needed not in partitions:
            return f"no partition {needed} (bash .ci/start-slurm makes gpu and plain)"
    if not os.access(BINDINGS.parent, os.W_OK):
        return f"cannot write {BINDINGS} (the benchmark binds its account there)"
    return None


def job_room(settings: dict[str, str], jobs_held: int, needed: int) -> str | None:
    """Why slurmctld cannot take ``needed`` more jobs (its ``MaxJobCount`` against the
    ``jobs_held`` it keeps, ended ones included until ``MinJobAge``), or None."""
    try:
        limit = int(settings.get("MaxJobCount", "").split()[0])
    except (ValueError, IndexError):
        return None
    if jobs_held + needed <= limit:
        return None
    age = settings.get("MinJobAge", "?")
    return (
        f"slurmctld keeps {jobs_held} jobs of its MaxJobCount {limit} and the column makes "
        f"{needed}: ended jobs leave its table after MinJobAge ({age}); run it again later"
    )


def no_room(needed: int) -> str | None:
    listed = subprocess.run(
        ["squeue", "-h", "-t", "all", "-r", "-o", "%i"], capture_output=True, text=True, timeout=60
    ).stdout
    return job_room(_slurm_config(), len(listed.split()), needed)


# -- the bindings file ---------------------------------------------------------------------------
def _replace(path: Path, data: bytes) -> None:
    """``path`` replaced whole by ``data`` (a temporary file renamed over it, readable by all),
    as the agent writes it: the plugin never reads half a file."""
    with tempfile.NamedTemporaryFile(dir=path.parent, prefix=f".{path.name}.", delete=False) as f:
        f.write(data)
        temporary = Path(f.name)
    temporary.chmod(0o644)
    os.replace(temporary, path)


@contextmanager
def kept_bindings(path: Path = BINDINGS) -> Iterator[bytes | None]:
    """The file's bytes as they were (None: there was none), put back as they were when the
    block ends however it ends (removed if there was none)."""
    before = path.read_bytes() if path.exists() else None
    try:
        yield before
    finally:
        if before is not None:
            _replace(path, before)
        else:
            path.unlink(missing_ok=True)


def bindings_with_account(before: bytes | None, account: str, budget: str) -> bytes:
    """The file as it was, its partitions and pool kept, with :data:`PLUGIN_PARTITION` listed
    and ``account`` bound to ``budget`` (a first file of ``.ci/start-slurm``'s shape if none)."""
    text = before.decode() if before is not None else "cluster=hpc\n"
    settings = {line.split("#")[0].strip() for line in text.splitlines()}
    if not text.endswith("\n"):
        text += "\n"
    if f"partition={PLUGIN_PARTITION}" not in settings:
        text += f"partition={PLUGIN_PARTITION}\n"
    text += (
        f"# bound by fairshare bench throughput for its run\naccount={account} budget={budget}\n"
    )
    return text.encode()


@contextmanager
def bound_account(account: str = ACCOUNT, budget: str = BUDGET) -> Iterator[None]:
    """The plugin sees ``account`` bound to ``budget`` while the block runs."""
    with kept_bindings() as before:
        _replace(BINDINGS, bindings_with_account(before, account, budget))
        yield


# -- slurmctld's CPU -----------------------------------------------------------------------------
def _slurmctld_pid() -> int | None:
    """slurmctld's process id, from its pid file (its CPU is read from ``/proc``)."""
    try:
        return int(Path(_slurm_config()["SlurmctldPidFile"]).read_text().split()[0])
    except (KeyError, OSError, ValueError, IndexError):
        return None


def _cpu_s(pid: int | None) -> float | None:
    from services.bench.history.measure import cpu_seconds

    return None if pid is None else cpu_seconds(pid)


# -- 1. the door ---------------------------------------------------------------------------------
@dataclass
class DoorSide:
    """One side of the door: its jobs (one name), the seconds spent in its blocks, each
    ``sbatch``'s wall time, slurmctld's CPU seconds during its blocks."""

    partition: str
    more: tuple[str, ...]
    run: slurm.SlurmRun
    submitting_s: float = 0.0
    cpu_s: float | None = 0.0

    def block(self, size: int, job_s: float, pid: int | None) -> list[float]:
        args = slurm.job_args(self.run.name, job_s, self.partition, self.more)
        cpu_before = _cpu_s(pid)
        started = time.time()
        took = [slurm.sbatch_one(self.run, args) for _ in range(size)]
        self.submitting_s += time.time() - started
        cpu_after = _cpu_s(pid)
        if self.cpu_s is not None and cpu_before is not None and cpu_after is not None:
            self.cpu_s += cpu_after - cpu_before
        else:
            self.cpu_s = None
        return took

    def figures(self, took: list[float]) -> dict[str, Any]:
        accepted = self.run.accepted
        return {
            "partition": self.partition,
            "accepted": accepted,
            "errors": len(self.run.errors),
            "error_examples": sorted(set(self.run.errors))[:3],
            "submitting_s": round(self.submitting_s, 3),
            "accepted_per_s": (
                round(accepted / self.submitting_s, 1) if self.submitting_s > 0 else None
            ),
            "sbatch_ms": percentiles(took),
            "slurmctld_cpu_ms_per_sbatch": (
                round(1000 * self.cpu_s / len(took), 3) if self.cpu_s is not None and took else None
            ),
        }


def door(count: int, block: int, job_s: float, report: Report) -> dict[str, Any]:
    """``count`` jobs per side, sequential, in blocks of ``block`` alternating ABBA (see the
    module's docstring); every job cancelled after."""
    tag = uuid.uuid4().hex[:8]
    plain = DoorSide(slurm.PARTITION, (f"--account={ACCOUNT}", "--hold"),
                     slurm.SlurmRun(f"fsbench-door-plain-{tag}"))  # fmt: skip
    plugin = DoorSide(PLUGIN_PARTITION, (f"--account={ACCOUNT}",),
                      slurm.SlurmRun(f"fsbench-door-plugin-{tag}"))  # fmt: skip
    took: dict[str, list[float]] = {"plain": [], "plugin": []}
    pid = _slurmctld_pid()
    size = max(1, min(block, count))
    report(f"plugin door: {count} sbatch per side, one at a time, ABBA blocks of {size}")
    try:
        with bound_account():
            done, round_ = 0, 0
            while done < count:
                n = min(size, count - done)
                order = (("plain", plain), ("plugin", plugin))
                before = plain.run.accepted + plugin.run.accepted
                for name, side in order if round_ % 2 == 0 else order[::-1]:
                    took[name] += side.block(n, job_s, pid)
                if plain.run.accepted + plugin.run.accepted == before:
                    report(f"plugin door: stopped, every sbatch refused: {plugin.run.errors[-1]}")
                    break
                done += n
                round_ += 1
                if round_ % 5 == 0 or done == count:
                    report(f"plugin door: {done} of {count} per side")
    finally:
        for side in (plain, plugin):
            slurm.cancel(side.run)
    found = {"plain": plain.figures(took["plain"]), "plugin": plugin.figures(took["plugin"])}
    rate_plain, rate_plugin = found["plain"]["accepted_per_s"], found["plugin"]["accepted_per_s"]
    ratio = round(rate_plugin / rate_plain, 3) if rate_plain and rate_plugin else None
    return found | {
        "block": size,
        "order": "ABBA: plain, plugin, plugin, plain, ... (held on both sides)",
        "ratio": ratio,
        "target_ratio": TARGET_DOOR_RATIO,
        "met": ratio is not None and ratio >= TARGET_DOOR_RATIO,
    }


# -- 2. submit to start --------------------------------------------------------------------------
#: A phase stops after this many refusals in a row (Slurm full or gone: the rest would fail too).
_REFUSALS_IN_A_ROW = 5


def submit_sequential(run: slurm.SlurmRun, count: int, args: list[str]) -> None:
    """``count`` ``sbatch`` of ``args``, one at a time."""
    run.started_at = time.time()
    refused = 0
    for _ in range(count):
        accepted = run.accepted
        slurm.sbatch_one(run, args)
        refused = 0 if run.accepted > accepted else refused + 1
        if refused >= _REFUSALS_IN_A_ROW:
            break
    run.ended_at = time.time()


def wait_all_started(
    run: slurm.SlurmRun,
    stall_s: float,
    report: Report,
    label: str,
    tick: Callable[[], None] = lambda: None,
) -> dict[str, float]:
    """Until every accepted job of ``run`` has started, or none more did for ``stall_s``: job
    id -> its start (Slurm's ``StartTime``, whole seconds)."""
    last_count, last_progress, said = -1, time.monotonic(), 0.0
    while True:
        tick()
        jobs = slurm.jobs_of(run.name)
        started = {j: s[2] for j, s in jobs.items() if j in run.sent and s[2] is not None}
        now = time.monotonic()
        if len(started) != last_count:
            last_count, last_progress = len(started), now
        if len(started) >= run.accepted or now - last_progress > stall_s:
            return started
        if now - said >= 10:
            report(f"{label}: {len(started)} of {run.accepted} started")
            said = now
        time.sleep(2)


def start_figures(run: slurm.SlurmRun, started: dict[str, float]) -> dict[str, Any]:
    """Accepted per second (first call to last return), and per job its ``sbatch``'s return to
    its start. Slurm keeps start times in whole seconds (truncated): a start is taken at the
    middle of its second, and a job that started before its ``sbatch`` returned (slurmctld
    starts one that fits inside the submission) counts 0."""
    submitting_s = run.ended_at - run.started_at
    waits = [max(0.0, started[j] + 0.5 - t) for j, t in run.returned.items() if j in started]
    last = max((started[j] + 0.5 for j in run.returned if j in started), default=None)
    every = bool(run.returned) and all(j in started for j in run.returned)
    return {
        "accepted": run.accepted,
        "errors": len(run.errors),
        "error_examples": sorted(set(run.errors))[:3],
        "submitting_s": round(submitting_s, 3),
        "accepted_per_s": round(run.accepted / submitting_s, 1) if submitting_s > 0 else None,
        "started": len(waits),
        "all_started_s": round(last - run.started_at, 1) if every and last else None,
        "submit_to_start_ms": percentiles(waits),
        "time_resolution_s": 1.0,
    }


def plain_starts(count: int, job_s: float, stall_s: float, report: Report) -> dict[str, Any]:
    """The baseline: ``count`` jobs that run, to the plain partition."""
    run = slurm.SlurmRun(f"fsbench-start-plain-{uuid.uuid4().hex[:8]}")
    report(f"plugin starts: {count} sbatch to {slurm.PARTITION}, one at a time")
    try:
        submit_sequential(run, count, slurm.job_args(run.name, job_s, slurm.PARTITION))
        started = wait_all_started(run, stall_s, report, f"plain {run.name}")
    finally:
        slurm.cancel(run)
    return start_figures(run, started) | {"partition": slurm.PARTITION}


def table(result: dict[str, Any]) -> list[str]:
    """The column as a table of text lines (the JSON carries every figure)."""
    door_, starts_ = result["door"], result["starts"]

    def rate(f: dict[str, Any]) -> str:
        return "-" if f.get("accepted_per_s") is None else f"{f['accepted_per_s']:.1f}/s"

    def waits(f: dict[str, Any]) -> str:
        s = f.get("submit_to_start_ms") or {}
        if s.get("p50") is None:
            return "-"
        return f"{s['p50'] / 1000:.1f} s / {s['p99'] / 1000:.1f} s ({s['count']} started)"

    def cpu(f: dict[str, Any]) -> str:
        value = f.get("slurmctld_cpu_ms_per_sbatch")
        return "-" if value is None else f"{value:.2f} ms"

    ratio = door_["ratio"]
    verdict = "" if ratio is None else (" met" if door_["met"] else " missed")
    rows = [
        ("", f"plain sbatch ({slurm.PARTITION})", f"through the plugin ({PLUGIN_PARTITION})",
         "ratio"),
        ("accepted per second (held, sequential)", rate(door_["plain"]), rate(door_["plugin"]),
         f"{ratio} (target >= {TARGET_DOOR_RATIO}{verdict})"),
        ("sbatch p50 / p99", _ms(door_["plain"]), _ms(door_["plugin"]), ""),
        ("slurmctld CPU per sbatch", cpu(door_["plain"]), cpu(door_["plugin"]), ""),
        ("accepted per second (run, sequential)", rate(starts_["plain"]),
         rate(starts_["fairshare"]), ""),
        ("submit to start p50 / p99", waits(starts_["plain"]), waits(starts_["fairshare"]),
         f"{starts_['p50_ratio']} / {starts_['p99_ratio']}"),
    ]  # fmt: skip
    widths = [max(len(row[i]) for row in rows) for i in range(4)]
    return ["  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)) for row in rows]


def _ms(figures: dict[str, Any]) -> str:
    s = figures.get("sbatch_ms") or {}
    return "-" if s.get("p50") is None else f"{s['p50']:.1f} / {s['p99']:.1f} ms"
