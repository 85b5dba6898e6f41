"""Native Kubernetes work end to end, as its users meet it: ``fairshare up --kubernetes-cluster``
runs every service as its own process over Apache Kafka and the real Kubernetes control plane
of ``.ci/start-kubernetes`` (API server, the controller manager's Job controller and garbage
collector, KWOK's nodes). A budget's manager binds a namespace with ``fairshare budgets
bind-namespace``; a user applies an unchanged indexed Job with ``kubectl apply`` (only
``schedulerName: fairshare`` and a budget label name Fairshare). It is queued with the work sent
through ``fairshare submit``, placed as one gang (its pods bound to one node), runs, completes
and is charged to the namespace's budget; a Job naming a budget its namespace is not bound to
gets a Warning Event and is never bound; ``kubectl describe`` shows Fairshare's Events. Then
both audits of the whole run are clean: ``fairshare audit decisions`` re-derives every pass,
``fairshare audit replay`` every charge."""

from __future__ import annotations

import os
import subprocess
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from services.brokers import BrokerHandle
from tests.integration.kubernetes_fixtures import (
    FINISH_AFTER,
    create_fake_gpu_nodes,
    delete_nodes,
    kubectl_binary,
    require_kubernetes,
    scratch_namespace,
)
from tests.processes import (
    FAIRSHARE,
    audit_once_charging_caught_up,
    free_port,
    run_fairshare,
    stop,
    wait_while_up,
)

pytestmark = [pytest.mark.kubernetes, pytest.mark.broker]

ADMIN = {"Authorization": "Bearer admin-token"}
CLUSTER = "k8s"


def _job(namespace: str, name: str, budget: str, *, pods: int, gpus: int) -> dict[str, Any]:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {"fairshare.dev/budget": budget, "fairshare.dev/min-runtime": "5m"},
        },
        "spec": {
            "parallelism": pods,
            "completions": pods,
            "completionMode": "Indexed",
            "backoffLimit": 1,
            "template": {
                "metadata": {"annotations": {FINISH_AFTER: "20s"}},
                "spec": {
                    "schedulerName": "fairshare",
                    "restartPolicy": "Never",
                    "containers": [
                        {
                            "name": "train",
                            "image": "busybox:1.36",
                            "command": ["sh", "-c", "sleep 3600"],
                            "resources": {"limits": {"nvidia.com/gpu": str(gpus)}},
                        }
                    ],
                },
            },
        },
    }


