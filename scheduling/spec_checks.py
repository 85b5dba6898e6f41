"""Which specs a pool's executor can run: checked by the API at submit, so that a spec a
pool's cluster cannot run is refused with the reason (422) instead of failing when placed, and
again by the executor's agent when it makes the run (the Kubernetes agent, its pods).

A workload's spec is opaque to the scheduler: each executor reads its own keys and ignores
the others'. Pure: the rule sees only the executor's name and the spec."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

#: Annotations the Kubernetes agent sets itself, which a spec may not: the exact workload id
#: and the gang index on its pods, and the mark of a node it cordoned.
WORKLOAD_ANNOTATION = "fairshare.dev/workload-id"
GANG_ANNOTATION = "fairshare.dev/gang"
#: On a node Fairshare made unschedulable (``--cordon-in-kubernetes``): lifted only by it.
CORDON_ANNOTATION = "fairshare.dev/cordoned-by-fairshare"
_AGENT_ANNOTATIONS = frozenset((WORKLOAD_ANNOTATION, GANG_ANNOTATION, CORDON_ANNOTATION))

_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_QUANTITY = re.compile(r"^(\d+(\.\d+)?|\.\d+)(e[+-]?\d+|[EPTGMK]i|[EPTGMkmun])?$")
_ANNOTATION_NAME = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")
_IMAGE = re.compile(r"^[^\s]{1,512}$")
#: The most bytes of annotations a spec may add (the API server allows 256 KiB in all).
_MAX_ANNOTATION_BYTES = 64 * 1024


#: Executors that run the spec's ``command`` as a process (the local agent, a Slurm batch
#: script): without one there is nothing to run, and the run would fail once placed.
COMMAND_EXECUTORS = frozenset(("local", "slurm"))


def spec_problems(executor: str, spec: Mapping[str, Any]) -> list[str]:
    """Why ``spec`` cannot run on nodes of ``executor`` (empty: it can, or the executor
    checks nothing ahead)."""
    if executor == "kubernetes":
        return pod_spec_problems(spec)
    if executor in COMMAND_EXECUTORS:
        return command_problems(spec)
    if executor == "simulated":
        return simulated_problems(spec)
    return []


def simulated_problems(spec: Mapping[str, Any]) -> list[str]:
    """Why the simulated cluster (``fairshare up``'s demo) cannot play ``spec``: it runs a
    workload for ``duration_s`` seconds, and one with only a command until it is cancelled;
    an empty spec was accepted and "ran" forever, with nothing to say why."""
    duration = spec.get("duration_s")
    if duration is not None:
        if isinstance(duration, bool) or not isinstance(duration, int | float) or duration < 0:
            return ["spec.duration_s: a number of seconds, 0 or more"]
        return []
    if spec.get("command") is None:
        return [
            "spec.duration_s: missing, and no command (the simulated cluster runs a workload "
            "for spec.duration_s seconds; given only a command, until it is cancelled)"
        ]
    return []


def command_problems(spec: Mapping[str, Any]) -> list[str]:
    """Why ``spec`` gives no command a process can run (empty: it gives one): a non-empty
    shell string, or a non-empty list of strings whose first names the program."""
    command = spec.get("command")
    if isinstance(command, str):
        return [] if command.strip() else ["spec.command: empty"]
    if isinstance(command, list) and command and _strings(command) and command[0]:
        return []
    if command is None:
        return ["spec.command: missing (this executor runs a command: a shell string or argv)"]
    return ["spec.command: a shell string or a non-empty list of strings"]


# -- Kubernetes: the keys that make the pod (services.agents.kubernetes.pods) ----------------


def pod_spec_problems(spec: Mapping[str, Any]) -> list[str]:
    """Why ``spec`` cannot make a Kubernetes pod (empty: it can). Each problem names its key."""
    problems: list[str] = []
    image = spec.get("image")
    if image is not None and (not isinstance(image, str) or not _IMAGE.match(image)):
        problems.append("spec.image: a container image name (no spaces, at most 512 characters)")
    command = spec.get("command")
    if command is not None:
        if isinstance(command, str):
            if not command.strip():
                problems.append("spec.command: empty")
        elif not _strings(command) or not command:
            problems.append("spec.command: a string (run by /bin/sh -c) or a list of strings")
    args = spec.get("args")
    if args is not None and not _strings(args):
        problems.append("spec.args: a list of strings")
    env = spec.get("env")
    if env is not None:
        if not isinstance(env, Mapping):
            problems.append("spec.env: an object of names to string values")
        else:
            for name, value in env.items():
                if not _ENV_NAME.match(name):
                    problems.append(f"spec.env.{name}: not an environment variable name")
                elif name.startswith("FAIRSHARE_"):
                    problems.append(f"spec.env.{name}: FAIRSHARE_* names are set by the agent")
                elif not isinstance(value, str):
                    problems.append(f"spec.env.{name}: values are strings")
    for key in ("cpu", "memory"):
        value = spec.get(key)
        if value is not None and quantity(value) is None:
            problems.append(f'spec.{key}: a Kubernetes quantity such as "4", "500m" or "16Gi"')
    annotations = spec.get("annotations")
    if annotations is not None:
        if not isinstance(annotations, Mapping):
            problems.append("spec.annotations: an object of names to string values")
        else:
            size = 0
            for name, value in annotations.items():
                if not annotation_key_ok(name):
                    problems.append(f"spec.annotations.{name}: not a Kubernetes annotation key")
                elif name in _AGENT_ANNOTATIONS:
                    problems.append(f"spec.annotations.{name}: set by the agent")
                elif not isinstance(value, str):
                    problems.append(f"spec.annotations.{name}: values are strings")
                else:
                    size += len(name) + len(value.encode())
            if size > _MAX_ANNOTATION_BYTES:
                problems.append(f"spec.annotations: at most {_MAX_ANNOTATION_BYTES} bytes")
    return problems


def _strings(value: object) -> bool:
    return isinstance(value, list | tuple) and all(isinstance(v, str) for v in value)


def quantity(value: object) -> str | None:
    """``value`` as a Kubernetes quantity string, or None if it is not one (a positive JSON
    number is one too)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return str(value) if value > 0 else None
    if isinstance(value, str) and _QUANTITY.match(value) and re.search(r"[1-9]", value):
        return value
    return None


def annotation_key_ok(key: str) -> bool:
    prefix, _, name = key.rpartition("/")
    if prefix and (len(prefix) > 253 or not _DNS_SUBDOMAIN.match(prefix)):
        return False
    return 0 < len(name) <= 63 and bool(_ANNOTATION_NAME.match(name))
