"""The Helm chart of the control plane, ``deploy/helm/fairshare``: ``helm lint`` passes; it
renders with its default values and with every optional part on; every command line it renders
parses with the real CLI (options that exist, values of their types); the agent's RBAC is
``deploy/kubernetes/agent.yaml``'s, each optional rule only with its option; a ServiceMonitor is
rendered only when asked for; and the API server accepts every object it renders (a server dry
run against ``bash .ci/start-kubernetes``, strict field validation).

Helm is built by ``.ci/start-kubernetes`` into a cache directory of its own (the version is read
from the script, the same path it writes); ``$FAIRSHARE_HELM`` names another binary. Without
helm these tests skip, or fail under ``FAIRSHARE_REQUIRE_KUBERNETES=1`` (CI).

The test cluster has no Prometheus operator, so there the ServiceMonitor is checked as rendered
(its fields, its selection of the Services) but not applied: the API server has no such kind (a
cluster that has it gets it in the dry run too)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client
from kubernetes.client import CoreV1Api
from kubernetes.client.exceptions import ApiException

from tests.integration.kubernetes_fixtures import (
    AGENT_CLUSTER_ROLE,
    AGENT_RUNS_ROLE,
    REPO,
    KubernetesCluster,
    agent_manifest,
    kube_core,
    kubernetes_cluster,
    scratch_namespace,
    server_dry_run,
    unique_name,
)

# the fixtures this module uses, imported from kubernetes_fixtures (pytest finds them here)
__all__ = ["kube_core", "kubernetes_cluster"]

pytestmark = pytest.mark.kubernetes

CHART = REPO / "deploy" / "helm" / "fairshare"
SCRIPT = REPO / ".ci" / "start-kubernetes"
SERVICE_MONITOR_API = "monitoring.coreos.com/v1/ServiceMonitor"

# Every optional part on: HTTPS, SASL_SSL with a CA and a Secret per service, the agent's two
# optional permissions and its other options, the ServiceMonitor, a pinned digest.
OPTIONAL = {
    "image": {"digest": "sha256:" + "a" * 64},
    "imagePullSecrets": [{"name": "regcred"}],
    "kafka": {
        "bootstrap": "kafka-0.kafka:9093,kafka-1.kafka:9093",
        "securityProtocol": "SASL_SSL",
        "sasl": {
            "existingSecret": "fairshare-kafka",
            "secrets": {"scheduler": "fairshare-kafka-scheduler"},
        },
        "ca": {"existingSecret": "kafka-ca"},
        "properties": {"ssl.endpoint.identification.algorithm": "https"},
    },
    "api": {"tls": {"existingSecret": "fairshare-api-tls"}, "replicas": 2},
    "serviceMonitor": {"enabled": True, "labels": {"release": "prometheus"}},
    "agent": {
        "cordonInKubernetes": True,
        "foreignGpuPolicy": "evict",
        "foreignGraceS": 120,
        "gpuNodeSelector": "fairshare.dev/pool=k8s-a100",
        "defaultWorkloadImage": "busybox:1.37",
        "extraArgs": ["--pending-timeout-s", "900"],
    },
    "scheduler": {"extraArgs": ["--tick-s", "2"]},
    "charging": {"periodLength": "day"},
}
# what deploy/kubernetes/agent.yaml grants only for an option (docs/agents.md, "Permissions")
CORDON_RULE = (("", "nodes"), "patch")  # --cordon-in-kubernetes
#: in every namespace: native work's preemption (--scheduler-name, on by default), and
#: --foreign-gpu-policy evict
DELETE_RULE = (("", "pods"), "delete")
#: native work's other rules (off with agent.schedulerName "")
NATIVE_RULES = {
    (("", "pods"), "patch"),
    (("", "pods/binding"), "create"),
    *((("batch", "jobs"), verb) for verb in ("get", "list", "watch", "patch")),
    (("", "events"), "create"),
}


# -- helm -----------------------------------------------------------------------------------------


def _unavailable(reason: str) -> None:
    if os.environ.get("FAIRSHARE_REQUIRE_KUBERNETES") == "1":
        pytest.fail(f"Kubernetes required (FAIRSHARE_REQUIRE_KUBERNETES=1) but: {reason}")
    pytest.skip(reason)


def helm_path() -> Path:
    """Where ``.ci/start-kubernetes`` builds helm: ``$FAIRSHARE_K8S_CACHE`` (else
    ``$XDG_CACHE_HOME/fairshare/k8s``, else ``~/.cache/fairshare/k8s``), then
    ``helm-<HELM_VERSION>/bin/helm``, the version as the script sets it."""
    found = re.search(r"^HELM_VERSION=(\S+)$", SCRIPT.read_text(encoding="utf-8"), re.MULTILINE)
    assert found, f"no HELM_VERSION= line in {SCRIPT}"
    cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    root = Path(os.environ.get("FAIRSHARE_K8S_CACHE") or Path(cache) / "fairshare" / "k8s")
    return root / f"helm-{found.group(1)}" / "bin" / "helm"


@pytest.fixture(scope="module")
def helm() -> list[str]:
    """The helm command: ``$FAIRSHARE_HELM``, else the script's build."""
    named = os.environ.get("FAIRSHARE_HELM")
    path = Path(shutil.which(named) or named) if named else helm_path()
    if not path.is_file() or not os.access(path, os.X_OK):
        _unavailable(f"no helm at {path}: `bash .ci/start-kubernetes helm` builds it")
    return [str(path)]


