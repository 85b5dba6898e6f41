"""A real Kubernetes API server, with KWOK's fake nodes, for the Kubernetes agent's tests.

The control plane is the one ``bash .ci/start-kubernetes`` starts (etcd, kube-apiserver and
KWOK; no kubelet, no controller manager), found through ``$FAIRSHARE_KUBECONFIG`` or its admin
kubeconfig (:data:`ADMIN_KUBECONFIG`). Without one the tests are skipped with the reason, or fail
under ``FAIRSHARE_REQUIRE_KUBERNETES=1`` (CI).

Fake nodes are Node objects annotated ``kwok.x-k8s.io/node=fake``: KWOK makes them Ready and
runs the pods bound to them through the stages of ``.ci/kwok/stages.yaml``, whose annotations
(:data:`FINISH_AFTER`, :data:`EXIT_CODE`, :data:`REASON`, :data:`IGNORE_SIGTERM`) say how a pod
ends. Each test makes nodes and a namespace of unique names, so that tests never see each
other's objects, and deletes them when it ends (the cluster is shared by every test and run).

Use the fixtures by importing them into a test module (``from
tests.integration.kubernetes_fixtures import fake_gpu_nodes, kube_namespace,
kubernetes_cluster``), or the functions under them directly.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import pytest
import yaml
from kubernetes import client, config, watch
from kubernetes.client import ApiClient, CoreV1Api, RbacAuthorizationV1Api, V1Node, V1Pod
from kubernetes.client.exceptions import ApiException

REPO = Path(__file__).resolve().parents[2]
ADMIN_KUBECONFIG = Path("/var/lib/fairshare-k8s/admin.kubeconfig")
"""Where ``.ci/start-kubernetes`` writes the kubeconfig of its admin (system:masters)."""

GPU = "nvidia.com/gpu"
KWOK_NODE = "kwok.x-k8s.io/node"
"""The annotation (value ``fake``) of the nodes KWOK manages; others are left alone."""
POOL_LABEL = "fairshare.dev/pool"
FINISH_AFTER = "fairshare.dev/kwok-finish-after"
"""A Go duration (``"5s"``): the pod ends that long after KWOK saw it Running. Without it a pod
runs until deleted."""
EXIT_CODE = "fairshare.dev/kwok-exit-code"
"""The exit code its containers end with (default ``"0"``): 0 is Succeeded, others Failed."""
REASON = "fairshare.dev/kwok-reason"
"""The containers' terminated reason (default Completed for 0, Error otherwise; OOMKilled...)."""
IGNORE_SIGTERM = "fairshare.dev/kwok-ignore-sigterm"
"""``"true"``: a deleted Running pod ends only when its grace period is over, with 137; without
it, at once with 143. Either way it is then removed."""

TIMEOUT_S = 30.0
_START = "run `bash .ci/start-kubernetes` (or set FAIRSHARE_KUBECONFIG)"


def pytest_configure(config: pytest.Config) -> None:
    """The marker, when this module is loaded as a plugin (``-p``) before pyproject has it."""
    config.addinivalue_line(
        "markers", "kubernetes: needs a real Kubernetes (bash .ci/start-kubernetes)"
    )


@dataclass(frozen=True)
class KubernetesCluster:
    kubeconfig: Path
    api: ApiClient
    version: str

    def core(self) -> CoreV1Api:
        return CoreV1Api(self.api)


def kubeconfig_path() -> Path:
    """``$FAIRSHARE_KUBECONFIG``, else the admin kubeconfig of ``.ci/start-kubernetes``.

    Not ``$KUBECONFIG``: a developer's own cluster is never used by accident (the tests create
    and delete nodes)."""
    return Path(os.environ.get("FAIRSHARE_KUBECONFIG") or ADMIN_KUBECONFIG)


def api_client(kubeconfig: Path, *, retries: int | None = None) -> ApiClient:
    """A client of the API server of ``kubeconfig``, with its credentials (``retries``: of a
    failed connection, urllib3's default when None)."""
    configuration = client.Configuration()
    config.load_kube_config(
        config_file=str(kubeconfig), client_configuration=configuration, persist_config=False
    )
    configuration.retries = retries
    return ApiClient(configuration)


