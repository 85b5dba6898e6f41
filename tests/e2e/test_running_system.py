"""The running system end to end through a real broker: every service its own process, as
``fairshare up`` starts them, driven only through the API (and ``kill``).

One scenario, in phases, on two simulated nodes of 4 GPUs:
1. bo's funded job fills a node, then ana's (an under-served budget) cannot fit: once bo's
   contract is over it is preempted for ana's, requeued, placed again and finished; both are
   charged;
2. an admin cordons a node: its work is preempted after its contract and the node drains,
   with no human step;
3. the agent is killed: its nodes go silent, are declared down, their work is lost and
   requeued; a new agent brings them back and the work runs again;
4. the scheduler and the projector are killed and restarted mid-run: no command, charge or
   event is lost or duplicated, and the audit of the log against the read models is identical.
"""

from __future__ import annotations

import os
import subprocess
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from events import TopicKind, Topics, decode_binary
from events.models import LedgerCharge, PlaceCommand, PreemptCommand
from services.brokers import BrokerHandle
from services.bus.export import read_to_end
from services.launcher import Stack, UpConfig
from tests.integration.kafka_bus import service_principals
from tests.processes import free_port, run_fairshare

# 50-60 s: with the slow scenarios (the default run keeps its ten minutes)
pytestmark = [pytest.mark.broker, pytest.mark.slow]


@pytest.fixture
def stack(broker: BrokerHandle, tmp_path: Path) -> Iterator[Stack]:
    topics = Topics(prefix=f"e2e{uuid.uuid4().hex[:8]}.")
    config = UpConfig(
        bootstrap=broker.bootstrap,
        topics=topics,
        data_dir=tmp_path,
        database_url=f"sqlite:///{tmp_path}/fairshare.db",
        api_port=free_port(),
        nodes=2,
        gpus_per_node=4,
        heartbeat_s=1.0,
        heartbeat_timeout_s=6.0,
        scheduler_tick_s=1.0,
        grace_period_s=2,
        submit_every_s=0,
        # on a secured session broker, each service as its own principal (as `up` runs them)
        kafka_identities=service_principals(broker, topics, ["demo"], tmp_path / "kafka"),
    )
    running = Stack(config)
    running.start()
    try:
        running.wait_for_api()
        yield running
    finally:
        problems = running.stop()
        assert not problems, problems


class Api:
    def __init__(self, url: str) -> None:
        self.url = url

    def call(self, method: str, path: str, token: str, **kwargs: Any) -> Any:
        response = httpx.request(
            method,
            f"{self.url}{path}",
            headers={"Authorization": f"Bearer {token}"},
            timeout=15,
            **kwargs,
        )
        assert response.status_code < 300, (response.status_code, response.text)
        return response.json()

    def submit(self, token: str, workload_id: str, budget: str, **fields: Any) -> None:
        body = {"workload_id": workload_id, "budget": budget, "pools": ["demo"], **fields}
        self.call("POST", "/workloads", token, json=body)

    def status(self, workload_id: str) -> str:
        return str(self.call("GET", f"/workloads/{workload_id}", "admin-token")["status"])


