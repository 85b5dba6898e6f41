"""Three kinds of cluster under one budget tree: ``fairshare up --slurm-cluster hpc
--kubernetes-cluster k8s`` runs the simulated cluster, the real Slurm of ``.ci/start-slurm``
and the real Kubernetes API server with KWOK of ``.ci/start-kubernetes`` side by side, as three
pools. The demo stream's workloads accept any pool: with a simulated cluster of one GPU, most
land in Slurm and Kubernetes; every pool shows in the budgets and is charged, and
``fairshare audit replay`` re-derives every charge from the log: identical."""

from __future__ import annotations

import os
import subprocess
import time
import uuid
from pathlib import Path

import httpx
import pytest

from services.brokers import BrokerHandle
from tests.integration.kubernetes_fixtures import (
    create_fake_gpu_nodes,
    delete_nodes,
    require_kubernetes,
    scratch_namespace,
)
from tests.integration.slurm_fixtures import require_slurm
from tests.processes import FAIRSHARE, audit_once_charging_caught_up, free_port, stop

pytestmark = [pytest.mark.slurm, pytest.mark.kubernetes, pytest.mark.broker]

ADMIN = {"Authorization": "Bearer admin-token"}
JOBCOMP = Path("/var/log/fairshare-slurm/jobcomp.log")
POOLS = ("demo", "hpc", "k8s")


def _pools_of_work(port: int) -> dict[str, int]:
    items = httpx.get(f"http://127.0.0.1:{port}/workloads", headers=ADMIN, timeout=5).json()
    pools: dict[str, int] = {}
    for item in items["workloads"]:
        if item["pool"] is not None:
            pools[item["pool"]] = pools.get(item["pool"], 0) + 1
    return pools


@pytest.mark.timeout(1200)
def test_up_charges_a_simulated_a_slurm_and_a_kubernetes_pool_and_audits_identical(
    tmp_path: Path, broker: BrokerHandle
) -> None:
    require_slurm()
    cluster = require_kubernetes()
    core = cluster.core()
    selector = f"e2e-{uuid.uuid4().hex[:6]}"
    nodes = create_fake_gpu_nodes(core, 2, gpus=8, pool=selector)
    port = free_port()
    prefix = f"t{uuid.uuid4().hex[:8]}."
    env = {**os.environ, "COLUMNS": "400"}
    env.pop("FAIRSHARE_KAFKA_BOOTSTRAP", None)
    out = tmp_path / "up.out"
    try:
        with scratch_namespace(core) as namespace:
            args = ["up", "--kafka", broker.bootstrap, "--topic-prefix", prefix]
            args += ["--data-dir", str(tmp_path / "data"), "--api-port", str(port)]
            args += ["--nodes", "1", "--gpus-per-node", "1", "--submit-every", "0.5"]
            args += ["--schedulers", "1", "--slurm-cluster", "hpc"]
            args += ["--slurm-jobcomp-log", str(JOBCOMP)]
            args += ["--kubernetes-cluster", "k8s", "--kubeconfig", str(cluster.kubeconfig)]
            args += ["--kubernetes-namespace", namespace]
            args += ["--kubernetes-node-selector", f"fairshare.dev/pool={selector}"]
            with out.open("wb") as handle:
                up = subprocess.Popen(
                    [*FAIRSHARE, *args], stdout=handle, stderr=subprocess.STDOUT, env=env
                )
            try:
                pools: dict[str, int] = {}
                deadline = time.monotonic() + 240
                while time.monotonic() < deadline and up.poll() is None:
                    time.sleep(2)
                    try:
                        pools = _pools_of_work(port)
                    except (httpx.HTTPError, ValueError, KeyError):
                        continue
                    if all(pools.get(p, 0) >= 1 for p in POOLS) and pools.get("k8s", 0) >= 2:
                        break
                text = out.read_text(errors="replace")
                assert up.poll() is None, text[-3000:]
                assert all(pools.get(p, 0) >= 1 for p in POOLS), (pools, text[-3000:])
                pods = core.list_namespaced_pod(namespace).items
                assert {p.spec.node_name for p in pods} <= set(nodes), "bound to its nodes"
                assert pods, "the Kubernetes pool's work runs as pods"
                shown = {
                    pool
                    for budget in httpx.get(
                        f"http://127.0.0.1:{port}/budgets", headers=ADMIN, timeout=5
                    ).json()["budgets"]
                    for pool in budget["pools"]
                }
                assert set(POOLS) <= shown, shown
                # every pool is charged: a run is charged when its hour closes or it ends, and
                # the demo's runs last 30-300 s (KWOK ends a pod as its annotation says), so a
                # run that has started is charged within 300 s and some slack for a busy machine
                wait = time.monotonic() + 360
                charged: set[str] = set()
                while time.monotonic() < wait and not set(POOLS) <= charged:
                    time.sleep(3)
                    charged = _ledger_pools(broker.bootstrap, prefix)
                assert set(POOLS) <= charged, charged
            finally:
                stop(up, 60)
    finally:
        delete_nodes(core, nodes)
    audit = audit_once_charging_caught_up(broker.bootstrap, prefix, tmp_path)
    assert audit.returncode == 0, audit.stdout[-3000:] + audit.stderr[-3000:]
    assert "identical" in audit.stdout.lower(), audit.stdout[-3000:]


def _ledger_pools(bootstrap: str, prefix: str) -> set[str]:
    """The pools of the charges on the ledger so far."""
    from events import TopicKind, Topics
    from events.models import LedgerCharge
    from services.bus.export import read_to_end
    from services.bus.records import check

    topics = Topics(prefix=prefix)
    pools = set()
    for record in read_to_end(bootstrap, [topics.name(TopicKind.LEDGER)]):
        envelope = getattr(check(record, topics), "envelope", None)
        if envelope is not None and isinstance(envelope.data, LedgerCharge):
            pools.add(envelope.data.pool)
    return pools