def _find_kubernetes() -> KubernetesCluster | str:
    """The cluster, or why there is none."""
    path = kubeconfig_path()
    if not path.is_file():
        return f"no kubeconfig at {path}: {_START}"
    try:
        api = api_client(path, retries=0)  # a control plane that is down answers at once
        method, url, headers, body, post = api.param_serialize(
            "GET", "/readyz", auth_settings=["BearerToken"]
        )
        response = api.call_api(method, url, headers, body, post, _request_timeout=10)
        ready = response.read().decode(errors="replace")
        if ready != "ok":
            return f"the API server of {path} is not ready ({ready!r})"
        version = client.VersionApi(api).get_code(_request_timeout=10).git_version
    except Exception as error:  # any failure to reach it is a reason to skip, said as is
        return f"the API server of {path} does not answer ({error}): {_START}"
    return KubernetesCluster(path, api_client(path), str(version))


def require_kubernetes() -> KubernetesCluster:
    """The running cluster; without one, skip (the reason shows with ``-ra``) or, under
    ``FAIRSHARE_REQUIRE_KUBERNETES=1``, fail."""
    found = _find_kubernetes()
    if isinstance(found, str):
        if os.environ.get("FAIRSHARE_REQUIRE_KUBERNETES") == "1":
            pytest.fail(f"Kubernetes required (FAIRSHARE_REQUIRE_KUBERNETES=1) but: {found}")
        pytest.skip(found)
    return found


def wait_until(condition: Callable[[], bool], what: str, timeout_s: float = TIMEOUT_S) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"timed out after {timeout_s:.0f} s waiting for {what}"
        time.sleep(0.1)


def unique_name(prefix: str) -> str:
    """A DNS-1123 name no other test or run uses."""
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


# -- nodes ----------------------------------------------------------------------------------------


def fake_gpu_node(
    name: str,
    *,
    gpus: int = 8,
    pool: str | None = None,
    labels: dict[str, str] | None = None,
    cpu: str = "64",
    memory: str = "512Gi",
) -> V1Node:
    """A Node that KWOK manages, with ``gpus`` of ``nvidia.com/gpu`` (capacity = allocatable,
    as the NVIDIA device plugin reports them)."""
    resources = {"cpu": cpu, "memory": memory, "pods": "110", GPU: str(gpus)}
    all_labels = {"kubernetes.io/hostname": name, "type": "kwok"}
    if pool is not None:
        all_labels[POOL_LABEL] = pool
    all_labels.update(labels or {})
    return V1Node(
        metadata=client.V1ObjectMeta(name=name, labels=all_labels, annotations={KWOK_NODE: "fake"}),
        status=client.V1NodeStatus(capacity=resources, allocatable=dict(resources)),
    )


def node_ready(core: CoreV1Api, name: str) -> bool:
    node = core.read_node(name)
    conditions = node.status.conditions or []
    return any(c.type == "Ready" and c.status == "True" for c in conditions)


def create_fake_gpu_nodes(
    core: CoreV1Api,
    count: int,
    *,
    gpus: int = 8,
    pool: str | None = None,
    prefix: str = "kwok-gpu",
    labels: dict[str, str] | None = None,
    wait_ready: bool = True,
) -> list[str]:
    """``count`` fake GPU nodes of unique names (``<prefix>-<random>-<i>``), Ready on return
    unless ``wait_ready`` is false. The caller deletes them (:func:`delete_nodes`)."""
    base = unique_name(prefix)
    names = [f"{base}-{i}" for i in range(count)]
    created: list[str] = []
    try:
        for name in names:
            core.create_node(fake_gpu_node(name, gpus=gpus, pool=pool, labels=labels))
            created.append(name)
        if wait_ready:
            for name in names:
                wait_until(
                    lambda name=name: node_ready(core, name),
                    f"fake node {name} Ready (is KWOK running? /var/log/fairshare-k8s/kwok.log)",
                )
    except BaseException:
        delete_nodes(core, created)
        raise
    return names


def delete_nodes(core: CoreV1Api, names: list[str]) -> None:
    """Delete the nodes (missing ones are fine). Their pods are not collected: there is no
    controller manager; a test's namespace takes its pods away (:func:`delete_namespace`)."""
    for name in names:
        with contextlib.suppress(ApiException):
            core.delete_node(name)


