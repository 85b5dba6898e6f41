"""What ``fairshare bench history`` measures of one service process, and how it tells that the
process has caught up with the log (for ``services.bench.history.bench``).

Each service runs as ``fairshare up`` starts it (``services.launcher.children``: the same
command line, its own session, its log in ``logs/<name>.log``). Caught up means:

* **projector**: the positions it stored in the read models (``projector_positions``, written
  in the same transaction as the rows) reach the ends its topics had when it was started;
* **scheduler** and **charging**: each logs ``... caught up with the log`` once it has folded
  the log as it stood at its start (from its checkpoint, or from the first offset); the
  scheduler's ``scheduler leading`` (after the old holder's lease ran out, on a restart) is
  kept beside it;
* **API**: ``GET /health`` answers ``caught_up: true``.

Peak memory is the process's ``VmHWM`` (peak resident set) from ``/proc/<pid>/status``, read
just before it is stopped.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from events import TopicKind, Topics
from events.positions import TopicPartition
from services.launcher.children import Child, last_log_line

Report = Callable[[str], None]
_TICK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float | None:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return (int(fields[11]) + int(fields[12])) / _TICK  # utime, stime


def memory_mb(pid: int) -> dict[str, float]:
    """Peak (VmHWM) and current (VmRSS) resident memory, MiB."""
    found: dict[str, float] = {}
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            name, _, value = line.partition(":")
            if name in ("VmHWM", "VmRSS"):
                found[name] = round(int(value.split()[0]) / 1024, 1)
    except (OSError, ValueError, IndexError):
        pass
    return {"peak_rss_mb": found.get("VmHWM", 0.0), "rss_mb": found.get("VmRSS", 0.0)}


@dataclass
class Watch:
    """One service process from its start: CPU samples until a readiness check passes."""

    child: Child
    #: Where its log stood when it started.
    log_offset: int = 0
    started: float = field(default_factory=time.monotonic)
    samples: list[tuple[float, float]] = field(default_factory=list)
    #: The figure it is measured for (``projector_cold``, ``api``, ...).
    figure: str = ""

    def rejected(self) -> int:
        """Facts its fold rejected, by its log (``LiveState`` says so for each)."""
        return log_since(self.child.log_path, self.log_offset).count("fact rejected")

    def sample(self) -> None:
        assert self.child.process is not None
        cpu = cpu_seconds(self.child.process.pid)
        if cpu is not None:
            self.samples.append((time.monotonic(), cpu))

    def cpu_until(self, t: float) -> float:
        used = [c for s, c in self.samples if s <= t]
        return round(used[-1], 1) if used else 0.0

    def dead(self) -> str | None:
        process = self.child.process
        if process is None or process.poll() is None:
            return None
        return f"exited {process.returncode}: {last_log_line(self.child.log_path)}"


def wait_ready(
    watch: Watch, ready: Callable[[], float | None], timeout_s: float, report: Report
) -> dict[str, Any]:
    """Sample until ``ready`` gives the monotonic time the service got there (or the timeout,
    or the process dies); the figures of the start."""
    deadline = watch.started + timeout_s
    next_line = watch.started + 30
    reached: float | None = None
    problem: str | None = None
    while reached is None:
        watch.sample()
        reached = ready()
        if reached is not None:
            break
        problem = watch.dead()
        now = time.monotonic()
        if problem is None and now > deadline:
            problem = f"not caught up within {timeout_s:.0f} s"
        if problem is not None:
            break
        if now >= next_line:
            report(f"  {watch.child.name}: {now - watch.started:.0f} s, not caught up yet")
            next_line += 30
        time.sleep(0.25)
    result: dict[str, Any] = {
        "caught_up_s": None if reached is None else round(reached - watch.started, 2),
        "cpu_s": watch.cpu_until(reached if reached is not None else time.monotonic()),
    }
    if problem is not None:
        result["failed"] = problem
    return result


# -- readiness of each service --------------------------------------------------------------
def group_members(admin: Any, group: str) -> set[str] | None:
    """The member ids of a consumer group that is stable (None: not stable, or unknown);
    ``admin``: a confluent-kafka ``AdminClient``."""
    from confluent_kafka import ConsumerGroupState

    try:
        description = admin.describe_consumer_groups([group])[group].result(timeout=10)
    except Exception:
        return None
    if description.state != ConsumerGroupState.STABLE:
        return None
    return {member.member_id for member in description.members if member.assignment}


class ProjectorReady:
    """Its stored positions reach ``ends`` (its topics' ends at its start), and it has joined
    its group anew (a member id not there before it started): it is reading again from those
    positions. Positions alone would say a restarted projector is caught up before it has
    even started, since the ones it stored before its stop are still there."""

    def __init__(self, bootstrap: str, database_url: str, ends: dict[TopicPartition, int]) -> None:
        from confluent_kafka.admin import AdminClient
        from sqlalchemy import create_engine

        from services.bus.connection import client_config
        from services.projector.sql_projector import PROJECTOR_NAME

        self.admin = AdminClient(client_config(bootstrap))
        self.group = PROJECTOR_NAME
        self.engine = create_engine(database_url)
        self.wanted = {key: end for key, end in ends.items() if end}
        self.before = group_members(self.admin, self.group) or set()
        self._positions_at: float | None = None

    def __call__(self) -> float | None:
        from sqlalchemy.exc import OperationalError

        from services.projector.sql_projector import SqlProjector

        if self._positions_at is None:
            try:
                stored = SqlProjector(self.engine).positions()
            except OperationalError:  # no tables yet
                return None
            if any(stored.get(key, 0) < end for key, end in self.wanted.items()):
                return None
            self._positions_at = time.monotonic()
        members = group_members(self.admin, self.group)
        if not members or members <= self.before:
            return None
        self.engine.dispose()
        return time.monotonic()


@contextlib.contextmanager
def service_env(**settings: str) -> Iterator[None]:
    """Settings of the services (``FAIRSHARE_CHECKPOINT_EVERY_S``, ...) through the environment
    they inherit from the bench."""
    before = {name: os.environ.get(name) for name in settings}
    os.environ.update(settings)
    try:
        yield
    finally:
        for name, value in before.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def log_since(path: Path, offset: int) -> str:
    """What a service's log says past ``offset``."""
    try:
        with path.open("rb") as handle:
            handle.seek(offset)
            return handle.read().decode(errors="replace")
    except OSError:
        return ""


class LogSays:
    """Its log, past ``offset``, says ``phrase`` (``scheduler caught up with the log``,
    ``charging caught up with the log``): each says so once it has folded the log as it was
    when it started, from its checkpoint or from the first offset."""

    def __init__(self, watch: Watch, offset: int, phrase: str) -> None:
        self.watch, self.offset, self.phrase = watch, offset, phrase

    def __call__(self) -> float | None:
        if self.phrase not in log_since(self.watch.child.log_path, self.offset):
            return None
        return time.monotonic()


class SchedulerLeads:
    """Its log, past ``offset``, says it leads (it caught up, then took the lease: on a
    restart only once the previous holder's ran out). Not the catch-up figure (that is
    :class:`LogSays`), but what a failover costs on top of it."""

    def __init__(self, watch: Watch, offset: int) -> None:
        self.watch, self.offset = watch, offset
        self.leading_at: float | None = None

    def __call__(self) -> float | None:
        if "scheduler leading" not in log_since(self.watch.child.log_path, self.offset):
            return None
        self.leading_at = self.leading_at or time.monotonic()
        return self.leading_at

    def leading_s(self) -> float | None:
        at = self.leading_at
        return None if at is None else round(at - self.watch.started, 2)


def api_ready(url: str, seen: dict[str, Any]) -> Callable[[], float | None]:
    """``/health`` says caught up; its answer is kept in ``seen`` (rejected, waiting, ...)."""
    import httpx

    def ready() -> float | None:
        try:
            answer = httpx.get(f"{url}/health", timeout=5)
        except httpx.HTTPError:
            return None
        if answer.status_code != 200:
            return None
        seen.update(answer.json())
        return time.monotonic() if seen.get("caught_up") else None

    return ready


# -- the other figures ------------------------------------------------------------------------
def broker_bytes(broker_dir: Path, topics: Topics) -> dict[str, int]:
    """Bytes of the log segments (``*.log``) of each topic kind on the broker's disk."""
    sizes = dict.fromkeys((kind.value for kind in TopicKind), 0)
    for segment in broker_dir.rglob("*.log"):
        partition_dir = segment.parent.name
        if not partition_dir.startswith(topics.prefix):
            continue
        kind = topics.kind_of(partition_dir.rsplit("-", 1)[0])
        if kind is not None:
            sizes[kind.value] += segment.stat().st_size
    return sizes


def closed_period_audit(bootstrap: str, topics: Topics) -> dict[str, Any]:
    """``fairshare audit replay --period`` of the latest period charging has sealed, timed
    (its function, as the command runs it); the seals are found by reading the ledger (the
    bench's cost, not the audit's)."""
    from events.models import PeriodClosed
    from services.audit.period import audit_period
    from services.bus.export import read_to_end
    from services.bus.records import check

    sealed = []
    for record in read_to_end(bootstrap, [topics.name(TopicKind.LEDGER)]):
        envelope = getattr(check(record, topics), "envelope", None)
        if envelope is not None and isinstance(envelope.data, PeriodClosed):
            sealed.append(envelope.data.period)
    if not sealed:
        return {"period": None, "sealed": 0, "note": "no period closed yet in this history"}
    result = audit_period(bootstrap, topics, max(sealed))
    return {
        "period": result.period,
        "sealed": len(sealed),
        "s": round(result.seconds, 3),
        "identical": result.identical,
        "from_checkpoint": result.from_checkpoint,
        "facts": result.facts,
        "ledger_records": result.ledger_records,
        "charges": result.recorded,
        "differences": result.differences[:5],
    }


def budgets_latency(url: str, requests: int = 50) -> dict[str, Any]:
    """``GET /budgets`` ``requests`` times in a row with the demo admin token (ms)."""
    import httpx

    from services.bench.latency.bench import percentiles

    samples, errors = [], 0
    with httpx.Client(timeout=120, headers={"Authorization": "Bearer admin-token"}) as client:
        for _ in range(requests):
            begun = time.perf_counter()
            answer = client.get(f"{url}/budgets")
            if answer.status_code == 200:
                samples.append(time.perf_counter() - begun)
            else:
                errors += 1
    return {**percentiles(samples), "errors": errors}


def charges_report(database_url: str, end: float, days: int = 30) -> dict[str, Any]:
    """``fairshare report charges --period day`` over the ``days`` before ``end``, timed (its
    function, as the command runs it, on the read models the projector wrote)."""
    from services.reports import report_bytes
    from services.reports.cli import open_read_models

    hi = int(end) // 86_400 * 86_400 + 86_400
    lo = hi - days * 86_400
    engine = open_read_models(database_url)
    try:
        begun = time.perf_counter()
        content = report_bytes(engine, "charges", "day", "csv", lo, hi)
        took = time.perf_counter() - begun
    finally:
        engine.dispose()
    return {"s": round(took, 3), "rows": max(0, content.count(b"\n") - 1), "bytes": len(content)}
