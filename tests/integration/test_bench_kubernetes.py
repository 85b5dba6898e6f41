"""``fairshare bench kubernetes``, small, over the real control plane (``bash
.ci/start-kubernetes``) and the session's Kafka: the run completes, its figures are sane (every
pod seen created and bound, each Job's gang on one node, rates and latencies that can be
true), and it leaves nothing behind in the cluster. Not a speed test: the speed is what the
benchmark itself reports."""

from __future__ import annotations

from pathlib import Path

import pytest
from kubernetes.client import CoreV1Api
from kubernetes.client.exceptions import ApiException

from services.bench.kubernetes.bench import KubernetesBenchConfig, kubernetes_benchmark
from services.brokers import BrokerHandle
from tests.integration.kubernetes_fixtures import require_kubernetes

pytestmark = [pytest.mark.broker, pytest.mark.kubernetes]


@pytest.mark.timeout(300)
def test_a_small_run_binds_every_pod_and_leaves_nothing_behind(
    broker: BrokerHandle, tmp_path: Path
) -> None:
    cluster = require_kubernetes()
    config = KubernetesBenchConfig(
        kubeconfig=cluster.kubeconfig, jobs=5, pods_per_job=4, nodes=5, gpus_per_node=4,
        timeout_s=120,
    )  # fmt: skip
    lines: list[str] = []
    seen: list[tuple[int, int, int]] = []
    result = kubernetes_benchmark(
        config,
        broker.bootstrap,
        tmp_path,
        report=lines.append,
        progress=lambda created, bound, expected: seen.append((created, bound, expected)),
    )

    assert result["complete"], (result, lines)
    assert result["pods"] == {
        "expected": 20,
        "created": 20,
        "bound": 20,
        "nodes_used": 5,
        "jobs_on_several_nodes": 0,
    }
    assert result["jobs"]["created"] == 5
    assert result["job_errors"]["count"] == 0
    created, bound = result["created"], result["bound"]
    assert created["count"] == bound["count"] == 20
    assert created["per_s"] > 0
    assert bound["per_s"] > 0
    assert result["ratio_bound_to_created"] > 0
    assert result["target"]["met"] == (result["ratio_bound_to_created"] >= 0.9)
    for key in ("submit_to_bound_ms", "submit_to_created_ms", "created_to_bound_ms"):
        figure = result[key]
        assert figure["count"] == 20, key
        assert 0 <= figure["p50"] <= figure["p99"] <= figure["max"], (key, figure)
    # a pod is bound after it exists, and after its Job was created
    assert result["submit_to_bound_ms"]["p50"] >= result["submit_to_created_ms"]["p50"]
    # (the whole run is rounded to the millisecond, the latencies to a tenth of one: the last
    # pod's own latency may read up to half a millisecond above it, as 391.1 ms in 0.391 s did)
    assert result["end_to_end_s"] * 1000 >= result["submit_to_bound_ms"]["max"] - 0.5
    assert result["stack"]["unclean_stops"] == []
    assert seen, "progress was shown"
    assert seen[-1] == (20, 20, 20)

    # nothing of the run is left: namespace, nodes (the broker's topics are the session's)
    core = CoreV1Api(cluster.api)
    with pytest.raises(ApiException) as gone:
        core.read_namespace(result["kubernetes"]["namespace"])
    assert gone.value.status == 404
    selector = result["kubernetes"]["node_selector"]
    assert core.list_node(label_selector=selector).items == []
