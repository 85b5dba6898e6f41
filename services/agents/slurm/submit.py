"""A Fairshare run as an ``sbatch`` call: its argv and its batch script. Pure.

The ids and the spec come from submitters, so nothing here goes through a shell on the agent's
side: ``sbatch`` gets an argv list, and the script on its standard input. On the node the
script is run by ``/bin/sh``, so every value in it is quoted (:func:`shlex.quote`), and the
workload's command is ``exec``-ed, so Slurm's signals reach it and its exit status is the
job's.

The job is pinned to the placement Fairshare decided: ``--nodelist`` with ``--nodes`` and the
GPU count per node (``--gres=gpu:N``; a gang spread unevenly over nodes asks ``--gpus=TOTAL``
and lets Slurm split it). ``--no-requeue``: Slurm never runs it again by itself, Fairshare
requeues. ``--export=NIL``: the job does not inherit the agent's environment (its Kafka
credentials, its tokens); Slurm gives it the user's login environment, then the script adds the
spec's ``env`` and the run's own variables (``FAIRSHARE_WORKLOAD_ID``, ``FAIRSHARE_ATTEMPT``, an
array element's ``FAIRSHARE_ARRAY_*``: :func:`~services.agents.adapter.run_environment`).
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Sequence
from dataclasses import dataclass

from services.agents.adapter import RUN_ENVIRONMENT, RunRequest, run_environment, run_label
from services.agents.run_as import UnixIdentity
from services.agents.slurm.parse import RunTag, job_comment, job_name

_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
#: Set by the agent; a spec may not override them.
RESERVED_ENV = RUN_ENVIRONMENT


class SpecError(ValueError):
    """A spec the Slurm agent cannot run: the run fails at once with this message."""


@dataclass(frozen=True)
class SubmitOptions:
    """What the operator decides for every job (the agent's command-line options)."""

    partition: str | None = None
    #: A directory on the nodes for the jobs' output (``<label>-attempt-<N>.log``, the label
    #: being :func:`~services.agents.adapter.run_label`); None: Slurm's default, ``slurm-%j.out``
    #: in the job's working directory.
    output_dir: str | None = None
    #: More ``sbatch`` options (``--account=lab``, ``--cpus-per-gpu=8``); they come before the
    #: agent's own, which win where both set the same thing.
    extra: tuple[str, ...] = ()


@dataclass(frozen=True)
class Submission:
    """One ``sbatch`` call: run ``argv`` with ``script`` on standard input."""

    argv: tuple[str, ...]
    script: str
    name: str


def command_argv(command: object) -> list[str]:
    """The spec's ``command`` as argv: a list of strings as it is, a string through
    ``/bin/sh -c`` (as the local agent does)."""
    if isinstance(command, str) and command.strip():
        return ["/bin/sh", "-c", command]
    if (
        isinstance(command, list | tuple)
        and command
        and all(isinstance(a, str) for a in command)
        and str(command[0])
    ):
        return [str(a) for a in command]
    raise SpecError("spec.command: give an argv list of strings or a shell string")


def _no_nul(what: str, value: str) -> str:
    if "\x00" in value:
        raise SpecError(f"{what}: contains a NUL character")
    return value


def environment(spec_env: object) -> list[tuple[str, str]]:
    """The spec's ``env`` as sorted (name, value) pairs; names must be shell names."""
    if spec_env is None:
        return []
    if not isinstance(spec_env, dict):
        raise SpecError("spec.env: give a mapping of names to values")
    pairs = []
    for key, value in sorted((str(k), v) for k, v in spec_env.items()):
        if not _ENV_NAME.match(key):
            raise SpecError(f"spec.env: {key!r} is not a valid environment variable name")
        if key in RESERVED_ENV:
            raise SpecError(f"spec.env: {key} is set by the agent")
        text = value if isinstance(value, str) else str(value)
        pairs.append((key, _no_nul(f"spec.env.{key}", text)))
    return pairs


def batch_script(run: RunRequest) -> str:
    """The batch script: exports, the working directory, then ``exec`` of the command."""
    argv = [_no_nul("spec.command", arg) for arg in command_argv(run.spec.get("command"))]
    lines = [
        "#!/bin/sh",
        "# Submitted by Fairshare's Slurm agent; the job name says which run this is.",
        *(f"export {key}={shlex.quote(value)}" for key, value in run_environment(run).items()),
    ]
    lines += [
        f"export {key}={shlex.quote(value)}" for key, value in environment(run.spec.get("env"))
    ]
    cwd = run.spec.get("cwd")
    if cwd is not None:
        if not isinstance(cwd, str) or not cwd:
            raise SpecError("spec.cwd: give a directory path")
        # As the job's user, on the node: a directory it may not enter fails the run (126).
        lines.append(f"cd -- {shlex.quote(_no_nul('spec.cwd', cwd))} || exit 126")
    lines.append("exec " + " ".join(shlex.quote(arg) for arg in argv))
    return "\n".join(lines) + "\n"


def gpu_request(placement: Sequence[tuple[str, tuple[int, ...]]]) -> list[str]:
    """``--nodes``, ``--nodelist`` and the GPU count of a placement."""
    if not placement:
        raise SpecError("placement: no node")
    nodes = [node for node, _gpus in placement]
    counts = {len(gpus) for _node, gpus in placement}
    if len(counts) == 1:
        gpus = [f"--gres=gpu:{counts.pop()}"]
    else:
        gpus = [f"--gpus={sum(len(g) for _n, g in placement)}"]
    return [f"--nodes={len(nodes)}", f"--nodelist={','.join(nodes)}", *gpus]


def submission(
    run: RunRequest,
    cluster: str,
    options: SubmitOptions,
    identity: UnixIdentity | None = None,
) -> Submission:
    """The ``sbatch`` call of a run; raises :class:`SpecError` for a spec it cannot run."""
    tag = RunTag(run.workload_id, run.attempt, cluster)
    name = job_name(tag)
    script = batch_script(run)
    argv = ["sbatch", *options.extra, "--parsable", f"--job-name={name}"]
    argv += [f"--comment={job_comment(tag)}", "--no-requeue", "--export=NIL"]
    if options.partition:
        argv.append(f"--partition={options.partition}")
    if options.output_dir:
        path = f"{options.output_dir.rstrip('/')}/{run_label(run.workload_id)}"
        argv.append(f"--output={path}-attempt-{int(run.attempt)}.log")
    if identity is not None:
        argv += [f"--uid={identity.uid}", f"--gid={identity.gid}"]
    argv += gpu_request(run.placement)
    return Submission(tuple(argv), script, name)