def _helm_env(tmp: Path) -> dict[str, str]:
    """Helm's config, cache and data in a temporary directory, and no kubeconfig: nothing of
    a developer's own helm or cluster is read (template and lint need no cluster)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HELM_", "KUBECONFIG"))}
    for name in ("CACHE", "CONFIG", "DATA"):
        env[f"HELM_{name}_HOME"] = str(tmp / name.lower())
    return env


def run_helm(helm: list[str], *args: str, tmp: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*helm, *args],
        capture_output=True,
        text=True,
        env=_helm_env(tmp),
        timeout=120,
        check=False,
    )


def _values_file(tmp: Path, values: dict[str, Any], name: str = "values.yaml") -> Path:
    path = tmp / name
    path.write_text(yaml.safe_dump(values), encoding="utf-8")
    return path


def render(
    helm: list[str],
    tmp: Path,
    values: dict[str, Any] | None = None,
    *,
    release: str = "fairshare",
    namespace: str = "fairshare",
    api_versions: tuple[str, ...] = (),
    kube_version: str | None = None,
) -> list[dict[str, Any]]:
    """``helm template`` of the chart: its objects."""
    args = ["template", release, str(CHART), "--namespace", namespace]
    args += ["--values", str(_values_file(tmp, values or {}))]
    for api in api_versions:
        args += ["--api-versions", api]
    if kube_version:
        args += ["--kube-version", kube_version]
    result = run_helm(helm, *args, tmp=tmp)
    assert result.returncode == 0, result.stderr
    return [doc for doc in yaml.safe_load_all(result.stdout) if doc]


def _deep_merge(base: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    merged = dict(base)
    for key, value in extra.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = _deep_merge(merged[key], value)
        else:
            merged[key] = value
    return merged


def _by_kind(objects: list[dict[str, Any]], kind: str) -> dict[str, dict[str, Any]]:
    return {obj["metadata"]["name"]: obj for obj in objects if obj["kind"] == kind}


# -- lint and template ----------------------------------------------------------------------------


@pytest.mark.parametrize("optional", [False, True], ids=["defaults", "optional-parts-on"])
def test_helm_lint_passes(helm: list[str], tmp_path: Path, optional: bool) -> None:
    args = ["lint", str(CHART), "--strict", "--namespace", "fairshare"]
    if optional:
        args += ["--values", str(_values_file(tmp_path, OPTIONAL))]
        # lint renders with a cluster's capabilities unknown: the ServiceMonitor's API named
        args += ["--set", "serviceMonitor.enabled=false"]
    result = run_helm(helm, *args, tmp=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "1 chart(s) linted, 0 chart(s) failed" in result.stdout, result.stdout


def test_default_values_render_the_control_plane(helm: list[str], tmp_path: Path) -> None:
    objects = render(helm, tmp_path)
    deployments = _by_kind(objects, "Deployment")
    assert set(deployments) == {
        "fairshare-api",
        "fairshare-scheduler",
        "fairshare-charging",
        "fairshare-projector",
        "fairshare-agent",
    }
    assert deployments["fairshare-scheduler"]["spec"]["replicas"] == 2  # leader and standby
    for single in ("fairshare-agent", "fairshare-charging", "fairshare-projector"):
        assert deployments[single]["spec"]["replicas"] == 1
        assert deployments[single]["spec"]["strategy"] == {"type": "Recreate"}
    assert set(_by_kind(objects, "Service")) == {"fairshare-api", "fairshare-metrics"}
    assert set(_by_kind(objects, "PodDisruptionBudget")) == {"fairshare-scheduler"}
    assert not _by_kind(objects, "ServiceMonitor")
    assert set(_by_kind(objects, "Namespace")) == {"fairshare-runs"}
    # no Secret is made by the chart: they are provided by name
    assert not _by_kind(objects, "Secret")
    for obj in objects:
        labels = obj["metadata"]["labels"]
        assert labels["app.kubernetes.io/instance"] == "fairshare"
        assert labels["app.kubernetes.io/managed-by"] == "Helm"
        if obj["kind"] not in {"Namespace", "ClusterRole", "ClusterRoleBinding"}:
            namespace = obj["metadata"]["namespace"]
            assert namespace == (
                "fairshare-runs" if obj["kind"] in {"Role", "RoleBinding"} else "fairshare"
            )

    for name, deployment in deployments.items():
        pod = deployment["spec"]["template"]["spec"]
        assert pod["securityContext"]["runAsNonRoot"] is True
        assert pod["securityContext"]["runAsUser"] != 0
        [container] = pod["containers"]
        assert container["securityContext"]["readOnlyRootFilesystem"] is True
        assert container["securityContext"]["allowPrivilegeEscalation"] is False
        assert container["securityContext"]["capabilities"] == {"drop": ["ALL"]}
        assert container["resources"]["requests"], name
        assert container["resources"]["limits"]["memory"], name
        assert container["livenessProbe"], name
        env = {item["name"]: item for item in container["env"]}
        assert env["FAIRSHARE_KAFKA_BOOTSTRAP"]["value"] == "kafka.kafka.svc.cluster.local:9092"
        # each signer is given its own key only, and the projector (which signs nothing) none
        volumes = {volume["name"]: volume for volume in pod["volumes"]}
        if name == "fairshare-projector":
            assert "FAIRSHARE_SIGNING_KEY" not in env
            assert "secrets" not in volumes
        else:
            assert env["FAIRSHARE_SIGNING_KEY"]["value"] == "/run/fairshare/signing.key"
            [source] = volumes["secrets"]["projected"]["sources"]
            role = name.removeprefix("fairshare-")
            key = "agent-k8s.key" if role == "agent" else f"{role}.key"
            assert source["secret"] == {
                "name": "fairshare-signing-keys",
                "items": [{"key": key, "path": "signing.key"}],
            }
    api = deployments["fairshare-api"]["spec"]["template"]["spec"]["containers"][0]
    assert api["readinessProbe"]["httpGet"] == {"path": "/health", "port": "http", "scheme": "HTTP"}
    assert "--insecure-http" in api["command"]
    assert (
        api["command"][api["command"].index("--tokens") + 1] == "/etc/fairshare/tokens/tokens.json"
    )
    config = _by_kind(objects, "ConfigMap")["fairshare-kafka"]["data"]["client.properties"]
    assert config.split() == ["security.protocol=PLAINTEXT"]


def test_the_optional_parts_render(helm: list[str], tmp_path: Path) -> None:
    objects = render(helm, tmp_path, OPTIONAL, api_versions=(SERVICE_MONITOR_API,))
    deployments = _by_kind(objects, "Deployment")
    api = deployments["fairshare-api"]["spec"]["template"]["spec"]
    command = api["containers"][0]["command"]
    assert "--insecure-http" not in command
    assert command[command.index("--tls-key") + 1] == "/run/fairshare/tls.key"
    assert api["containers"][0]["readinessProbe"]["httpGet"]["scheme"] == "HTTPS"
    config = _by_kind(objects, "ConfigMap")["fairshare-kafka"]["data"]["client.properties"]
    assert set(config.split()) == {
        "security.protocol=SASL_SSL",
        "sasl.mechanism=SCRAM-SHA-512",
        "ssl.ca.location=/etc/fairshare/kafka-ca/ca.crt",
        "ssl.endpoint.identification.algorithm=https",
    }
    # each service's SASL credentials: its own Secret, else the shared one
    for name, deployment in deployments.items():
        [prepare] = deployment["spec"]["template"]["spec"]["initContainers"]
        env = {item["name"]: item["valueFrom"]["secretKeyRef"] for item in prepare["env"]}
        expected = (
            "fairshare-kafka-scheduler" if name == "fairshare-scheduler" else "fairshare-kafka"
        )
        assert env["KAFKA_SASL_PASSWORD"] == {"name": expected, "key": "password"}
        assert deployment["spec"]["template"]["spec"]["containers"][0]["image"] == (
            "ghcr.io/fairshare/fairshare@sha256:" + "a" * 64
        )
    agent = deployments["fairshare-agent"]["spec"]["template"]["spec"]["containers"][0]["command"]
    assert "--cordon-in-kubernetes" in agent
    assert agent[agent.index("--foreign-gpu-policy") + 1] == "evict"
    [monitor] = _by_kind(objects, "ServiceMonitor").values()
    assert monitor["metadata"]["labels"]["release"] == "prometheus"
    assert {endpoint["port"] for endpoint in monitor["spec"]["endpoints"]} == {"metrics", "http"}
    # the Services it selects carry the ports it names
    selected = {
        name
        for name, service in _by_kind(objects, "Service").items()
        if service["metadata"]["labels"]["app.kubernetes.io/component"] in {"metrics", "api"}
    }
    assert selected == {"fairshare-api", "fairshare-metrics"}


def test_a_service_monitor_only_when_asked_and_possible(helm: list[str], tmp_path: Path) -> None:
    # off (the default): none, even where the cluster has the API
    objects = render(helm, tmp_path, api_versions=(SERVICE_MONITOR_API,))
    assert not _by_kind(objects, "ServiceMonitor")
    # on, where the cluster has the API: one
    on = {"serviceMonitor": {"enabled": True}}
    objects = render(helm, tmp_path, on, api_versions=(SERVICE_MONITOR_API,))
    assert len(_by_kind(objects, "ServiceMonitor")) == 1
    # on, where it has not: the install fails and says why (not a silent omission)
    args = ["template", "fairshare", str(CHART), "--values", str(_values_file(tmp_path, on))]
    result = run_helm(helm, *args, tmp=tmp_path)
    assert result.returncode != 0
    assert "monitoring.coreos.com/v1" in result.stderr, result.stderr


def test_the_init_step_writes_owner_only_files_the_services_read(
    helm: list[str], tmp_path: Path
) -> None:
    """The init container's script, run here with its paths moved into ``tmp_path``: the Kafka
    properties (the ConfigMap's and the SASL credentials, a password with ``=``, ``:`` and a
    space kept whole) and the keys copied out of a group-readable Secret volume, each 0600, as
    the services ask of a key file (``services.bus.signing.load_key``)."""
    from events.signing import Signer
    from services.bus.connection import read_properties
    from services.bus.signing import load_key, write_key

    objects = render(helm, tmp_path, OPTIONAL, api_versions=(SERVICE_MONITOR_API,))
    api = _by_kind(objects, "Deployment")["fairshare-api"]["spec"]["template"]["spec"]
    [prepare] = api["initContainers"]
    assert prepare["command"][:2] == ["sh", "-ec"]
    pod = tmp_path / "pod"
    (pod / "run").mkdir(parents=True)
    (pod / "etc" / "kafka").mkdir(parents=True)
    secrets = pod / "etc" / "secrets"
    secrets.mkdir()
    config = _by_kind(objects, "ConfigMap")["fairshare-kafka"]["data"]["client.properties"]
    (pod / "etc" / "kafka" / "client.properties").write_text(config, encoding="utf-8")
    write_key(secrets / "signing.key", Signer.generate())
    for name in ("signing.key", "tls.crt", "tls.key"):
        (secrets / name).touch()
        (secrets / name).chmod(0o440)  # a Secret volume's files under fsGroup
    script = prepare["command"][2].replace("/run/fairshare", str(pod / "run"))
    script = script.replace("/etc/fairshare", str(pod / "etc"))
    password = "p=a:ss w#rd"
    env = {"PATH": os.environ["PATH"], "KAFKA_SASL_USERNAME": "api"}
    env["KAFKA_SASL_PASSWORD"] = password
    subprocess.run(["sh", "-ec", script], env=env, check=True, timeout=30)

    made = {path.name: path.stat().st_mode & 0o777 for path in (pod / "run").iterdir()}
    assert made == dict.fromkeys(["kafka.properties", "signing.key", "tls.crt", "tls.key"], 0o600)
    settings = read_properties(pod / "run" / "kafka.properties")
    assert settings["sasl.username"] == "api"
    assert settings["sasl.password"] == password
    assert settings["security.protocol"] == "SASL_SSL"
    load_key(pod / "run" / "signing.key")  # refused if others could read it


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"kafka": {"securityProtocol": "SASL_SSL"}}, "kafka.sasl"),
        ({"api": {"tokens": {"existingSecret": ""}}}, "tokens"),
        ({"scheduler": {"extraArgs": ["--sole"]}}, "--sole"),
        ({"kafka": {"properties": {"bootstrap.servers": "x:1"}}}, "bootstrap.servers"),
        ({"agent": {"foreignGpuPolicy": "delete-all"}}, "foreignGpuPolicy"),
        ({"kafka": {"bootstrap": "no-port"}}, "bootstrap"),
    ],
)
def test_wrong_values_are_refused(
    helm: list[str], tmp_path: Path, values: dict[str, Any], message: str
) -> None:
    args = ["template", "fairshare", str(CHART), "--values", str(_values_file(tmp_path, values))]
    result = run_helm(helm, *args, tmp=tmp_path)
    assert result.returncode != 0, result.stdout
    assert message in result.stderr, result.stderr


# -- the command lines against the real CLI ------------------------------------------------------


_PARSE = """
import json, sys
import typer
from services.cli import app

