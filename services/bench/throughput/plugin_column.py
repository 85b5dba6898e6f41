"""The job_submit plugin's column of ``fairshare bench throughput``, whole: the door
(``plugin.py``) and the submit-to-start of both sides (plain ``sbatch`` in ``plugin.py``,
Fairshare's native path in ``native.py``), then their table. Its own module so that the two it
joins import neither each other nor it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from services.bench.throughput.native import native_starts
from services.bench.throughput.plugin import (
    Report,
    door,
    no_room,
    plain_starts,
    plugin_missing,
    table,
)


def starts(
    count: int,
    job_s: float,
    stall_s: float,
    bootstrap: str | None,
    data_dir: Path,
    report: Report,
) -> dict[str, Any]:
    plain = plain_starts(count, job_s, stall_s, report)
    native = native_starts(count, job_s, stall_s, bootstrap, data_dir, report)
    return {
        "plain": plain,
        "fairshare": native,
        "p50_ratio": _ratio(_wait(native, "p50"), _wait(plain, "p50")),
        "p99_ratio": _ratio(_wait(native, "p99"), _wait(plain, "p99")),
    }


def _wait(figures: dict[str, Any], which: str) -> float | None:
    value = (figures.get("submit_to_start_ms") or {}).get(which)
    return None if value is None else float(value)


def _ratio(ours: float | None, theirs: float | None) -> float | None:
    return round(ours / theirs, 2) if ours is not None and theirs else None


# -- the column --------------------------------------------------------------------------------
def plugin_column(
    *,
    count: int,
    block: int,
    job_s: float,
    stall_s: float,
    bootstrap: str | None,
    data_dir: Path,
    report: Report,
) -> dict[str, Any]:
    """Both measurements (see the module's docstring), then their table on ``report``."""
    # four sides of ``count`` jobs: the door's two, then the starts' two
    missing = plugin_missing() or no_room(4 * count)
    if missing is not None:
        report(f"plugin not measured: {missing}")
        return {"skipped": missing}
    result = {"door": door(count, block, job_s, report)}
    result["starts"] = starts(count, job_s, stall_s, bootstrap, data_dir, report)
    for line in table(result):
        report(line)
    return result