class NodeFactory(Protocol):
    def __call__(
        self,
        count: int,
        *,
        gpus: int = ...,
        pool: str | None = ...,
        prefix: str = ...,
        labels: dict[str, str] | None = ...,
        wait_ready: bool = ...,
    ) -> list[str]: ...


@dataclass
class _Nodes:
    core: CoreV1Api
    made: list[str] = field(default_factory=list)

    def __call__(self, count: int, **options: Any) -> list[str]:
        names = create_fake_gpu_nodes(self.core, count, **options)
        self.made.extend(names)
        return names


@contextmanager
def fake_gpu_node_factory(core: CoreV1Api) -> Iterator[NodeFactory]:
    """A :class:`NodeFactory`; every node it made is deleted on exit."""
    nodes = _Nodes(core)
    try:
        yield nodes
    finally:
        delete_nodes(core, nodes.made)


# -- namespaces -----------------------------------------------------------------------------------


def create_namespace(core: CoreV1Api, prefix: str = "fs-test") -> str:
    name = unique_name(prefix)
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
    return name


def delete_namespace(core: CoreV1Api, name: str) -> None:
    """Delete the namespace and what tests put in it, at once.

    Without a controller manager a deleted namespace is never emptied nor finalized (it would
    stay Terminating, its pods running on KWOK), so this does what the namespace controller
    would: delete its pods (grace 0: gone at once, not ended by KWOK first) and the other kinds
    tests create, then finalize it. Kinds not listed here would be left in etcd, unseen."""
    coordination = client.CoordinationV1Api(core.api_client)
    rbac = client.RbacAuthorizationV1Api(core.api_client)
    for delete in (
        core.delete_collection_namespaced_pod,
        core.delete_collection_namespaced_config_map,
        core.delete_collection_namespaced_secret,
        core.delete_collection_namespaced_event,
        core.delete_collection_namespaced_service_account,
        coordination.delete_collection_namespaced_lease,
        rbac.delete_collection_namespaced_role_binding,
        rbac.delete_collection_namespaced_role,
    ):
        with contextlib.suppress(ApiException):
            delete(name, grace_period_seconds=0)
    with contextlib.suppress(ApiException):
        for service in core.list_namespaced_service(name).items:
            core.delete_namespaced_service(service.metadata.name, name)
    try:
        core.delete_namespace(name)
        core.replace_namespace_finalize(
            name,
            client.V1Namespace(
                metadata=client.V1ObjectMeta(name=name),
                spec=client.V1NamespaceSpec(finalizers=[]),
            ),
        )
    except ApiException as error:
        if error.status != 404:
            raise


@contextmanager
def scratch_namespace(core: CoreV1Api, prefix: str = "fs-test") -> Iterator[str]:
    """A namespace of a unique name, deleted with its pods on exit."""
    name = create_namespace(core, prefix)
    try:
        yield name
    finally:
        delete_namespace(core, name)


# -- pods -----------------------------------------------------------------------------------------


def pinned_gpu_pod(
    name: str,
    node: str,
    gpus: int,
    *,
    finish_after: str | None = None,
    exit_code: int | None = None,
    reason: str | None = None,
    ignore_sigterm: bool = False,
    labels: dict[str, str] | None = None,
    image: str = "registry.invalid/fairshare/workload:test",
) -> V1Pod:
    """A pod bound to ``node`` by ``spec.nodeName`` (no scheduler), asking ``gpus`` GPUs (requests
    = limits, as the API server demands of extended resources), never restarted; the KWOK
    annotations say how it ends. KWOK pulls no image: any name does."""
    annotations: dict[str, str] = {}
    if finish_after is not None:
        annotations[FINISH_AFTER] = finish_after
    if exit_code is not None:
        annotations[EXIT_CODE] = str(exit_code)
    if reason is not None:
        annotations[REASON] = reason
    if ignore_sigterm:
        annotations[IGNORE_SIGTERM] = "true"
    gpu = {GPU: str(gpus)}
    return V1Pod(
        metadata=client.V1ObjectMeta(name=name, labels=labels, annotations=annotations or None),
        spec=client.V1PodSpec(
            node_name=node,
            restart_policy="Never",
            containers=[
                client.V1Container(
                    name="workload",
                    image=image,
                    resources=client.V1ResourceRequirements(requests=gpu, limits=dict(gpu)),
                )
            ],
        ),
    )