root = typer.main.get_command(app)
for argv in json.loads(sys.argv[1]):
    assert argv[0] == "fairshare", argv
    # (typer's own copy of click: a group's context keeps its subcommand in _protected_args)
    with root.make_context("fairshare", list(argv[1:])) as ctx:
        rest = [*getattr(ctx, "_protected_args", []), *ctx.args]
        command, path = root, ["fairshare"]
        while hasattr(command, "commands"):  # a group: the next word is a command of it
            assert rest, f"{argv}: no subcommand after {' '.join(path)}"
            name, rest = rest[0], rest[1:]
            found = command.get_command(ctx, name)
            assert found is not None, f"{argv}: no command {name!r} in {' '.join(path)}"
            command, path = found, [*path, name]
        # parses, converts and range-checks every option (and runs their callbacks, which
        # read the files they name); a usage error raises
        command.make_context(" ".join(path), list(rest), parent=ctx)
    print("parsed:", " ".join(path))
"""


def check_commands(commands: list[list[str]], tmp: Path) -> str:
    """Each command line parses as ``fairshare`` parses it: the root's options, the
    subcommands, then the command's own options, each known and of its type (nothing is run).
    In a process of its own (option callbacks set environment variables); the files the pods
    would have (under /run/fairshare, /etc/fairshare) are stand-ins in ``tmp``."""
    files = tmp / "pod-files"
    files.mkdir(exist_ok=True)
    local: list[list[str]] = []
    for command in commands:
        words = []
        for word in command:
            if word.startswith(("/run/fairshare/", "/etc/fairshare/")):
                stand_in = files / Path(word).name
                if stand_in.suffix == ".properties":
                    stand_in.write_text("security.protocol=PLAINTEXT\n", encoding="utf-8")
                else:
                    stand_in.touch()
                word = str(stand_in)
            words.append(word)
        local.append(words)
    env = {k: v for k, v in os.environ.items() if not k.startswith("FAIRSHARE_")}
    result = subprocess.run(
        [sys.executable, "-c", _PARSE, json.dumps(local)],
        capture_output=True,
        text=True,
        cwd=REPO,
        env=env,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout


@pytest.mark.parametrize("optional", [False, True], ids=["defaults", "optional-parts-on"])
def test_every_command_line_parses_with_the_real_cli(
    helm: list[str], tmp_path: Path, optional: bool
) -> None:
    values = OPTIONAL if optional else {}
    objects = render(helm, tmp_path, values, api_versions=(SERVICE_MONITOR_API,))
    commands = [
        container["command"]
        for deployment in _by_kind(objects, "Deployment").values()
        for container in deployment["spec"]["template"]["spec"]["containers"]
    ]
    assert len(commands) == 5
    parsed = check_commands(commands, tmp_path).splitlines()
    assert sorted(parsed) == [
        "parsed: fairshare agent kubernetes",
        "parsed: fairshare api serve",
        "parsed: fairshare charging",
        "parsed: fairshare projector",
        "parsed: fairshare scheduler",
    ]


# -- the agent's RBAC: deploy/kubernetes/agent.yaml's ---------------------------------------------


def _grants(role: dict[str, Any]) -> set[tuple[tuple[str, str], str]]:
    """((API group, resource), verb) pairs, refusing wildcards, URLs and resource names."""
    grants: set[tuple[tuple[str, str], str]] = set()
    for rule in role.get("rules", []):
        assert set(rule) <= {"apiGroups", "resources", "verbs"}, rule
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                assert "*" not in (group, resource, *rule["verbs"]), rule
                grants.update(((group, resource), verb) for verb in rule["verbs"])
    return grants


def _chart_rbac(objects: list[dict[str, Any]]) -> tuple[set[Any], set[Any]]:
    """The grants of the chart's one ClusterRole and one Role, checked to be bound to the
    agent's service account, which its Deployment runs as."""
    [cluster_role] = _by_kind(objects, "ClusterRole").values()
    [role] = _by_kind(objects, "Role").values()
    [account] = _by_kind(objects, "ServiceAccount").values()
    subject = {
        "kind": "ServiceAccount",
        "name": account["metadata"]["name"],
        "namespace": account["metadata"]["namespace"],
    }
    [binding] = _by_kind(objects, "ClusterRoleBinding").values()
    assert binding["roleRef"]["name"] == cluster_role["metadata"]["name"]
    assert binding["roleRef"]["kind"] == "ClusterRole"
    assert binding["subjects"] == [subject]
    [runs_binding] = _by_kind(objects, "RoleBinding").values()
    assert runs_binding["roleRef"]["name"] == role["metadata"]["name"]
    assert runs_binding["roleRef"]["kind"] == "Role"
    assert runs_binding["subjects"] == [subject]
    assert runs_binding["metadata"]["namespace"] == role["metadata"]["namespace"]
    agent = _by_kind(objects, "Deployment")["fairshare-agent"]["spec"]["template"]["spec"]
    assert agent["serviceAccountName"] == account["metadata"]["name"]
    command = agent["containers"][0]["command"]
    # the Role is where the agent creates pods
    assert command[command.index("--namespace") + 1] == role["metadata"]["namespace"]
    # no other service runs as an account (nor with its token)
    for name, deployment in _by_kind(objects, "Deployment").items():
        if name != "fairshare-agent":
            pod = deployment["spec"]["template"]["spec"]
            assert "serviceAccountName" not in pod
            assert pod["automountServiceAccountToken"] is False
    return _grants(cluster_role), _grants(role)


