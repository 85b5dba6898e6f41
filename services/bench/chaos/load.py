"""The load of ``fairshare bench chaos``: users submitting through the API, each submission
retried with its own workload id until the API acknowledges it (201 created, 200 already
there, 202 recorded), so "acknowledged" means exactly what a user was told.

A retry after a lost answer is safe because the workload id is the client's: the API answers
200 for a submission it already holds. A 4xx other than those is a refusal and is not retried.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from services.launcher.lab import USERS

#: HTTP answers that mean "the log holds it".
ACKNOWLEDGED = frozenset({200, 201, 202})


def chaos_request(rng: random.Random, index: int, cluster: str) -> tuple[str, dict[str, Any]]:
    """The user and the body of submission ``index``: short jobs, funded (a contract, so
    preemption has rules to keep) and free ones, one or two GPUs."""
    user = rng.choice(sorted(USERS))
    seconds = rng.randint(1, 6)
    return user, {
        "workload_id": f"chaos-{index:06d}",
        "budget": USERS[user][1],
        "pools": [cluster],
        "gpus": rng.choice((1, 1, 2)),
        "min_runtime_s": rng.choice((0, 0, 2, 5)),
        "spec": {"duration_s": seconds},
    }


@dataclass
class Submitter:
    """Submits ``count`` workloads at about ``rate_per_s``; :meth:`run` is a thread's target."""

    api_url: str
    cluster: str
    count: int
    rate_per_s: float = 20.0
    seed: int = 7
    #: A submission not acknowledged after this long is given up (and reported).
    give_up_s: float = 240.0
    acknowledged: set[str] = field(default_factory=set)
    refused: dict[str, str] = field(default_factory=dict)
    given_up: list[str] = field(default_factory=list)
    #: Submissions finished (acknowledged, refused or given up): the run's progress.
    done: int = 0
    attempts: int = 0
    retries: int = 0
    finished: threading.Event = field(default_factory=threading.Event)

    def run(self, should_stop: Callable[[], bool]) -> None:
        from services.client.api import FairshareClient

        rng = random.Random(self.seed)
        clients = {
            user: FairshareClient(self.api_url, token, timeout_s=15)
            for user, (token, _) in USERS.items()
        }
        started = time.monotonic()
        try:
            for index in range(self.count):
                if should_stop():
                    break
                user, body = chaos_request(rng, index, self.cluster)
                self._until_acknowledged(clients[user], body, should_stop)
                self.done += 1
                # paced against the start, so time lost to an outage is caught up after it
                ahead = started + (index + 1) / self.rate_per_s - time.monotonic()
                if ahead > 0:
                    time.sleep(ahead)
        finally:
            for client in clients.values():
                client.close()
            self.finished.set()

    def _until_acknowledged(
        self, client: Any, body: dict[str, Any], should_stop: Callable[[], bool]
    ) -> None:
        from services.client.api import ApiError

        workload_id = body["workload_id"]
        deadline = time.monotonic() + self.give_up_s
        pause = 0.1
        while not should_stop():
            self.attempts += 1
            try:
                client.submit(body)
            except ApiError as error:
                if error.status != 0 and error.status < 500 and error.status != 429:
                    self.refused[workload_id] = f"{error.status} {error}"
                    return
            else:
                if client.last_status in ACKNOWLEDGED:
                    self.acknowledged.add(workload_id)
                    return
            if time.monotonic() > deadline:
                self.given_up.append(workload_id)
                return
            self.retries += 1
            time.sleep(pause)  # the API or the broker is away: it comes back
            pause = min(2.0, pause * 2)
        self.given_up.append(workload_id)
