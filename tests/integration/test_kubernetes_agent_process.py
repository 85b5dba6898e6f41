"""The Kubernetes agent as operators run it: the ``fairshare agent kubernetes`` process, with
the service account and exactly the roles of ``deploy/kubernetes/agent.yaml``. It runs work
with them; killed with -9 mid-run and started again, it adopts its pods (none created twice)
and the run finishes; without the roles, or without an API server, it refuses to start with a
message that says why and a non-zero exit."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes.client import CoreV1Api, RbacAuthorizationV1Api

from tests.integration.cluster_stack import ADMIN, ANA, wait_until
from tests.integration.kafka_bus import KafkaBus
from tests.integration.kubernetes_fixtures import (
    EXIT_CODE,
    FINISH_AFTER,
    POOL_LABEL,
    KubernetesCluster,
    NodeFactory,
    fake_gpu_nodes,
    kube_core,
    kube_namespace,
    kubernetes_cluster,
    service_account_kubeconfig,
)
from tests.integration.kubernetes_stack import KubernetesStack, kubernetes_stack
from tests.processes import FAIRSHARE, run_fairshare

pytestmark = [pytest.mark.broker, pytest.mark.kubernetes]

# the fixtures this module uses, imported from kubernetes_fixtures (pytest finds them here)
__all__ = ["fake_gpu_nodes", "kube_core", "kube_namespace", "kubernetes_cluster"]


def _agent_args(stack: KubernetesStack, kubeconfig: Path) -> list[str]:
    return [
        "agent", "kubernetes",
        "--kafka", stack.bus.broker.bootstrap,
        "--topic-prefix", stack.bus.topics.prefix,
        "--cluster", stack.cluster,
        "--pool", stack.pool,
        "--kubeconfig", str(kubeconfig),
        "--namespace", stack.namespace,
        "--node-selector", f"{POOL_LABEL}={stack.selector_value}",
        "--heartbeat-s", "1",
        "--checkpoint-every-s", "2",
    ]  # fmt: skip


class _Agent:
    """One agent process, its output in a file."""

    def __init__(self, args: list[str], log: Path) -> None:
        self.log = log
        self._out = log.open("a")
        self.process = subprocess.Popen(
            [*FAIRSHARE, *args], stdout=self._out, stderr=subprocess.STDOUT, env=_env()
        )

    def text(self) -> str:
        return self.log.read_text()

    def kill(self) -> None:
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(timeout=30)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
        self._out.close()


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env.pop("FAIRSHARE_KUBECONFIG", None)  # the agent's account is the one given
    return env


@pytest.fixture
def stack(
    bus: KafkaBus,
    kubernetes_cluster: KubernetesCluster,
    kube_namespace: str,
    fake_gpu_nodes: NodeFactory,
) -> Iterator[KubernetesStack]:
    with kubernetes_stack(bus, kubernetes_cluster, kube_namespace, fake_gpu_nodes) as running:
        running.seed_lab()
        yield running


@pytest.fixture
def agent_kubeconfig(kube_core: CoreV1Api, kube_namespace: str, tmp_path: Path) -> Iterator[Path]:
    rbac = RbacAuthorizationV1Api(kube_core.api_client)
    with service_account_kubeconfig(
        kube_core, rbac, kube_namespace, with_role=True, directory=tmp_path
    ) as path:
        yield path


def test_killed_with_minus_9_mid_run_it_adopts_its_pod_and_the_run_finishes(
    stack: KubernetesStack, agent_kubeconfig: Path, tmp_path: Path
) -> None:
    [node] = stack.nodes(1)
    stack.start_scheduler()
    stack.start_api()
    agent = _Agent(_agent_args(stack, agent_kubeconfig), tmp_path / "agent-1.log")
    try:
        wait_until(
            lambda: stack.api().get("/nodes", headers=ADMIN).json()["nodes"], "registered", 90
        )
        response = stack.api().post(
            "/workloads",
            json={"workload_id": "w", "budget": "lab/a", "pools": [stack.pool], "gpus": 8,
                  "min_runtime_s": 60,
                  "spec": {"annotations": {FINISH_AFTER: "25s", EXIT_CODE: "0"}}},
            headers=ANA,
        )  # fmt: skip
        assert response.status_code in (200, 201, 202), response.text
        wait_until(lambda: stack.workload("w").get("status") == "running", "w runs", 90)
        [pod] = stack.pods_of("w")
        uid = pod.metadata.uid
        assert pod.spec.node_name == node
        time.sleep(3)  # a checkpoint of the agent's fold (every 2 s)
        agent.kill()
        assert [p.metadata.uid for p in stack.pods_of("w")] == [uid], "left running"
        again = _Agent(_agent_args(stack, agent_kubeconfig), tmp_path / "agent-2.log")
        try:
            wait_until(lambda: stack.workload("w").get("status") == "succeeded", "w ends", 90)
            workload: dict[str, Any] = stack.workload("w")
            assert workload["attempt"] == 1, "adopted: never lost, never run again"
            assert workload["exit_code"] == 0
            assert [p.metadata.uid for p in stack.pods_of("w")] in ([uid], []), "never twice"
            assert "could not be created" not in workload.get("end_message", "")
        finally:
            again.stop()
    finally:
        agent.stop()


def test_without_the_roles_it_refuses_to_start_naming_what_it_may_not_do(
    stack: KubernetesStack, kube_core: CoreV1Api, kube_namespace: str, tmp_path: Path
) -> None:
    stack.nodes(1)
    rbac = RbacAuthorizationV1Api(kube_core.api_client)
    with service_account_kubeconfig(
        kube_core, rbac, kube_namespace, with_role=False, directory=tmp_path
    ) as kubeconfig:
        done = run_fairshare(*_agent_args(stack, kubeconfig), timeout=120, env=_env())
    assert done.returncode == 2, done.stdout + done.stderr
    said = done.stdout + done.stderr
    assert "may not" in said, said
    assert "list nodes" in said, said
    assert "create pods in namespace" in said, said


def test_without_an_api_server_it_exits_non_zero_at_once(
    stack: KubernetesStack, tmp_path: Path
) -> None:
    kubeconfig = tmp_path / "nowhere.kubeconfig"
    kubeconfig.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: x\n"
        "clusters: [{name: x, cluster: {server: 'https://127.0.0.1:1', "
        "insecure-skip-tls-verify: true}}]\n"
        "users: [{name: x, user: {token: t}}]\n"
        "contexts: [{name: x, context: {cluster: x, user: x}}]\n"
    )
    started = time.monotonic()
    done = run_fairshare(*_agent_args(stack, kubeconfig), timeout=120, env=_env())
    assert done.returncode == 2, done.stdout + done.stderr
    assert "cannot reach the API server" in done.stdout + done.stderr
    assert time.monotonic() - started < 60, "never lingers"


class _Proxy:
    """A TCP relay to the API server that can be cut: the agent's only way to it."""

    def __init__(self, target: tuple[str, int]) -> None:
        import socket
        import threading

        self.target = target
        self._server = socket.create_server(("127.0.0.1", 0))
        self.port = self._server.getsockname()[1]
        self._open: list[socket.socket] = []
        self._cut = threading.Event()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        import socket
        import threading

        while not self._cut.is_set():
            try:
                client, _ = self._server.accept()
            except OSError:
                return
            upstream = socket.create_connection(self.target)
            self._open += [client, upstream]
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    @staticmethod
    def _pump(source: Any, sink: Any) -> None:
        try:
            while chunk := source.recv(65536):
                sink.sendall(chunk)
        except OSError:
            pass

    def cut(self) -> None:
        """Refuse new connections and drop the open ones (the API server is gone)."""
        import contextlib

        self._cut.set()
        self._server.close()
        for sock in self._open:
            with contextlib.suppress(OSError):
                sock.close()