def test_the_agents_rbac_is_the_manifests(helm: list[str], tmp_path: Path) -> None:
    manifest_cluster = _grants(agent_manifest("ClusterRole", AGENT_CLUSTER_ROLE))
    manifest_runs = _grants(agent_manifest("Role", AGENT_RUNS_ROLE))
    assert CORDON_RULE in manifest_cluster  # (granted there by default, "remove it if unused")

    assert NATIVE_RULES | {DELETE_RULE} <= manifest_cluster

    # every option that needs a permission on: the manifest's rules
    full = {"agent": {"cordonInKubernetes": True, "foreignGpuPolicy": "evict"}}
    cluster, runs = _chart_rbac(render(helm, tmp_path, full))
    assert cluster == manifest_cluster
    assert runs == manifest_runs

    # the defaults (native work on): the manifest's rules without the cordon's
    cluster, runs = _chart_rbac(render(helm, tmp_path))
    assert cluster == manifest_cluster - {CORDON_RULE}
    assert runs == manifest_runs

    # each optional rule with its option only
    cordon = {"agent": {"cordonInKubernetes": True}}
    cluster, _ = _chart_rbac(render(helm, tmp_path, cordon))
    assert cluster == manifest_cluster
    no_native = {"agent": {"schedulerName": ""}}
    cluster, _ = _chart_rbac(render(helm, tmp_path, no_native))
    assert cluster == manifest_cluster - {CORDON_RULE, DELETE_RULE} - NATIVE_RULES
    evict = {"agent": {"schedulerName": "", "foreignGpuPolicy": "evict"}}
    cluster, _ = _chart_rbac(render(helm, tmp_path, evict))
    assert cluster == manifest_cluster - {CORDON_RULE} - NATIVE_RULES


