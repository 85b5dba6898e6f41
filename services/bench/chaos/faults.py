"""The faults of ``fairshare bench chaos``, each a ``kill -9``: of a broker (the leader of the
workloads partition, restarted on its own data), of a service of the stack (restarted by the
supervisor, as under ``fairshare up``), or of the scheduler that holds the lease (a standby
must take over within the lease's TTL, without the supervisor's help).

The lease holder is found by reading the lease topic as the schedulers do: its holder ids name
the process (``host:pid:nonce``).
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass

from confluent_kafka.admin import AdminClient

from events import TopicKind, Topics
from services.brokers import KafkaCluster
from services.bus.connection import client_config
from services.bus.export import read_to_end
from services.launcher import Stack
from services.scheduler.lease import LeaseRecord


def kill_group(pid: int) -> None:
    """``kill -9`` of a service's whole process group (its pid leads it)."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, signal.SIGKILL)


def kill_service(stack: Stack, name: str) -> int:
    """``kill -9`` of one service of the stack; its pid. The supervisor restarts it."""
    child = stack.child(name)
    assert child.process is not None, f"{name} is not running"
    pid = child.process.pid
    kill_group(pid)
    return pid


def workloads_leader(bootstrap: str, topics: Topics, timeout_s: float = 30) -> int:
    """The node id leading partition 0 of the workloads topic (where submissions go)."""
    name = topics.name(TopicKind.WORKLOADS)
    deadline = time.monotonic() + timeout_s
    while True:
        metadata = AdminClient(client_config(bootstrap)).list_topics(name, timeout=10)
        topic = metadata.topics.get(name)
        if topic is not None and topic.error is None and 0 in topic.partitions:
            leader = int(topic.partitions[0].leader)
            if leader >= 0:
                return leader
        if time.monotonic() > deadline:
            raise RuntimeError(f"no leader for {name} partition 0 in {timeout_s:g} s")
        time.sleep(0.5)


@dataclass(frozen=True)
class BrokerOutage:
    node_id: int
    #: From the kill to the restarted node serving again.
    down_s: float


def kill_and_restart_broker(
    cluster: KafkaCluster, topics: Topics, down_s: float = 3.0
) -> BrokerOutage:
    """``kill -9`` of the workloads partition's leader; ``down_s`` later it is started again
    on its own data directory, and this returns once it serves."""
    node_id = workloads_leader(cluster.bootstrap, topics)
    killed_at = time.monotonic()
    cluster.node(node_id).kill()
    time.sleep(down_s)
    cluster.restart(node_id)
    return BrokerOutage(node_id, time.monotonic() - killed_at)


def lease_records(bootstrap: str, topics: Topics) -> list[LeaseRecord]:
    """The lease topic as the schedulers read it, in log order."""
    records = read_to_end(bootstrap, [f"{topics.prefix}scheduler-lease"])
    return [r for r in (LeaseRecord.decode(record.value) for record in records) if r is not None]


def lease_holder(bootstrap: str, topics: Topics) -> LeaseRecord | None:
    """The latest record of the highest epoch: who leads now, as far as the log says."""
    records = lease_records(bootstrap, topics)
    if not records:
        return None
    top = max(record.epoch for record in records)
    return [record for record in records if record.epoch == top][-1]


def holder_pid(holder: str) -> int:
    return int(holder.split(":")[1])


@dataclass(frozen=True)
class Failover:
    killed: str
    epoch_before: int
    epoch_after: int
    #: From the kill -9 to the new leader's first renewal read back from the lease topic.
    failover_s: float
    #: Which service leads now (a standby, or the killed one restarted by the supervisor).
    new_leader: str


def kill_lease_holder(
    stack: Stack,
    topics: Topics,
    timeout_s: float = 60.0,
    wait: float = 0.5,
    report: Callable[[str], None] = lambda _line: None,
) -> Failover:
    """``kill -9`` of the scheduler holding the lease; waits, supervising the stack as
    ``fairshare up`` does, until another epoch is renewed by its winner."""
    bootstrap = stack.config.bootstrap
    deadline = time.monotonic() + timeout_s
    while True:
        holder = lease_holder(bootstrap, topics)
        # the last renewal may be that of a scheduler that died earlier (a broker kill makes
        # both exit): its lease stands until it expires and a live scheduler wins it
        killed = _live_child(stack, holder.holder) if holder and holder.kind == "renew" else None
        if holder is not None and killed is not None:
            break
        if time.monotonic() > deadline:
            held = f" (last renewed by {holder.holder})" if holder is not None else ""
            raise RuntimeError(f"no live scheduler of this stack holds the lease{held}")
        stack.supervise(report)  # a scheduler that died earlier is due back
        time.sleep(wait)
    kill_service(stack, killed)
    killed_at = time.monotonic()
    while time.monotonic() < killed_at + timeout_s:
        stack.supervise(report)
        now = lease_holder(bootstrap, topics)
        if now is not None and now.epoch > holder.epoch and now.kind == "renew":
            names = {c.process.pid: c.name for c in stack.children if c.process is not None}
            return Failover(
                killed=killed,
                epoch_before=holder.epoch,
                epoch_after=now.epoch,
                failover_s=time.monotonic() - killed_at,
                new_leader=names.get(holder_pid(now.holder), now.holder),
            )
        time.sleep(wait)
    raise RuntimeError(f"no scheduler took the lease over within {timeout_s:g} s of the kill")


def _live_child(stack: Stack, holder: str) -> str | None:
    """The name of the running child of ``stack`` whose process wrote ``holder``, if any."""
    pid = holder_pid(holder)
    for child in stack.children:
        if child.process is not None and child.process.pid == pid and child.process.poll() is None:
            return child.name
    return None