def test_an_api_server_lost_while_running_makes_it_exit_non_zero(
    stack: KubernetesStack, agent_kubeconfig: Path, tmp_path: Path
) -> None:
    import yaml

    stack.nodes(1)
    config = yaml.safe_load(agent_kubeconfig.read_text())
    server = config["clusters"][0]["cluster"]["server"]
    host, port = server.removeprefix("https://").rsplit(":", 1)
    proxy = _Proxy((host, int(port)))
    config["clusters"][0]["cluster"]["server"] = f"https://{host}:{proxy.port}"
    through_proxy = tmp_path / "proxy.kubeconfig"
    through_proxy.write_text(yaml.safe_dump(config))
    agent = _Agent(
        [*_agent_args(stack, through_proxy), "--api-timeout-s", "5"], tmp_path / "agent.log"
    )
    try:
        wait_until(lambda: "agent of cluster" in agent.text(), "the agent to start", 90)
        time.sleep(3)
        assert agent.process.poll() is None, agent.text()
        proxy.cut()
        cut_at = time.monotonic()
        wait_until(lambda: agent.process.poll() is not None, "the agent to exit", 60)
        assert agent.process.returncode != 0, agent.text()
        assert time.monotonic() - cut_at < 45, "it does not linger"
        assert "API server" in agent.text(), agent.text()
    finally:
        agent.stop()
