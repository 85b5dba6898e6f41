"""``fairshare bench audit``: audit replay throughput, against a bare decode of the same file
(the floor any reader of the export pays)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from services.bench.fixtures import synthetic_log


def audit_benchmark(events: int, path: Path | None = None, strict: bool = False) -> dict[str, Any]:
    """Audit replay of an exported log against a loop that only decodes it with orjson;
    decoded as ``fairshare audit replay`` does (leanly, or in full with ``strict``)."""
    import tempfile

    import orjson

    from events.ndjson import read_events
    from services.audit.replay import replay

    with tempfile.TemporaryDirectory() as tmp:
        log = path or Path(tmp) / "events.ndjson"
        count = synthetic_log(log, events) if path is None else sum(1 for _ in log.open("rb"))
        started = time.perf_counter()
        with log.open("rb") as handle:
            decoded = sum(1 for line in handle if orjson.loads(line))
        baseline_s = time.perf_counter() - started
        started = time.perf_counter()
        result = replay(read_events(log, lean=not strict))
        replay_s = time.perf_counter() - started
    return {
        "events": count,
        "decode": "strict" if strict else "lean",
        "decoded_by_baseline": decoded,
        "charges": result.recorded_count,
        "identical": result.identical,
        "replay_s": round(replay_s, 3),
        "events_per_s": round(count / replay_s),
        "baseline_events_per_s": round(count / baseline_s),
        "ratio": round((count / replay_s) / (count / baseline_s), 4),
    }
