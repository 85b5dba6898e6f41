"""Rebuild ``data/traces/helios-earth-2020-05.csv`` and ``helios-earth-budgets.csv`` from the
raw per-minute series kept beside this script, and print what the rebuild measured.

Run from anywhere: ``.venv/bin/python data/traces/helios-earth/rebuild.py``. The output is
deterministic (fixed ordering, no clock), so rerunning it must leave both CSVs unchanged
(``--check`` rebuilds without writing and exits 1 if either would change: the tests run it); see
``data/traces/README.md`` for the source, the licence and what the rebuild loses.
"""

from __future__ import annotations

import csv
import gzip
import io
import statistics
import sys
from collections import Counter
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path

HERE = Path(__file__).resolve().parent
TRACES = HERE.parent
# The rebuild uses the simulator's pure reconstruction; a plain `python path/to/rebuild.py`
# puts only this folder on sys.path, so the repository root is added.
sys.path.insert(0, str(TRACES.parents[1]))

from services.simulator.reconstruct import (  # noqa: E402
    GANGS,
    SMALL,
    RebuiltJob,
    SizeClass,
    reconstruct,
    running_counts,
)

MONTH = "2020-05"
TRACE = TRACES / "helios-earth-2020-05.csv"
BUDGETS = TRACES / "helios-earth-budgets.csv"
QUOTAS = HERE / "Earth_gpu_number.csv"
#: The two size classes of the series, with the columns of their running jobs and GPUs.
CLASSES: tuple[tuple[str, SizeClass, str, str], ...] = (
    (">=8 GPUs", GANGS, "running_job_num_noless_8", "running_gpu_num_noless_8"),
    ("1-7 GPUs", SMALL, "running_job_num_less_8", "running_gpu_num_less_8"),
)


def epoch_minute(text: str) -> int:
    return int(datetime.fromisoformat(text).replace(tzinfo=UTC).timestamp()) // 60


def stamp(minute: int) -> str:
    return datetime.fromtimestamp(minute * 60, UTC).strftime("%Y-%m-%d %H:%M:%S")


def read_series(path: Path) -> list[dict[str, str]]:
    with gzip.open(path, "rt", newline="") as handle:
        rows = list(csv.DictReader(handle))
    minutes = [epoch_minute(row["time"]) for row in rows]
    if not minutes or minutes != list(range(minutes[0], minutes[0] + len(minutes))):
        raise SystemExit(f"{path}: not one row per minute")
    return rows


def hours(gpu_minutes: int) -> str:
    return f"{gpu_minutes / 60:,.1f}"


def describe_class(
    label: str, jobs: Sequence[RebuiltJob], input_gpu_minutes: int, unexplained: int, end: int
) -> None:
    durations = [(end if job.end is None else job.end) - job.start for job in jobs]
    reproduced = sum(d * job.gpus for d, job in zip(durations, jobs, strict=True))
    sizes = Counter(job.gpus for job in jobs)
    print(f"{label}: {len(jobs):,} jobs")
    print(f"  GPU-hours reproduced {hours(reproduced)} of {hours(input_gpu_minutes)} input")
    print(f"  unexplained GPU-minutes: {unexplained}")
    print(f"  largest job: {max(sizes, default=0)} GPUs")
    print("  sizes (GPUs: jobs): " + ", ".join(f"{s}: {n}" for s, n in sorted(sizes.items())))
    if durations:
        print(
            f"  duration: mean {statistics.mean(durations) / 60:.2f} h, "
            f"median {statistics.median(durations):g} min, "
            f"{sum(job.end is None for job in jobs)} still running at the end"
        )


def weights(vcs: Sequence[str]) -> dict[str, float]:
    """Each VC's GPU quota over the month, the one it had on most days: on 30 of May's 31 days
    the 16 quotas are constant, and the one other row (2020-05-09) gives the whole cluster to
    a VC with no series, which reads as a bookkeeping row rather than a month's policy (the
    per-VC series show the same quotas all month)."""
    with QUOTAS.open(newline="") as handle:
        days = [row for row in csv.DictReader(handle) if row["date"].startswith(MONTH)]
    return {vc: float(statistics.mode(int(day[vc]) for day in days)) for vc in vcs}


def main(check: bool = False) -> None:
    series = {
        path.name.removesuffix(".csv.gz"): read_series(path)
        for path in sorted(HERE.glob("vc*.csv.gz"))
    }
    minutes = [epoch_minute(row["time"]) for row in next(iter(series.values()))]
    if any([epoch_minute(row["time"]) for row in other] != minutes for other in series.values()):
        raise SystemExit("the VCs' series cover different minutes")
    end = minutes[-1] + 1  # a job still running in the last minute runs to the month's end
    rows: list[tuple[int, str, int, int, RebuiltJob]] = []  # (start, vc, class, order, job)
    running = [0] * len(minutes)  # all VCs' running GPUs, both classes
    for class_index, (label, size_class, job_column, gpu_column) in enumerate(CLASSES):
        class_jobs: list[RebuiltJob] = []
        input_gpu_minutes = unexplained = 0
        for vc, vc_rows in series.items():
            samples = [
                (m, int(row[job_column]), int(row[gpu_column]))
                for m, row in zip(minutes, vc_rows, strict=True)
            ]
            rebuilt = reconstruct(samples, size_class)
            counts = running_counts(rebuilt.jobs, minutes)
            if rebuilt.unexplained_gpu_minutes == 0 and counts != [s[1:] for s in samples]:
                raise SystemExit(f"{vc} {label}: rebuilt counts differ from the input")
            running = [r + gpus for r, (_, gpus) in zip(running, counts, strict=True)]
            input_gpu_minutes += sum(gpus for _, _, gpus in samples)
            unexplained += rebuilt.unexplained_gpu_minutes
            class_jobs.extend(rebuilt.jobs)
            rows.extend((job.start, vc, class_index, n, job) for n, job in enumerate(rebuilt.jobs))
        describe_class(label, class_jobs, input_gpu_minutes, unexplained, end)
    rows.sort(key=lambda row: row[:4])
    ranked = sorted(running)
    print(
        f"all: {len(rows):,} jobs in {len(series)} VCs; running GPUs over the month: "
        f"mean {statistics.mean(running):.1f}, p95 {ranked[int(0.95 * len(ranked))]}, "
        f"max {ranked[-1]}"
    )
    outputs = {TRACE: trace_text(rows, end), BUDGETS: budgets_text(weights(list(series)))}
    for path, text in outputs.items():
        name = path.relative_to(TRACES.parents[1])
        if not check:
            path.write_text(text)
            print(f"wrote {name}")
        elif path.read_text() != text:
            raise SystemExit(f"{name} is not what the rebuild gives: rerun without --check")
        else:
            print(f"{name}: as the rebuild gives it")


def trace_text(rows: Sequence[tuple[int, str, int, int, RebuiltJob]], end: int) -> str:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(["timestamp", "duration", "num_gpus", "gpu_time", "cluster"])
    for start, vc, _, _, job in rows:
        duration = 60.0 * ((end if job.end is None else job.end) - start)
        writer.writerow([stamp(start), duration, job.gpus, duration * job.gpus, vc])
    return out.getvalue()


def budgets_text(by_vc: dict[str, float]) -> str:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(["budget", "weight"])
    for vc in sorted(by_vc):
        writer.writerow([vc, f"{by_vc[vc]:.2f}"])
    return out.getvalue()


if __name__ == "__main__":
    main(check="--check" in sys.argv[1:])