def watch_pod(
    core: CoreV1Api,
    namespace: str,
    name: str,
    resource_version: str,
    until: Callable[[str, V1Pod], bool],
    timeout_s: float = TIMEOUT_S,
) -> list[tuple[str, V1Pod]]:
    """The events (``ADDED``, ``MODIFIED``, ``DELETED``) of one pod after ``resource_version``
    (take it from a list made before the pod was created, so that no state is missed), up to
    and including the first for which ``until(type, pod)`` holds."""
    seen: list[tuple[str, V1Pod]] = []
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        stream = watch.Watch()
        for event in stream.stream(
            core.list_namespaced_pod,
            namespace,
            field_selector=f"metadata.name={name}",
            resource_version=resource_version,
            timeout_seconds=max(1, int(deadline - time.monotonic())),
        ):
            pod: V1Pod = event["object"]
            resource_version = pod.metadata.resource_version
            seen.append((event["type"], pod))
            if until(event["type"], pod):
                stream.stop()
                return seen
    states = [(kind, pod.status.phase) for kind, pod in seen]
    raise AssertionError(f"timed out after {timeout_s:.0f} s watching pod {name}: saw {states}")


def terminated_state(pod: V1Pod) -> client.V1ContainerStateTerminated | None:
    """How its (first) container ended, if it has."""
    statuses = pod.status.container_statuses or []
    return statuses[0].state.terminated if statuses else None


# -- the agent's manifests and a service account of its permissions -----------------------------

MANIFESTS = REPO / "deploy" / "kubernetes"
"""The agent's deployment (``kubectl apply -f deploy/kubernetes/``): its namespaces, service
account, RBAC and Deployment."""
AGENT_CLUSTER_ROLE = "fairshare-agent"
AGENT_RUNS_ROLE = "fairshare-agent-runs"


def agent_manifests(directory: Path = MANIFESTS) -> list[dict[str, Any]]:
    """Every object of the YAML files in ``directory``, in file then document order."""
    objects: list[dict[str, Any]] = []
    for path in sorted([*directory.glob("*.yaml"), *directory.glob("*.yml")]):
        with path.open(encoding="utf-8") as file:
            objects.extend(doc for doc in yaml.safe_load_all(file) if doc is not None)
    return objects


def agent_manifest(kind: str, name: str, directory: Path = MANIFESTS) -> dict[str, Any]:
    """The one object of that kind and name in the manifests."""
    found = [
        obj
        for obj in agent_manifests(directory)
        if obj.get("kind") == kind and obj.get("metadata", {}).get("name") == name
    ]
    assert len(found) == 1, f"{len(found)} {kind} named {name} in {directory}"
    return found[0]


def _allowed(
    authorization: client.AuthorizationV1Api,
    user: str,
    groups: list[str],
    verb: str,
    resource: str,
    namespace: str | None,
) -> bool:
    review = client.V1SubjectAccessReview(
        spec=client.V1SubjectAccessReviewSpec(
            user=user,
            groups=groups,
            resource_attributes=client.V1ResourceAttributes(
                verb=verb, resource=resource, namespace=namespace
            ),
        )
    )
    return bool(authorization.create_subject_access_review(review).status.allowed)


def _kubeconfig_cluster(admin_kubeconfig: Path) -> dict[str, Any]:
    """The cluster entry (server, CA) of the kubeconfig's current context."""
    admin = yaml.safe_load(admin_kubeconfig.read_text(encoding="utf-8"))
    current = admin.get("current-context")
    contexts = {c["name"]: c["context"] for c in admin.get("contexts", [])}
    clusters = {c["name"]: c["cluster"] for c in admin.get("clusters", [])}
    if current in contexts:
        return dict(clusters[contexts[current]["cluster"]])
    assert len(clusters) == 1, f"{admin_kubeconfig}: no current context and not one cluster"
    return dict(next(iter(clusters.values())))