def _kubectl(kubeconfig: Path, *args: str, stdin: str | None = None) -> str:
    env = {k: v for k, v in os.environ.items() if k != "KUBECONFIG"}
    done = subprocess.run(
        [kubectl_binary(), "--kubeconfig", str(kubeconfig), *args],
        input=stdin, capture_output=True, text=True, timeout=60, env=env, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def _native(port: int, name: str) -> dict[str, Any] | None:
    items = httpx.get(f"http://127.0.0.1:{port}/workloads", headers=ADMIN, timeout=5).json()
    found = [w for w in items["workloads"] if w.get("name") == name]
    return found[0] if found else None


@pytest.mark.timeout(900)
def test_an_applied_job_is_queued_placed_as_a_gang_charged_and_audited_clean(
    tmp_path: Path, broker: BrokerHandle
) -> None:
    cluster = require_kubernetes()
    core = cluster.core()
    selector = f"e2e-{uuid.uuid4().hex[:6]}"
    nodes = create_fake_gpu_nodes(core, 2, gpus=8, pool=selector)
    port = free_port()
    api = f"http://127.0.0.1:{port}"
    prefix = f"t{uuid.uuid4().hex[:8]}."
    env = {**os.environ, "COLUMNS": "400"}
    env.pop("FAIRSHARE_KAFKA_BOOTSTRAP", None)
    out = tmp_path / "up.out"
    try:
        with scratch_namespace(core) as runs, scratch_namespace(core, "fs-team") as team:
            args = ["up", "--kafka", broker.bootstrap, "--topic-prefix", prefix]
            args += ["--data-dir", str(tmp_path / "data"), "--api-port", str(port)]
            args += ["--nodes", "1", "--gpus-per-node", "1", "--submit-every", "2"]
            args += ["--schedulers", "1"]
            args += ["--kubernetes-cluster", CLUSTER, "--kubeconfig", str(cluster.kubeconfig)]
            args += ["--kubernetes-namespace", runs]
            args += ["--kubernetes-node-selector", f"fairshare.dev/pool={selector}"]
            with out.open("wb") as handle:
                up = subprocess.Popen(
                    [*FAIRSHARE, *args], stdout=handle, stderr=subprocess.STDOUT, env=env
                )
            try:
                wait_while_up(
                    lambda: httpx.get(f"{api}/nodes", headers=ADMIN, timeout=5).json()["nodes"],
                    "the API and the nodes", 180, up, out,
                )  # fmt: skip
                bound = run_fairshare(
                    "budgets", "bind-namespace", "lab/vision", "--cluster", CLUSTER,
                    "--namespace", team, "--api", api, "--token", "admin-token", timeout=60,
                )  # fmt: skip
                assert bound.returncode == 0, bound.stdout + bound.stderr
                jobs = [
                    _job(team, "train", "lab.vision", pods=4, gpus=2),
                    _job(team, "sneaky", "lab.nlp", pods=1, gpus=1),
                ]
                _kubectl(
                    cluster.kubeconfig, "apply", "-f", "-",
                    stdin=yaml.safe_dump_all(jobs),
                )  # fmt: skip
                train = wait_while_up(
                    lambda: (w := _native(port, f"{team}/train")) and w["status"] == "running"
                    and w,
                    "the Job running", 180, up, out,
                )  # fmt: skip
                assert train["budget"] == "lab/vision"
                assert train["gpus"] == 8
                pods = core.list_namespaced_pod(team, label_selector="job-name=train").items
                assert len(pods) == 4
                assert len({p.spec.node_name for p in pods}) == 1, "one gang, on one node"
                assert {p.spec.node_name for p in pods} <= set(nodes)
                done = wait_while_up(
                    lambda: (w := _native(port, f"{team}/train"))
                    and w["status"] == "succeeded" and w,
                    "the Job complete", 180, up, out,
                )  # fmt: skip
                assert done["attempt"] == 1
                workload_id = done["workload_id"]
                charged = wait_while_up(
                    lambda: httpx.get(
                        f"{api}/workloads/{workload_id}", headers=ADMIN, timeout=5
                    ).json()["charged_gpu_s"],
                    "the Job charged", 120, up, out,
                )  # fmt: skip
                assert charged >= 8 * 15, "8 GPUs for about 20 s, to its budget"
                described = _kubectl(cluster.kubeconfig, "-n", team, "describe", "job", "train")
                for reason in ("Queued", "Placed", "Finished"):
                    assert reason in described, described
                refused = _kubectl(cluster.kubeconfig, "-n", team, "describe", "job", "sneaky")
                assert "Refused" in refused, refused
                assert "not bound" in refused, refused
                assert _native(port, f"{team}/sneaky") is None
                sneaky = core.list_namespaced_pod(team, label_selector="job-name=sneaky").items
                assert all(p.spec.node_name is None for p in sneaky), "never bound"
            finally:
                stop(up, 60)
    finally:
        delete_nodes(core, nodes)
    decisions = run_fairshare(
        "audit", "decisions", "--kafka", broker.bootstrap, "--topic-prefix", prefix, timeout=300
    )
    assert decisions.returncode == 0, decisions.stdout[-3000:] + decisions.stderr[-3000:]
    charges = audit_once_charging_caught_up(broker.bootstrap, prefix, tmp_path)
    assert charges.returncode == 0, charges.stdout[-3000:] + charges.stderr[-3000:]
    assert "identical" in charges.stdout.lower(), charges.stdout[-3000:]
