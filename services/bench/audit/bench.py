"""``fairshare bench audit``: audit replay throughput, against a bare decode of the same file
(the floor any reader of the export pays); optionally of the same log signed as the services
sign it, record by record or a batch per flush (docs/signed-facts.md). In the same run, the
same file audited by several processes split by workload (``--workers``,
``services.audit.parallel``), which must give the very result of the one process."""

from __future__ import annotations

import os
import resource
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Literal

from services.bench.fixtures import synthetic_log

#: How the replayed log is signed: not at all, each record alone, or each signer's records
#: 16 at a time (as a service signs what it publishes between two flushes).
SignedAs = Literal["none", "records", "batches"]


def audit_benchmark(
    events: int,
    path: Path | None = None,
    strict: bool = False,
    signed: SignedAs = "none",
    workers: int = 2,
) -> dict[str, Any]:
    """Audit replay of an exported log against a loop that only decodes it with orjson;
    decoded as ``fairshare audit replay`` does (leanly, or in full with ``strict``); then by
    ``workers`` processes (``fairshare audit replay --workers``; none with 1). The machine's
    load average is given before and after: the split audit needs its cores free."""
    import tempfile

    import orjson

    from events.ndjson import read_events
    from services.audit.parallel import replay_file
    from services.audit.replay import replay

    load_before = os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as tmp:
        log = path or Path(tmp) / "events.ndjson"
        count = synthetic_log(log, events) if path is None else sum(1 for _ in log.open("rb"))
        signing_s = None
        if signed != "none":
            started = time.perf_counter()
            log, count = sign_log(log, Path(tmp) / "signed.ndjson", signed)
            signing_s = round(time.perf_counter() - started, 3)
        started = time.perf_counter()
        with log.open("rb") as handle:
            decoded = sum(1 for line in handle if orjson.loads(line))
        baseline_s = time.perf_counter() - started
        started, cpu = time.perf_counter(), _cpu_s()
        result = replay(read_events(log, lean=not strict))
        replay_s, replay_cpu_s = time.perf_counter() - started, _cpu_s() - cpu
        split: dict[str, Any] = {}
        if workers > 1:
            started, cpu = time.perf_counter(), _cpu_s()
            parallel = replay_file(log, workers, strict)
            parallel_s, parallel_cpu_s = time.perf_counter() - started, _cpu_s() - cpu
            split = {
                "workers": workers,
                "parallel_same_result": parallel.result == result,
                "parallel_fell_back": parallel.fell_back,
                "parallel_s": round(parallel_s, 3),
                "parallel_cpu_s": round(parallel_cpu_s, 3),
                "parallel_share_cpu_s": [round(cpu, 3) for cpu in parallel.share_cpu_s],
                "parallel_events_per_s": round(count / parallel_s),
                "parallel_ratio": round((count / parallel_s) / (count / baseline_s), 4),
                "parallel_speedup": round(replay_s / parallel_s, 3),
            }
    return {
        "events": count,
        "decode": "strict" if strict else "lean",
        "signed": signed,
        "signing_s": signing_s,
        "decoded_by_baseline": decoded,
        "charges": result.recorded_count,
        "not_believed": result.not_believed,
        "identical": result.identical,
        "replay_s": round(replay_s, 3),
        "replay_cpu_s": round(replay_cpu_s, 3),
        "events_per_s": round(count / replay_s),
        "baseline_events_per_s": round(count / baseline_s),
        "ratio": round((count / replay_s) / (count / baseline_s), 4),
        **split,
        "load_average": [round(load_before, 2), round(os.getloadavg()[0], 2)],
    }


def _cpu_s() -> float:
    """CPU seconds of this process and of its children that have ended (the split audit's)."""
    own, children = (
        resource.getrusage(resource.RUSAGE_SELF),
        resource.getrusage(resource.RUSAGE_CHILDREN),
    )
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def sign_log(source: Path, target: Path, signed: SignedAs) -> tuple[Path, int]:
    """``source`` signed into ``target``: fresh keys for the admin, the API, the agent and
    charging, registered first (the admin's registering itself), then every record signed by
    the role that states it. Returns the signed log and its number of records."""
    from events.envelope import Envelope, new_event
    from events.models import SigningKeyRegistered
    from events.ndjson import EventLogWriter, read_events
    from events.signing import BATCH_MAX, Signer
    from projections.trust import ADMIN, AGENT, STATED_BY

    keys = {role: Signer.generate() for role in (ADMIN, "api", AGENT, "charging")}
    records = [e for e in read_events(source) if isinstance(e, Envelope)]
    first = min(e.time for e in records) - timedelta(hours=1)
    epoch = datetime(1970, 1, 1, tzinfo=UTC)
    with EventLogWriter(target) as writer:
        for role, signer in keys.items():
            registration = SigningKeyRegistered(
                key_id=signer.key_id,
                public_key=signer.public_key_text,
                role=role,  # type: ignore[arg-type]
                cluster="bench" if role == AGENT else None,
                registered_by="admin",
                required_from=epoch,
            )
            writer.write(keys[ADMIN].sign(new_event(registration, source="bench", time=first)))
        # each signer's records in log order, 16 to a batch (or one): a service's flushes
        # interleave with the others' in the log
        by_role: dict[str, list[int]] = {}
        for at, envelope in enumerate(records):
            roles = STATED_BY[type(envelope.data)]
            role = next(r for r in ("api", AGENT, "charging", ADMIN) if r in roles)
            by_role.setdefault(role, []).append(at)
        size = 1 if signed == "records" else BATCH_MAX
        out: list[Envelope[Any] | None] = [None] * len(records)
        for role, places in by_role.items():
            for start in range(0, len(places), size):
                chunk = places[start : start + size]
                batch = keys[role].sign_batch([records[at] for at in chunk])
                for at, signed_record in zip(chunk, batch, strict=True):
                    out[at] = signed_record
        for record in out:
            assert record is not None
            writer.write(record)
        return target, writer.count