def _until(what: str, check: Callable[[], bool], timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for: {what}"
        time.sleep(0.3)


def _log(config: UpConfig, kind: TopicKind) -> list[Any]:
    return [
        decode_binary(r.value, r.headers).data
        for r in read_to_end(config.bootstrap, [config.topics.name(kind)])
    ]


def _kill(stack: Stack, name: str) -> None:
    process = stack.child(name).process
    assert process is not None
    process.kill()
    process.wait()


def test_the_running_system(stack: Stack) -> None:
    # Long on purpose: one scenario against one running system, each step building on the
    # state the previous one left (starting the services again per step would take minutes).
    config = stack.config
    api = Api(config.api_url)
    _until(
        "both nodes registered", lambda: len(api.call("GET", "/nodes", "bo-token")["nodes"]) >= 2
    )

    # 1. Preemption by an under-served budget after the contract, requeue, finish, charges.
    for i in (1, 2):
        api.submit(
            "bo-token", f"bo-{i}", "lab/robotics", gpus=4, min_runtime_s=3, spec={"duration_s": 12}
        )
    _until("bo's jobs run", lambda: api.status("bo-1") == api.status("bo-2") == "running")
    api.submit("ana-token", "ana-1", "lab/vision", gpus=4, min_runtime_s=3, spec={"duration_s": 4})
    _until("ana's job runs", lambda: api.status("ana-1") in ("running", "succeeded"))
    why = api.call("GET", "/workloads/ana-1/why", "ana-token")
    preempts = [e for e in _log(config, TopicKind.COMMANDS) if isinstance(e, PreemptCommand)]
    assert len(preempts) == 1
    victim = preempts[0]
    assert victim.workload_id in ("bo-1", "bo-2")
    assert victim.decision.reason == "preempt-for"
    assert victim.decision.preemptor == "ana-1"
    assert why is not None
    _until("every job finished", lambda: all(
        api.status(w) == "succeeded" for w in ("ana-1", "bo-1", "bo-2")
    ), timeout_s=90)  # fmt: skip
    statuses = [type(e).__name__ for e in _log(config, TopicKind.WORKLOADS)
                if getattr(e, "workload_id", None) == victim.workload_id]  # fmt: skip
    assert "WorkloadPreempted" in statuses
    assert "WorkloadRequeued" in statuses
    assert statuses.count("WorkloadStarted") == 2
    _until("charges posted for every run", lambda: {
        c.workload_id for c in _log(config, TopicKind.LEDGER) if isinstance(c, LedgerCharge)
    } >= {"ana-1", "bo-1", "bo-2"})  # fmt: skip

    # 2. A cordon drains a node with no human step.
    api.submit("chen-token", "chen-1", "lab/nlp", gpus=4, min_runtime_s=2, spec={"duration_s": 60})
    _until("chen's job runs", lambda: api.status("chen-1") == "running")
    node = api.call("GET", "/workloads/chen-1", "chen-token")["placement"][0]["node"]
    api.call("POST", f"/nodes/{node}/cordon", "admin-token", json={"reason": "maintenance"})
    _until(
        "the cordoned node drains",
        lambda: any(
            type(e).__name__ == "NodeDrained" and e.node == node
            for e in _log(config, TopicKind.CLUSTER)
        ),
        timeout_s=60,
    )
    drains = [
        e
        for e in _log(config, TopicKind.COMMANDS)
        if isinstance(e, PreemptCommand) and e.workload_id == "chen-1"
    ]
    assert [d.decision.reason for d in drains] == ["drain"]
    _until("chen's job runs elsewhere", lambda: api.status("chen-1") == "running")
    api.call("POST", f"/nodes/{node}/uncordon", "admin-token")

    # 3. The agent dies: silent nodes go down, their work is lost and requeued; a new agent
    #    brings them back and the work runs again.
    _kill(stack, "agent")
    _until(
        "chen's job lost",
        lambda: any(
            type(e).__name__ == "WorkloadLost" and e.workload_id == "chen-1"
            for e in _log(config, TopicKind.WORKLOADS)
        ),
        timeout_s=60,
    )
    stack.spawn(stack.child("agent"))
    _until("chen's job runs again", lambda: api.status("chen-1") == "running", timeout_s=60)

    # 4. Scheduler and projector killed and restarted mid-run.
    for i in range(3):
        api.submit("ana-token", f"ana-r{i}", "lab/vision", gpus=2, min_runtime_s=0,
                   spec={"duration_s": 3})  # fmt: skip
    _kill(stack, "scheduler")
    _kill(stack, "projector")
    stack.spawn(stack.child("scheduler"))
    stack.spawn(stack.child("projector"))
    _until("the work submitted across the restart finished", lambda: all(
        api.status(f"ana-r{i}") == "succeeded" for i in range(3)
    ), timeout_s=90)  # fmt: skip

    commands = [e for e in _log(config, TopicKind.COMMANDS)
                if isinstance(e, PlaceCommand | PreemptCommand)]  # fmt: skip
    repeated = [c for c, n in Counter(c.command_id for c in commands).items() if n > 1]
    assert not repeated, f"commands issued twice: {repeated}"
    charges = [c for c in _log(config, TopicKind.LEDGER) if isinstance(c, LedgerCharge)]
    assert len({c.charge_id for c in charges}) == len(charges), "no charge posted twice"
    ids = Counter(
        decode_binary(r.value, r.headers).id
        for r in read_to_end(config.bootstrap, config.topics.all_names())
    )
    assert not [i for i, n in ids.items() if n > 1], "no event published twice"

    # The auditor's check: the log's charges recomputed from its facts, and the read models'.
    def audit(*extra: str) -> subprocess.CompletedProcess[str]:
        return run_fairshare(
            "audit", "replay", "--kafka", config.bootstrap, "--topic-prefix",
            config.topics.prefix, *extra, timeout=120, env={**os.environ, "COLUMNS": "200"},
        )  # fmt: skip

    replayed = audit()
    assert replayed.returncode == 0, replayed.stdout + replayed.stderr
    assert "identical" in replayed.stdout
    _until("the projector caught up", lambda: audit("--database-url", config.database_url)
           .returncode == 0, timeout_s=60)  # fmt: skip
