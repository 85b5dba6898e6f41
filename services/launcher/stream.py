"""The synthetic workload stream of ``fairshare up``: demo users submitting through the API,
as real users would, so the demo shows placement, bursting, preemption and charges."""

from __future__ import annotations

import random
import time
import uuid
from collections.abc import Callable
from typing import Any, Protocol

from services.launcher.children import log
from services.launcher.config import UpConfig
from services.launcher.lab import USERS


class Tally(Protocol):
    """Where the stream counts its submissions (the stack, which ``fairshare up`` reports)."""

    submitted: int
    refused: int


def submit_stream(config: UpConfig, should_stop: Callable[[], bool], tally: Tally) -> None:
    """Users submitting through the API: short jobs, some funded (a contract), some
    bursting for free, so the demo shows placement, bursting, preemption and charges."""
    from services.client.api import ApiError, FairshareClient

    rng = random.Random(config.seed)
    clients = {user: FairshareClient(config.api_url, token) for user, (token, _) in USERS.items()}
    try:
        while not should_stop():
            if _pending(clients["ana"]) >= config.max_pending:
                _pause(1.0, should_stop)
                continue
            user = rng.choice(sorted(USERS))
            try:
                clients[user].submit(_request(config, rng, user))
                tally.submitted += 1
            except ApiError as error:
                tally.refused += 1
                log.warning("demo submission refused: %s", error)
            except Exception as error:  # the API restarting: try again later
                log.warning("demo submission failed: %s", error)
            pause = rng.expovariate(1 / config.submit_every_s) if config.submit_every_s else 1
            _pause(min(pause, 30), should_stop)
    finally:
        for client in clients.values():
            client.close()


def _request(config: UpConfig, rng: random.Random, user: str) -> dict[str, Any]:
    seconds = rng.randint(30, 300)
    return {
        "workload_id": f"demo-{uuid.uuid4().hex[:10]}",
        "budget": USERS[user][1],
        # either cluster will do: the scheduler places it where there is room
        "pools": list(config.pools),
        "gpus": rng.choice((1, 1, 2, 2, 4)),
        "min_runtime_s": rng.choice((0, 60, 120, 300)),
        # the simulated agent runs duration_s; the local, Slurm and Kubernetes ones run the
        # command; KWOK's simulated kubelets (a Kubernetes without machines) run no command
        # and end the pod as its annotation says
        "spec": {
            "duration_s": seconds,
            "command": ["sleep", str(seconds)],
            "annotations": {"fairshare.dev/kwok-finish-after": f"{seconds}s"},
        },
    }


def _pause(seconds: float, should_stop: Callable[[], bool]) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and not should_stop():
        time.sleep(0.2)


def _pending(client: Any) -> int:
    try:
        return len(client.workloads(status="pending").workloads)
    except Exception:  # the API restarting: do not hold the stream up
        return 0
