"""Submit to start through Fairshare's native Slurm path, for the plugin's column of ``fairshare
bench throughput`` (``plugin.py``): ``sbatch`` to Fairshare's partition, held by the job_submit
plugin, taken by the Slurm agent as a workload of the account's budget, placed by the
scheduler, pinned and released by the agent, started by Slurm.

The stack is ``fairshare up``'s services (every one its own process, on an embedded Apache Kafka
broker, or on ``bootstrap``'s under a fresh topic prefix) with ``--slurm-cluster``
:data:`CLUSTER` ``--slurm-partition gpu`` (the agent's native work on, its bindings file the
plugin's), and a simulated cluster of one 1-GPU node that nothing uses. The account is bound
to a budget of the demo lab, and the user who runs the benchmark (the Slurm user of its jobs)
made a member of it, by facts the stack's admin signs, as ``fairshare up`` writes its demo lab
(``fairshare budgets bind-account`` would state the same binding through the API). The agent
rewrites the bindings file; it is put back as it was after.
"""

from __future__ import annotations

import getpass
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from events import Topics
from services.bench.throughput import slurm
from services.bench.throughput.plugin import (
    ACCOUNT,
    BINDINGS,
    BUDGET,
    PLUGIN_PARTITION,
    kept_bindings,
    start_figures,
    submit_sequential,
    wait_all_started,
)

Report = Callable[[str], None]

#: The Fairshare cluster the agent runs as (``.ci/start-slurm``'s first bindings file's).
CLUSTER = "hpc"


def native_starts(
    count: int, job_s: float, stall_s: float, bootstrap: str | None, data_dir: Path, report: Report
) -> dict[str, Any]:
    """``count`` jobs, one ``sbatch`` at a time, through the plugin to Fairshare, until every one
    started (or none more did for ``stall_s``); the stack stopped and every job cancelled
    after."""
    run = slurm.SlurmRun(f"fsbench-start-native-{uuid.uuid4().hex[:8]}")
    with kept_bindings():
        try:
            with native_stack(data_dir=data_dir, bootstrap=bootstrap, report=report) as stack:
                report(f"plugin starts: {count} sbatch to {PLUGIN_PARTITION}, through Fairshare")
                args = slurm.job_args(run.name, job_s, PLUGIN_PARTITION, (f"--account={ACCOUNT}",))
                try:
                    submit_sequential(run, count, args)
                    started = wait_all_started(
                        run, stall_s, report, f"fairshare {run.name}",
                        tick=lambda: stack.supervise(report),
                    )  # fmt: skip
                finally:
                    slurm.cancel(run)
                restarts = {c.name: c.restarts for c in stack.children if c.restarts}
        except RuntimeError as error:  # the stack did not come up
            slurm.cancel(run)
            report(f"plugin starts through Fairshare not measured: {error}")
            return {"error": str(error)[:500]}
    return start_figures(run, started) | {
        "partition": PLUGIN_PARTITION,
        "cluster": CLUSTER,
        "restarts_by_service": restarts,
    }


@contextmanager
def native_stack(*, data_dir: Path, bootstrap: str | None, report: Report) -> Iterator[Any]:
    """The running ``services.launcher.Stack`` (see the module's docstring), once the agent has
    registered Slurm's nodes and written the account into the bindings file."""
    from services.bench.bench_stack import wait_for_nodes
    from services.brokers import external_broker, free_port, start_embedded_broker
    from services.launcher import Stack, UpConfig
    from services.launcher.identities import stack_identities

    if bootstrap is None:
        report(f"starting Apache Kafka in {data_dir / 'broker'}")
        broker, _ = start_embedded_broker(data_dir / "broker", "apache-kafka")
        topics = Topics(prefix="native.")
    else:
        broker = external_broker(bootstrap)
        topics = Topics(prefix=f"native-{uuid.uuid4().hex[:8]}.")
    stack_dir = data_dir / "stack"
    up = UpConfig(
        bootstrap=broker.bootstrap,
        topics=topics,
        data_dir=stack_dir,
        database_url=f"sqlite:///{stack_dir.resolve()}/fairshare.db",
        api_port=free_port(),
        nodes=1,
        gpus_per_node=1,
        submit_every_s=0,
        slurm_cluster=CLUSTER,
        slurm_partition=PLUGIN_PARTITION,
    )
    try:
        with stack_identities(broker, up, report) as secured:
            stack = Stack(secured)
            try:
                stack.start()
                _bind(stack)
                stack.wait_for_api(timeout_s=240, report=report)
                wait_for_nodes(stack, 1 + len(_slurm_nodes()), report)
                _wait_for_binding(stack, report)
                yield stack
            finally:
                unclean = stack.stop()
                if unclean:
                    report(f"not stopped cleanly: {', '.join(unclean)}")
    finally:
        broker.stop()


def _bind(stack: Any) -> None:
    """The account bound to :data:`BUDGET` on :data:`CLUSTER`, and this user a member of it,
    signed by the stack's admin (whose facts the lab's are)."""
    from events import new_event
    from events.models import GroupBound, MembershipGranted
    from events.models.budgets import SLURM_ACCOUNT
    from services.bus.kafka import KafkaEventPublisher
    from services.bus.signing import signed
    from services.launcher.keys import admin_signatory, key_of

    config = stack.config
    admin = key_of(admin_signatory(config))
    facts = [
        MembershipGranted(budget=BUDGET, user=getpass.getuser(), role="member",
                          granted_by="admin"),
        GroupBound(budget=BUDGET, cluster=CLUSTER, kind=SLURM_ACCOUNT, group=ACCOUNT,
                   default=True, bound_by="admin"),
    ]  # fmt: skip
    publisher = signed(
        KafkaEventPublisher(config.bootstrap, config.topics, client_id="fairshare-bench"), admin
    )
    try:
        now = datetime.now(UTC)
        for data in facts:
            publisher.publish(new_event(data, source="fairshare/bench", time=now))
        publisher.flush()
    finally:
        publisher.close()


def _slurm_nodes() -> set[str]:
    listed = subprocess.run(
        ["sinfo", "-h", "-N", "-p", PLUGIN_PARTITION, "-o", "%N"],
        capture_output=True,
        text=True,
        timeout=30,
    ).stdout
    return set(listed.split())


def _wait_for_binding(stack: Any, report: Report, timeout_s: float = 120.0) -> None:
    """Until the agent wrote the account into the bindings file: an sbatch before that would be
    refused by the plugin."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        stack.supervise(report)
        try:
            text = BINDINGS.read_text()
        except OSError:
            text = ""
        if any(
            line.split() and line.split()[0] == f"account={ACCOUNT}" for line in text.splitlines()
        ):
            return
        time.sleep(0.5)
    raise RuntimeError(
        f"the Slurm agent did not bind {ACCOUNT} in {BINDINGS} within {timeout_s:.0f} s"
    )
