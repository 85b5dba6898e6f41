"""The figures of ``fairshare bench throughput``: one function for Slurm's phases and
Fairshare's, ratios of like with like, and targets that are met or not by the numbers."""

from __future__ import annotations

from typing import Any

from services.bench.throughput.bench import _ratios, _targets
from services.bench.throughput.figures import ratio, submit_phase_figures
from services.bench.throughput.slurm import _epoch


def test_a_phase_counts_from_the_first_send_to_the_last_placement() -> None:
    sent = {"a": 100.0, "b": 100.5, "c": 101.0}
    placed = {"a": 100.2, "b": 103.0, "c": 102.0}
    started = {"a": 100.3, "b": 103.5, "c": 102.5}
    figures = submit_phase_figures(
        sent=sent, accepted=3, errors=[], submitting_s=1.5, placed=placed, started=started
    )
    assert figures["accepted_per_s"] == 2.0
    assert figures["all_placed_s"] == 3.0
    assert figures["placed"] == 3
    assert figures["submit_to_start_ms"]["p50"] == 1500.0
    assert figures["submit_to_start_ms"]["max"] == 3000.0


def test_a_job_never_placed_leaves_the_time_to_place_all_unknown() -> None:
    figures = submit_phase_figures(
        sent={"a": 1.0, "b": 1.0},
        accepted=2,
        errors=["x", "x", "y"],
        submitting_s=0.0,
        placed={"a": 2.0},
        started={},
    )
    assert figures["all_placed_s"] is None
    assert figures["accepted_per_s"] is None
    assert figures["error_examples"] == ["x", "y"]
    assert figures["submit_to_start_ms"]["count"] == 0


def _result(fair_rate: float, slurm_rate: float | None, p99: float, large_s: float) -> Any:
    phase = {"accepted_per_s": fair_rate, "all_placed_s": 10.0,
             "submit_to_start_ms": {"p50": 500.0}}  # fmt: skip
    slurm: dict[str, Any] = (
        {"skipped": "no Slurm"}
        if slurm_rate is None
        else {
            "single": {
                "accepted_per_s": slurm_rate,
                "all_placed_s": 20.0,
                "submit_to_start_ms": {"p50": 1000.0},
            },
            "array": {},
        }
    )
    return {
        "fairshare": {
            "single": phase,
            "array": phase,
            "large_array": {"accepted": 10_000, "accepted_s": large_s},
        },
        "slurm": slurm,
        "sustained": {
            "placed_ms": {"p99": p99},
            "rate_achieved_per_s": 199.0,
            "acknowledged": 12_000,
            "count": 12_000,
        },
    }


def test_ratios_divide_ours_by_slurms_and_targets_are_judged_by_the_numbers() -> None:
    result = _result(fair_rate=300.0, slurm_rate=400.0, p99=800.0, large_s=4.0)
    ratios = _ratios(result)
    assert ratios["single_accepted_per_s"] == 0.75
    assert ratios["single_all_placed_s"] == 0.5
    assert ratios["single_start_p50"] == 0.5
    assert ratios["array_accepted_per_s"] is None  # Slurm's array phase has no figure
    targets = _targets(result)
    assert targets["accepted_per_s_at_least_sbatch"] is False
    assert targets["large_array_accepted_s"]["met"] is True
    assert targets["sustained"]["met"] is True

    faster = _targets(_result(fair_rate=500.0, slurm_rate=400.0, p99=1200.0, large_s=11.0))
    assert faster["accepted_per_s_at_least_sbatch"] is True
    assert faster["large_array_accepted_s"]["met"] is False
    assert faster["sustained"]["met"] is False
    assert _targets(_result(500.0, None, 800.0, 4.0))["accepted_per_s_at_least_sbatch"] is None


def test_ratio_and_slurm_times() -> None:
    assert ratio(3.0, 2.0) == 1.5
    assert ratio(None, 2.0) is None
    assert ratio(3.0, 0.0) is None
    assert _epoch("N/A") is None
    assert _epoch("2026-12-02T20:00:00") is not None