@contextmanager
def service_account_kubeconfig(
    core: CoreV1Api,
    rbac_api_client: RbacAuthorizationV1Api,
    run_namespace: str,
    *,
    with_role: bool,
    directory: Path,
    admin_kubeconfig: Path | None = None,
    token_seconds: int = 3600,
) -> Iterator[Path]:
    """A kubeconfig of a new service account, as the agent's Deployment runs with.

    The service account has a unique name in a scratch namespace of its own. With ``with_role``
    it is bound to copies of the repository's ClusterRole ``fairshare-agent`` and of its Role
    ``fairshare-agent-runs`` (the latter in ``run_namespace``, the agent's ``--namespace``), taken
    from ``deploy/kubernetes/`` and renamed uniquely, so that tests running at once do not share
    them; on return the API server's authorizer already applies them. Without, it has only what
    every authenticated user has. Its token comes from the TokenRequest API (no token
    controller runs), and the kubeconfig (in ``directory``) has the server and CA of the admin
    kubeconfig (default :func:`kubeconfig_path`). Everything is deleted on exit."""
    admin_path = admin_kubeconfig or kubeconfig_path()
    authorization = client.AuthorizationV1Api(core.api_client)
    suffix = uuid.uuid4().hex[:8]
    account = f"fairshare-agent-{suffix}"
    cluster_role = f"{AGENT_CLUSTER_ROLE}-{suffix}"
    runs_role = f"{AGENT_RUNS_ROLE}-{suffix}"
    made_cluster_role = made_binding = made_role = made_role_binding = False
    with scratch_namespace(core, "fs-sa") as account_namespace:
        try:
            core.create_namespaced_service_account(
                account_namespace,
                client.V1ServiceAccount(metadata=client.V1ObjectMeta(name=account)),
            )
            subject = client.RbacV1Subject(
                kind="ServiceAccount", name=account, namespace=account_namespace
            )
            user = f"system:serviceaccount:{account_namespace}:{account}"
            groups = ["system:serviceaccounts", f"system:serviceaccounts:{account_namespace}"]
            if with_role:
                rules = agent_manifest("ClusterRole", AGENT_CLUSTER_ROLE)["rules"]
                rbac_api_client.create_cluster_role(
                    client.V1ClusterRole.from_dict(
                        {"metadata": {"name": cluster_role}, "rules": rules}
                    )
                )
                made_cluster_role = True
                rbac_api_client.create_cluster_role_binding(
                    client.V1ClusterRoleBinding(
                        metadata=client.V1ObjectMeta(name=cluster_role),
                        role_ref=client.V1RoleRef(
                            api_group="rbac.authorization.k8s.io",
                            kind="ClusterRole",
                            name=cluster_role,
                        ),
                        subjects=[subject],
                    )
                )
                made_binding = True
                rules = agent_manifest("Role", AGENT_RUNS_ROLE)["rules"]
                rbac_api_client.create_namespaced_role(
                    run_namespace,
                    client.V1Role.from_dict({"metadata": {"name": runs_role}, "rules": rules}),
                )
                made_role = True
                rbac_api_client.create_namespaced_role_binding(
                    run_namespace,
                    client.V1RoleBinding(
                        metadata=client.V1ObjectMeta(name=runs_role),
                        role_ref=client.V1RoleRef(
                            api_group="rbac.authorization.k8s.io", kind="Role", name=runs_role
                        ),
                        subjects=[subject],
                    ),
                )
                made_role_binding = True
                # the authorizer reads RBAC objects through a cache: wait until it has them
                for verb, resource, namespace in (
                    ("list", "nodes", None),
                    ("create", "pods", run_namespace),
                ):
                    wait_until(
                        lambda v=verb, r=resource, n=namespace: _allowed(
                            authorization, user, groups, v, r, n
                        ),
                        f"RBAC to allow {user} to {verb} {resource}",
                    )
            token = core.create_namespaced_service_account_token(
                account,
                account_namespace,
                client.AuthenticationV1TokenRequest(
                    # no audiences: the API server's own
                    spec=client.V1TokenRequestSpec(audiences=[], expiration_seconds=token_seconds)
                ),
            ).status.token
            kubeconfig = {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [
                    {"name": "fairshare-test", "cluster": _kubeconfig_cluster(admin_path)}
                ],
                "users": [{"name": account, "user": {"token": token}}],
                "contexts": [
                    {
                        "name": account,
                        "context": {
                            "cluster": "fairshare-test",
                            "user": account,
                            "namespace": run_namespace,
                        },
                    }
                ],
                "current-context": account,
            }
            path = directory / f"{account}.kubeconfig"
            path.touch(mode=0o600)
            path.write_text(yaml.safe_dump(kubeconfig, sort_keys=False), encoding="utf-8")
            yield path
        finally:
            cleanups: list[tuple[bool, Callable[[], object]]] = [
                (
                    made_role_binding,
                    lambda: rbac_api_client.delete_namespaced_role_binding(
                        runs_role, run_namespace
                    ),
                ),
                (
                    made_role,
                    lambda: rbac_api_client.delete_namespaced_role(runs_role, run_namespace),
                ),
                (made_binding, lambda: rbac_api_client.delete_cluster_role_binding(cluster_role)),
                (made_cluster_role, lambda: rbac_api_client.delete_cluster_role(cluster_role)),
            ]
            for made, delete in cleanups:
                if made:
                    with contextlib.suppress(ApiException):
                        delete()


