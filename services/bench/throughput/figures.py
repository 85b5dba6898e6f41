"""One way to turn a submission phase into figures, for Slurm and for Fairshare alike, so the
ratios ``fairshare bench throughput`` prints compare like with like."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from services.bench.latency.bench import percentiles


def submit_phase_figures(
    *,
    sent: Mapping[str, float],
    accepted: int,
    errors: Sequence[str],
    submitting_s: float,
    placed: Mapping[str, float],
    started: Mapping[str, float],
    resolution_s: float = 0.0,
) -> dict[str, Any]:
    """``sent``: job id -> epoch seconds its submission was sent; ``placed`` and ``started``:
    job id -> epoch seconds it was placed and started. Accepted per second counts from the
    first send to the last answer; time to place all, from the first send to the last
    placement (None when some were never placed)."""
    first = min(sent.values()) if sent else 0.0
    last_placed = max((placed[j] for j in sent if j in placed), default=None)
    every_placed = bool(sent) and all(j in placed for j in sent)
    return {
        "accepted": accepted,
        "errors": len(errors),
        "error_examples": sorted(set(errors))[:3],
        "submitting_s": round(submitting_s, 3),
        "accepted_per_s": round(accepted / submitting_s, 1) if submitting_s > 0 else None,
        "placed": sum(1 for j in sent if j in placed),
        "all_placed_s": round(last_placed - first, 2) if every_placed and last_placed else None,
        "submit_to_start_ms": percentiles(
            [started[j] - t for j, t in sent.items() if j in started]
        ),
        "time_resolution_s": resolution_s,
    }


def ratio(fairshare: float | None, slurm: float | None) -> float | None:
    return round(fairshare / slurm, 2) if fairshare and slurm else None
