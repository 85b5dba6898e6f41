"""``fairshare bench throughput`` as a test, small: 20 jobs through ``sbatch`` on the real Slurm of
``.ci/start-slurm`` and through Fairshare's API in the same run, one array each, a 200-element
array, and a few seconds of sustained load; and the job_submit plugin's column: 20 sbatch
through the plugin against 20 to the plain partition (accepted per second), then 20 of each
until started, the plugin's through Fairshare's Slurm agent (submit to start). The JSON must
have the shape the command promises, with Slurm measured (ratios present), nothing accepted
may go unplaced, and the bindings file must be as it was. The issue's targets are reported by
the benchmark, not asserted: this machine's load decides them as much as the code does."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest
from typer.testing import CliRunner

from tests.integration.slurm_fixtures import require_slurm

pytestmark = [pytest.mark.slurm, pytest.mark.broker, pytest.mark.timeout(1200)]

BINDINGS = Path("/etc/slurm/fairshare-bindings")


def test_throughput_measures_sbatch_and_the_api_in_one_run(tmp_path: Path) -> None:
    require_slurm()
    from services.bench.cli import bench_app

    out = tmp_path / "throughput.json"
    bindings = BINDINGS.read_bytes() if BINDINGS.exists() else None
    args = ["throughput", "--count", "20", "--clients", "4", "--large-array", "200"]
    args += ["--sustained-rate", "10", "--sustained-s", "3", "--data-dir", str(tmp_path / "run")]
    result = CliRunner().invoke(bench_app, [*args, "--json-out", str(out)])
    assert result.exit_code == 0, (result.output, result.exception)
    found = orjson.loads(out.read_bytes())
    for side in ("slurm", "fairshare"):
        for phase in ("single", "array"):
            figures = found[side][phase]
            assert figures["accepted"] == 20, (side, phase, figures)
            assert figures["placed"] == 20, (side, phase, figures)
            assert figures["accepted_per_s"] > 0
            assert figures["submit_to_start_ms"]["count"] == 20
    assert found["fairshare"]["large_array"]["accepted"] == 200
    assert set(found["fairshare"]["single"]["cpu_ms_per_submission"]) >= {"api", "scheduler"}
    assert found["ratios"]["single_accepted_per_s"] is not None  # Slurm measured in the run
    assert found["sustained"]["acknowledged"] == found["sustained"]["count"] == 30
    assert found["targets"]["large_array_accepted_s"]["met"] is True
    _check_plugin_column(found)
    assert (BINDINGS.read_bytes() if BINDINGS.exists() else None) == bindings, "put back"


def _check_plugin_column(found: dict[str, Any]) -> None:
    """Present and sane, not fast: each side accepted all 20 at a rate above 0, the ratio
    against the 0.9 target reported, every job started, p50 <= p99."""
    door = found["plugin"]["door"]
    for side in ("plain", "plugin"):
        assert door[side]["accepted"] == 20, (side, door[side])
        assert door[side]["errors"] == 0, (side, door[side])
        assert door[side]["accepted_per_s"] > 0
    assert door["ratio"] > 0
    assert found["ratios"]["plugin_accepted_per_s"] == door["ratio"]
    target = found["targets"]["plugin_accepted_per_s_ratio"]
    assert target["target"] == 0.9
    assert target["met"] is (door["ratio"] >= 0.9)
    starts = found["plugin"]["starts"]
    for side in ("plain", "fairshare"):
        figures = starts[side]
        assert figures["accepted"] == 20, (side, figures)
        assert figures["accepted_per_s"] > 0
        waits = figures["submit_to_start_ms"]
        assert waits["count"] == 20, (side, figures)
        assert 0 <= waits["p50"] <= waits["p99"], (side, waits)
    assert set(starts) >= {"p50_ratio", "p99_ratio"}
