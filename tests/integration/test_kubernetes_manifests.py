"""The Kubernetes agent's deployment, ``deploy/kubernetes/``: its RBAC grants exactly what the
agent's contract says it uses (read here, without a cluster); the API server accepts every
object (``kubectl apply --dry-run=server``); and a service account bound to those roles, with
a token from the TokenRequest API, can do what the agent does and nothing around it, while one
without them cannot even list nodes (the last two against ``bash .ci/start-kubernetes``)."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client, watch
from kubernetes.client import CoreV1Api, RbacAuthorizationV1Api
from kubernetes.client.exceptions import ApiException

from services.agents.kubernetes.adapter import needed_permissions
from tests.integration.kubernetes_fixtures import (
    AGENT_CLUSTER_ROLE,
    AGENT_RUNS_ROLE,
    KubernetesCluster,
    NodeFactory,
    agent_manifest,
    agent_manifests,
    api_client,
    fake_gpu_nodes,
    kube_core,
    kube_namespace,
    kubernetes_cluster,
    pinned_gpu_pod,
    scratch_namespace,
    server_dry_run,
    service_account_kubeconfig,
    unique_name,
    wait_until,
)

# the fixtures this module uses, imported from kubernetes_fixtures (pytest finds them here)
__all__ = ["fake_gpu_nodes", "kube_core", "kube_namespace", "kubernetes_cluster"]

AGENT = "fairshare-agent"
AGENT_NAMESPACE = "fairshare"
RUN_NAMESPACE = "fairshare-runs"
MANAGED_BY = {"app.kubernetes.io/managed-by": "fairshare"}

# What the agent's contract says it does with the API (docs/agents.md, "Permissions"): read
# nodes and pods cluster-wide, patch nodes (--cordon-in-kubernetes), and create and delete
# pods in its run namespace. Nothing else; no pods/binding (pods are bound by spec.nodeName).
CLUSTER_ROLE_GRANTS = {
    ("", "nodes"): {"get", "list", "watch", "patch"},
    # native work: its pods deleted (preemption) and annotated (a lone pod's why-pending)
    ("", "pods"): {"get", "list", "watch", "delete", "patch"},
    ("", "pods/binding"): {"create"},
    ("batch", "jobs"): {"get", "list", "watch", "patch"},
    ("", "events"): {"create"},
}
RUNS_ROLE_GRANTS = {("", "pods"): {"create", "delete", "get", "list", "watch"}}


def _grants(role: dict[str, Any]) -> dict[tuple[str, str], set[str]]:
    """(API group, resource) -> verbs, refusing what would widen a rule past its list."""
    grants: dict[tuple[str, str], set[str]] = {}
    for rule in role.get("rules", []):
        assert set(rule) <= {"apiGroups", "resources", "verbs"}, rule  # no URLs, no names
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                assert "*" not in (group, resource), rule
                assert "*" not in rule["verbs"], rule
                grants.setdefault((group, resource), set()).update(rule["verbs"])
    return grants


def _option(command: list[str], name: str) -> str:
    """The value after ``name`` in an argv list."""
    assert command.count(name) == 1, (name, command)
    return command[command.index(name) + 1]


# -- the files themselves (no cluster needed) -----------------------------------------------------


def test_the_roles_grant_exactly_what_the_agent_uses() -> None:
    cluster_role = agent_manifest("ClusterRole", AGENT_CLUSTER_ROLE)
    assert _grants(cluster_role) == CLUSTER_ROLE_GRANTS
    runs_role = agent_manifest("Role", AGENT_RUNS_ROLE)
    assert runs_role["metadata"]["namespace"] == RUN_NAMESPACE
    assert _grants(runs_role) == RUNS_ROLE_GRANTS
    # what the agent asks for at start with every option on, cluster-wide and in its namespace
    for permission in needed_permissions(RUN_NAMESPACE, cordon=True, evict=True, native=True):
        resource = permission.resource + (
            f"/{permission.subresource}" if permission.subresource else ""
        )
        grants = CLUSTER_ROLE_GRANTS if permission.namespace is None else RUNS_ROLE_GRANTS
        assert permission.verb in grants.get((permission.group, resource), set()), permission
    # no other role, and nothing else bound to the agent
    kinds = [obj["kind"] for obj in agent_manifests()]
    assert kinds.count("ClusterRole") == kinds.count("Role") == 1
    assert kinds.count("ClusterRoleBinding") == kinds.count("RoleBinding") == 1


def test_the_bindings_and_the_deployment_fit_together() -> None:
    objects = {(obj["kind"], obj["metadata"]["name"]): obj for obj in agent_manifests()}
    assert len(objects) == len(agent_manifests()), "an object is defined twice"
    assert ("Namespace", AGENT_NAMESPACE) in objects
    assert ("Namespace", RUN_NAMESPACE) in objects
    account = objects[("ServiceAccount", AGENT)]
    assert account["metadata"]["namespace"] == AGENT_NAMESPACE
    subject = {"kind": "ServiceAccount", "name": AGENT, "namespace": AGENT_NAMESPACE}

    binding = objects[("ClusterRoleBinding", AGENT)]
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "ClusterRole",
        "name": AGENT_CLUSTER_ROLE,
    }
    assert binding["subjects"] == [subject]
    runs_binding = objects[("RoleBinding", AGENT_RUNS_ROLE)]
    assert runs_binding["metadata"]["namespace"] == RUN_NAMESPACE
    assert runs_binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "Role",
        "name": AGENT_RUNS_ROLE,
    }
    assert runs_binding["subjects"] == [subject]

    deployment = objects[("Deployment", AGENT)]
    assert deployment["metadata"]["namespace"] == AGENT_NAMESPACE
    spec = deployment["spec"]
    assert spec["replicas"] == 1  # two agents would both act on the same nodes
    assert spec["strategy"] == {"type": "Recreate"}
    pod = spec["template"]["spec"]
    assert pod["serviceAccountName"] == AGENT
    assert spec["selector"]["matchLabels"].items() <= spec["template"]["metadata"]["labels"].items()
    [container] = pod["containers"]
    command = container["command"]
    assert command[:3] == ["fairshare", "agent", "kubernetes"]
    assert _option(command, "--namespace") == RUN_NAMESPACE  # where the Role lets it write
    assert "--kubeconfig" not in command  # in-cluster config, the service account's token
    assert _option(command, "--cluster")
    assert _option(command, "--pool")
    env = {item["name"]: item for item in container["env"]}
    source = env["FAIRSHARE_KAFKA_BOOTSTRAP"]["valueFrom"]["configMapKeyRef"]
    config_map = objects[("ConfigMap", source["name"])]
    assert config_map["metadata"]["namespace"] == AGENT_NAMESPACE
    assert ":" in config_map["data"][source["key"]]  # HOST:PORT
    assert container["resources"]["requests"]
    assert container["resources"]["limits"]


# -- against the API server -----------------------------------------------------------------------


def _renamed(objects: list[dict[str, Any]], names: dict[str, str]) -> list[dict[str, Any]]:
    """The objects with their namespaces renamed (``names``: old -> new), wherever they name
    one: a Namespace's name, metadata.namespace, RBAC subjects, the agent's --namespace."""
    renamed: list[dict[str, Any]] = []
    for obj in objects:
        obj = yaml.safe_load(yaml.safe_dump(obj))  # a deep copy
        meta = obj["metadata"]
        if obj["kind"] == "Namespace":
            meta["name"] = names[meta["name"]]
        if "namespace" in meta:
            meta["namespace"] = names[meta["namespace"]]
        for subject in obj.get("subjects", []):
            subject["namespace"] = names[subject["namespace"]]
        if obj["kind"] == "Deployment":
            for container in obj["spec"]["template"]["spec"]["containers"]:
                command = container["command"]
                if "--namespace" in command:
                    at = command.index("--namespace") + 1
                    command[at] = names[command[at]]
        renamed.append(obj)
    return renamed


@pytest.mark.kubernetes
def test_the_api_server_accepts_the_manifests(
    kubernetes_cluster: KubernetesCluster, kube_core: CoreV1Api, tmp_path: Path
) -> None:
    """``kubectl apply --dry-run=server -f deploy/kubernetes/``, with strict field validation.

    A server dry run creates nothing, so the namespaced objects of a file that also creates
    their namespaces are refused (``namespaces "fairshare" not found``) unless the namespaces
    exist. The cluster is shared by every test and run, so rather than creating ``fairshare`` and
    ``fairshare-runs`` themselves, this applies a copy of the files whose two namespaces are
    renamed to scratch ones that exist for the test; nothing else is changed."""
    objects = agent_manifests()
    with (
        scratch_namespace(kube_core, "fs-agent") as agent_namespace,
        scratch_namespace(kube_core, "fs-runs") as run_namespace,
    ):
        names = {AGENT_NAMESPACE: agent_namespace, RUN_NAMESPACE: run_namespace}
        copy = tmp_path / "manifests"
        copy.mkdir()
        (copy / "agent.yaml").write_text(
            yaml.safe_dump_all(_renamed(objects, names), sort_keys=False), encoding="utf-8"
        )
        server_dry_run(kubernetes_cluster, copy, _renamed(objects, names), tmp_path)


def _forbidden(call: Callable[[], object]) -> bool:
    try:
        call()
    except ApiException as error:
        if error.status == 403:
            return True
        raise
    return False


@pytest.fixture
def rbac(kubernetes_cluster: KubernetesCluster) -> RbacAuthorizationV1Api:
    return RbacAuthorizationV1Api(kubernetes_cluster.api)


@pytest.fixture
def other_namespace(kube_core: CoreV1Api) -> Iterator[str]:
    """A namespace that is not the agent's run namespace."""
    with scratch_namespace(kube_core, "fs-other") as name:
        yield name


