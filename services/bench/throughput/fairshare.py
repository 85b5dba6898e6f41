"""Fairshare's side of ``fairshare bench throughput``: single submissions from several clients as
fast as the API answers, one array, and when each job was placed and started (read back from
the log by the envelope times every fold uses, as ``bench latency`` does)."""

from __future__ import annotations

import contextlib
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from events import Topics
from services.bench.latency.bench import event_times
from services.bench.latency.load import OpenLoop
from services.launcher.lab import USERS

Report = Callable[[str], None]


def submit_singles(stack: Any, count: int, clients: int, job_s: float) -> OpenLoop:
    """``count`` submissions by ``clients`` threads, each sending its next one as soon as its
    last is answered (a closed loop: an unbounded rate for the open loop's schedule)."""
    load = OpenLoop(
        stack.config.api_url,
        stack.config.cluster,
        count,
        rate_per_s=float("inf"),
        job_s=job_s,
        workers=clients,
    )
    load.run(lambda: False)
    return load


@dataclass
class ArrayRun:
    array_id: str
    #: element id -> epoch seconds the array's request was sent
    sent: dict[str, float] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)
    started_at: float = 0.0
    ended_at: float = 0.0

    @property
    def accepted(self) -> int:
        return len(self.sent)


def submit_array(stack: Any, count: int, job_s: float) -> ArrayRun:
    """One request for ``count`` elements (``0-<count-1>``) as the first demo user."""
    from services.client.api import ApiError, FairshareClient

    user = sorted(USERS)[0]
    token, budget = USERS[user]
    run = ArrayRun(f"tp-{uuid.uuid4().hex[:8]}")
    body = {
        "array_id": run.array_id,
        "indices": f"0-{count - 1}",
        "budget": budget,
        "pools": [stack.config.cluster],
        "gpus": 1,
        "min_runtime_s": 0,
        "spec": {"duration_s": job_s},
    }
    with FairshareClient(stack.config.api_url, token, timeout_s=120) as client:
        run.started_at = time.time()
        try:
            client.request("POST", "/arrays", json=body)
        except ApiError as error:
            run.errors.append(str(error)[:300])
        run.ended_at = time.time()
    if not run.errors:
        run.sent = {f"{run.array_id}_{index}": run.started_at for index in range(count)}
    return run


def cancel_array(stack: Any, run: ArrayRun) -> None:
    from services.client.api import ApiError, FairshareClient

    # the figures are taken; a bench stack is thrown away whatever the answer
    with (
        FairshareClient(stack.config.api_url, "admin-token", timeout_s=120) as client,
        contextlib.suppress(ApiError),
    ):
        client.request("POST", f"/arrays/{run.array_id}/cancel", json={"reason": "bench"})


def wait_placed(
    stack: Any, topics: Topics, sent: dict[str, float], config: Any, report: Report
) -> tuple[dict[str, float], dict[str, float]]:
    """Until every job of ``sent`` has started (or the settle time is over): the placed and
    started times by job id."""
    deadline = time.monotonic() + config.settle_timeout_s
    while True:
        stack.supervise(report)
        times = event_times(stack.config.bootstrap, topics)
        waiting = [j for j in sent if j not in times["started"]]
        if not waiting or time.monotonic() > deadline:
            return times["placed"], times["started"]
        report(f"{len(sent) - len(waiting)} of {len(sent)} started")
        time.sleep(3)