# -- against the API server -----------------------------------------------------------------------


def _has_service_monitors(cluster: KubernetesCluster) -> bool:
    """Whether the API server serves monitoring.coreos.com/v1 ServiceMonitors (the test
    cluster of .ci/start-kubernetes does not: no Prometheus operator, no CRD)."""
    try:
        resources = client.CustomObjectsApi(cluster.api).get_api_resources(
            "monitoring.coreos.com", "v1"
        )
    except ApiException as error:
        if error.status == 404:
            return False
        raise
    return any(resource.kind == "ServiceMonitor" for resource in resources.resources)


@pytest.mark.parametrize("optional", [False, True], ids=["defaults", "optional-parts-on"])
def test_the_api_server_accepts_every_object(
    helm: list[str],
    kubernetes_cluster: KubernetesCluster,
    kube_core: CoreV1Api,
    tmp_path: Path,
    optional: bool,
) -> None:
    """``helm template | kubectl apply --dry-run=server --validate=strict``. A server dry run
    creates nothing, so the release's namespace and the run namespace are scratch namespaces
    that exist for the test (the chart's Namespace object for the runs is applied too: it is
    then "configured"); the release name is unique, so its cluster-wide names are too. The
    ServiceMonitor is applied only where the cluster has the Prometheus operator's API (the test
    cluster has not)."""
    release = unique_name("fs")
    with (
        scratch_namespace(kube_core, "fs-helm") as namespace,
        scratch_namespace(kube_core, "fs-helm-runs") as runs,
    ):
        # the ServiceMonitor only where the cluster has the Prometheus operator's API
        monitoring = _has_service_monitors(kubernetes_cluster)
        values = (
            _deep_merge(OPTIONAL, {"serviceMonitor": {"enabled": monitoring}}) if optional else {}
        )
        values = _deep_merge(values, {"agent": {"runNamespace": {"name": runs}}})
        objects = render(
            helm,
            tmp_path,
            values,
            release=release,
            namespace=namespace,
            api_versions=(SERVICE_MONITOR_API,) if monitoring else (),
            kube_version=kubernetes_cluster.version,
        )
        rendered = tmp_path / "rendered.yaml"
        rendered.write_text(yaml.safe_dump_all(objects, sort_keys=False), encoding="utf-8")
        server_dry_run(kubernetes_cluster, rendered, objects, tmp_path)
    kinds = {obj["kind"] for obj in objects}
    assert {"Deployment", "Service", "ClusterRole", "Role", "ConfigMap", "Namespace"} <= kinds