@pytest.mark.kubernetes
def test_the_agents_service_account_can_do_what_it_needs_and_no_more(
    kube_core: CoreV1Api,
    rbac: RbacAuthorizationV1Api,
    kube_namespace: str,
    other_namespace: str,
    fake_gpu_nodes: NodeFactory,
    tmp_path: Path,
) -> None:
    run_namespace = kube_namespace
    [node] = fake_gpu_nodes(1)
    # a pod the agent did not create, holding GPUs in another namespace
    foreign = pinned_gpu_pod("foreign", node, 2)
    kube_core.create_namespaced_pod(other_namespace, foreign)

    with service_account_kubeconfig(
        kube_core, rbac, run_namespace, with_role=True, directory=tmp_path
    ) as kubeconfig:
        api = api_client(kubeconfig)
        try:
            agent = CoreV1Api(api)
            # nodes: read and watched cluster-wide, patched (--cordon-in-kubernetes)
            nodes = agent.list_node(label_selector="type=kwok").items
            assert node in {n.metadata.name for n in nodes}
            assert agent.read_node(node).status.allocatable["nvidia.com/gpu"] == "8"
            for _ in watch.Watch().stream(agent.list_node, timeout_seconds=1):
                break
            cordon = {
                "spec": {"unschedulable": True},
                "metadata": {"annotations": {"fairshare.dev/cordoned-by-fairshare": "true"}},
            }
            agent.patch_node(node, cordon)
            assert kube_core.read_node(node).spec.unschedulable is True
            agent.patch_node(
                node,
                {
                    "spec": {"unschedulable": None},
                    "metadata": {"annotations": {"fairshare.dev/cordoned-by-fairshare": None}},
                },
            )
            assert not kube_core.read_node(node).spec.unschedulable

            # pods: read and watched in every namespace (the GPUs of foreign pods)
            everywhere = agent.list_pod_for_all_namespaces()
            assert ("foreign", other_namespace) in {
                (p.metadata.name, p.metadata.namespace) for p in everywhere.items
            }
            for _ in watch.Watch().stream(
                agent.list_pod_for_all_namespaces,
                resource_version=everywhere.metadata.resource_version,
                timeout_seconds=1,
            ):
                break

            # pods of its own: created bound to a node (no pods/binding), found by label, deleted
            name = unique_name("run")
            pod = pinned_gpu_pod(name, node, 4, labels=MANAGED_BY)
            agent.create_namespaced_pod(run_namespace, pod)
            assert agent.read_namespaced_pod(name, run_namespace).spec.node_name == node
            mine = agent.list_namespaced_pod(
                run_namespace, label_selector="app.kubernetes.io/managed-by=fairshare"
            )
            assert [p.metadata.name for p in mine.items] == [name]
            agent.delete_namespaced_pod(name, run_namespace, grace_period_seconds=0)
            wait_until(
                lambda: not kube_core.list_namespaced_pod(run_namespace).items,
                "the agent's pod deleted",
            )

            # native work of any namespace: Jobs read and patched, pods bound, deleted and
            # annotated, Events told (dry runs, but the binding: the foreign pod stays)
            batch = client.BatchV1Api(api)
            batch.list_job_for_all_namespaces()
            waiting = pinned_gpu_pod(unique_name("native"), node, 1)
            waiting.spec.node_name = None
            waiting.spec.scheduler_name = "fairshare"
            kube_core.create_namespaced_pod(other_namespace, waiting)
            agent.create_namespaced_pod_binding(
                waiting.metadata.name,
                other_namespace,
                client.V1Binding(
                    metadata=client.V1ObjectMeta(name=waiting.metadata.name),
                    target=client.V1ObjectReference(kind="Node", name=node),
                ),
                _preload_content=False,
            )
            bound = kube_core.read_namespaced_pod(waiting.metadata.name, other_namespace)
            assert bound.spec.node_name == node
            agent.patch_namespaced_pod(
                "foreign", other_namespace, {"metadata": {"annotations": {"x": "y"}}},
                dry_run="All",
            )  # fmt: skip
            agent.delete_namespaced_pod("foreign", other_namespace, dry_run="All")
            agent.create_namespaced_event(
                other_namespace,
                client.CoreV1Event(
                    metadata=client.V1ObjectMeta(name=unique_name("event")),
                    involved_object=client.V1ObjectReference(
                        kind="Pod", name="foreign", namespace=other_namespace
                    ),
                ),
                dry_run="All",
            )

            # and nothing around that
            elsewhere = pinned_gpu_pod(unique_name("run"), node, 1, labels=MANAGED_BY)
            denied: dict[str, Callable[[], object]] = {
                "create pods elsewhere": lambda: agent.create_namespaced_pod(
                    other_namespace, elsewhere
                ),
                "create jobs": lambda: batch.create_namespaced_job(
                    other_namespace,
                    client.V1Job(
                        metadata=client.V1ObjectMeta(name=unique_name("job")),
                        spec=client.V1JobSpec(template=client.V1PodTemplateSpec()),
                    ),
                ),
                "delete jobs": lambda: batch.delete_namespaced_job("any", other_namespace),
                "create nodes": lambda: agent.create_node(
                    client.V1Node(metadata=client.V1ObjectMeta(name=unique_name("rogue")))
                ),
                "delete nodes": lambda: agent.delete_node(node),
                "update nodes": lambda: agent.replace_node(node, kube_core.read_node(node)),
                "list secrets": lambda: agent.list_namespaced_secret(run_namespace),
                "delete events": lambda: agent.delete_collection_namespaced_event(run_namespace),
                "exec into pods": lambda: agent.connect_get_namespaced_pod_exec(
                    "foreign", other_namespace, command=["true"]
                ),
                "list namespaces": agent.list_namespace,
            }
            allowed = [what for what, call in denied.items() if not _forbidden(call)]
            assert allowed == []
        finally:
            api.close()
    assert (
        kube_core.read_namespaced_pod("foreign", other_namespace).metadata.deletion_timestamp
        is None
    )


@pytest.mark.kubernetes
def test_without_the_roles_a_service_account_cannot_list_nodes(
    kube_core: CoreV1Api, rbac: RbacAuthorizationV1Api, kube_namespace: str, tmp_path: Path
) -> None:
    with service_account_kubeconfig(
        kube_core, rbac, kube_namespace, with_role=False, directory=tmp_path
    ) as kubeconfig:
        api = api_client(kubeconfig)
        try:
            agent = CoreV1Api(api)
            # authenticated (its token is good), but granted nothing
            review = client.AuthenticationV1Api(api).create_self_subject_review(
                client.V1SelfSubjectReview()
            )
            assert review.status.user_info.username.startswith("system:serviceaccount:")
            with pytest.raises(ApiException) as refused:
                agent.list_node()
            assert refused.value.status == 403
            message = json.loads(refused.value.body)["message"]
            assert 'cannot list resource "nodes"' in message
            with pytest.raises(ApiException) as refused:
                agent.create_namespaced_pod(kube_namespace, pinned_gpu_pod("p", "nowhere", 1))
            assert refused.value.status == 403
        finally:
            api.close()