# -- fixtures -------------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def kubernetes_cluster() -> KubernetesCluster:
    """Session-wide, so that a missing cluster skips every test at once."""
    return require_kubernetes()


@pytest.fixture
def kube_core(kubernetes_cluster: KubernetesCluster) -> CoreV1Api:
    return kubernetes_cluster.core()


@pytest.fixture
def kube_namespace(kube_core: CoreV1Api) -> Iterator[str]:
    """A namespace of this test's own, deleted with its pods when it ends."""
    with scratch_namespace(kube_core) as name:
        yield name


@pytest.fixture
def fake_gpu_nodes(kube_core: CoreV1Api) -> Iterator[NodeFactory]:
    """``fake_gpu_nodes(count, gpus=8, pool=None, ...)`` makes Ready fake GPU nodes (see
    :func:`create_fake_gpu_nodes`); all are deleted when the test ends."""
    with fake_gpu_node_factory(kube_core) as make:
        yield make


def kubectl_binary() -> str:
    """kubectl (``$FAIRSHARE_KUBECTL``, else on PATH); without it, skip, or fail under
    ``FAIRSHARE_REQUIRE_KUBERNETES=1``."""
    found = shutil.which(os.environ.get("FAIRSHARE_KUBECTL") or "kubectl")
    if found is None:
        reason = "no kubectl on PATH (or set FAIRSHARE_KUBECTL)"
        if os.environ.get("FAIRSHARE_REQUIRE_KUBERNETES") == "1":
            pytest.fail(f"Kubernetes required (FAIRSHARE_REQUIRE_KUBERNETES=1) but: {reason}")
        pytest.skip(reason)
    return found


def server_dry_run(
    cluster: KubernetesCluster, manifests: Path, objects: list[dict[str, Any]], scratch: Path
) -> None:
    """``kubectl apply --dry-run=server --validate=strict -f manifests`` against ``cluster``:
    the API server must accept every one of ``objects`` (what ``manifests`` holds) and nothing
    else, each dry-run (``scratch``: kubectl's cache). Never the developer's ``$KUBECONFIG``."""
    env = {k: v for k, v in os.environ.items() if k != "KUBECONFIG"}
    env["KUBECACHEDIR"] = str(scratch / "kube-cache")
    command = [kubectl_binary(), "apply", "--dry-run=server", "--validate=strict"]
    command += ["-f", str(manifests), "--kubeconfig", str(cluster.kubeconfig)]
    result = subprocess.run(
        command, capture_output=True, text=True, env=env, timeout=120, check=False
    )
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    # one line per object: "<kind>[.<group>]/<name> created|configured (server dry run)"
    applied: list[tuple[str, str]] = []
    for line in result.stdout.splitlines():
        resource, _, rest = line.partition("/")
        name, _, outcome = rest.partition(" ")
        assert outcome.endswith("(server dry run)"), output
        applied.append((resource.split(".")[0], name))
    expected = [(obj["kind"].lower(), obj["metadata"]["name"]) for obj in objects]
    assert sorted(applied) == sorted(expected), output
