"""This machine as a one-node cluster: each workload's ``spec["command"]`` really runs.

``command`` is an argv list, or a string run with ``/bin/sh -c``; ``env`` (a mapping) is added
to the agent's environment, ``cwd`` sets the working directory, and ``CUDA_VISIBLE_DEVICES`` is
set to the run's GPU indices (comma-separated), with the ``FAIRSHARE_*`` variables every
adapter sets (:func:`~services.agents.adapter.run_environment`: an array element's index too).
Each run is its own process group, so a stop reaches the shell and its children: SIGTERM, then
SIGKILL once the grace period is over. An exit status of 0 is success; death by signal N is
reported as exit code 128 + N.

GPU readings come from NVML (:mod:`services.agents.local.nvml`) when a driver is present; if
NVML cannot start, the node has ``virtual_gpus`` slots that read 0 % and 0 bytes. Processes of
a previous incarnation of the agent cannot be recovered: :meth:`LocalAdapter.adopt` says so,
and the agent reports them lost (resumable ones are requeued by the scheduler).

Workload ids come from whoever may submit, so none of them is ever used as a path: a run's
output goes to ``<log_dir>/<label>/attempt-<N>.log``, where the label is a SHA-256 of the id
(:func:`~services.agents.adapter.run_label`), and the directory is checked to be a child of
``log_dir`` before anything is written. With ``run_as`` (:mod:`services.agents.run_as`) each
command runs as its submitter's unix user, in a scrubbed environment; see ``docs/agents.md``
for the trust model.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import socket
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from services.agents.adapter import (
    GpuSample,
    NodeSpec,
    RunEnded,
    RunRequest,
    run_environment,
    run_label,
)
from services.agents.local.nvml import GpuProbe, open_nvml
from services.agents.run_as import RunAs, UnixIdentity, submitter_of

log = logging.getLogger(__name__)


@dataclass
class _Process:
    request: RunRequest
    popen: subprocess.Popen[bytes]
    output: IO[bytes] | None
    kill_at: float | None = None
    killed: bool = False


def _argv(command: object) -> list[str] | None:
    if isinstance(command, str) and command.strip():
        return ["/bin/sh", "-c", command]
    if isinstance(command, list | tuple) and command and all(isinstance(a, str) for a in command):
        return [str(a) for a in command]
    return None


#: Runs as another user change directory as that user, not as the agent: a ``cwd`` the user may
#: not enter must fail, where a ``chdir`` done by root before dropping privileges would succeed.
_CD_THEN_EXEC = 'cd -- "$1" || exit 126; shift; exec "$@"'


class LogPathError(RuntimeError):
    """A run's log path that would not be a file directly inside the agent's log directory."""


def open_run_log(
    log_dir: Path, run: RunRequest, owner: UnixIdentity | None = None
) -> tuple[IO[bytes], Path]:
    """Open (append) the run's log, ``<log_dir>/<run_label>/attempt-<N>.log``.

    The run directory must resolve to a direct child of ``log_dir`` (a symlink planted there by
    an earlier run is refused), and the file is opened without following a symlink. With an
    ``owner`` (a run as another user) the file is handed to that user, so they can read it.
    """
    root = log_dir.resolve()
    run_dir = root / run_label(run.workload_id)
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
        resolved = run_dir.resolve(strict=True)
    except OSError as error:
        raise LogPathError(f"run directory {str(run_dir)!r}: {error.strerror}") from error
    if resolved.parent != root or not resolved.is_dir():
        raise LogPathError(f"run directory {str(run_dir)!r} is not inside {str(root)!r}")
    path = resolved / f"attempt-{int(run.attempt)}.log"
    flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        fd = os.open(path, flags, 0o640)
    except OSError as error:
        raise LogPathError(f"log {str(path)!r}: {error.strerror}") from error
    if owner is not None and os.geteuid() == 0:
        with contextlib.suppress(OSError):
            os.fchown(fd, owner.uid, owner.gid)
    return os.fdopen(fd, "ab"), path


def _signal_group(pid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, sig)


def _launch(
    run: RunRequest, argv: list[str], identity: UnixIdentity | None, node: str
) -> tuple[list[str], dict[str, str], dict[str, Any]]:
    """The argv, environment and other ``Popen`` options of a run: as the agent, or as
    ``identity`` (its ids and groups, a scrubbed environment, its ``cwd`` entered as itself)."""
    env = identity.environment(os.environ) if identity is not None else dict(os.environ)
    extra = run.spec.get("env")
    if isinstance(extra, dict):
        env.update({str(k): str(v) for k, v in extra.items()})
    env["CUDA_VISIBLE_DEVICES"] = ",".join(str(g) for g in run.gpus_on(node))
    env.update(run_environment(run))
    cwd = run.spec.get("cwd")
    if identity is None:
        return argv, env, {"cwd": cwd if isinstance(cwd, str) else None}
    start_in = _directory(cwd, identity)
    options = {
        "cwd": "/",
        "user": identity.uid,
        "group": identity.gid,
        "extra_groups": list(identity.groups),
    }
    return ["/bin/sh", "-c", _CD_THEN_EXEC, "fairshare-run", start_in, *argv], env, options


def _directory(cwd: object, identity: UnixIdentity) -> str:
    """Where a run as ``identity`` starts: the spec's ``cwd``, else the user's home if it
    exists, else ``/``."""
    if isinstance(cwd, str) and cwd:
        return cwd
    return identity.home if os.path.isdir(identity.home) else "/"


def exit_code_of(returncode: int) -> tuple[int, str]:
    """A shell-style exit code and a message: death by signal N is 128 + N."""
    if returncode >= 0:
        return returncode, f"exited with status {returncode}"
    sig = -returncode
    try:
        name = signal.Signals(sig).name
    except ValueError:
        name = f"signal {sig}"
    return 128 + sig, f"killed by {name}"


class LocalAdapter:
    """A :class:`~services.agents.adapter.ClusterAdapter` running commands on this machine."""

    def __init__(
        self,
        node: str | None = None,
        *,
        virtual_gpus: int = 1,
        gpu_type: str | None = None,
        use_nvml: bool = True,
        nvml: GpuProbe | None = None,
        log_dir: Path | None = None,
        shutdown_grace_s: float = 5.0,
        run_as: RunAs | None = None,
    ) -> None:
        self._nvml: GpuProbe | None = (
            nvml if nvml is not None else (open_nvml() if use_nvml else None)
        )
        if self._nvml is not None:
            gpus = self._nvml.count
            detected_type = self._nvml.gpu_type()
        else:
            if virtual_gpus < 1:
                raise ValueError("virtual_gpus: at least 1 when no NVML GPU is present")
            gpus, detected_type = virtual_gpus, "virtual"
        self.node = node or socket.gethostname().split(".")[0] or "localhost"
        self.virtual = self._nvml is None
        self._spec = NodeSpec(self.node, gpus, gpu_type or detected_type, executor="local")
        self._log_dir = log_dir
        self._run_as = run_as
        self._shutdown_grace_s = shutdown_grace_s
        self._processes: dict[str, _Process] = {}
        self._ended: list[RunEnded] = []

    # -- the adapter -----------------------------------------------------------------------
    def nodes(self) -> Sequence[NodeSpec]:
        return [self._spec]

    def start(self, run: RunRequest) -> None:
        argv = _argv(run.spec.get("command"))
        if argv is None:
            self._fail(run, "spec.command: give an argv list of strings or a shell string")
            return
        identity: UnixIdentity | None = None
        if self._run_as is not None:
            submitter = submitter_of(run)
            identity = self._run_as.identity_for(submitter)
            if identity is None:
                self._fail(run, f"refused: submitter {submitter!r} has no unix user in --run-as")
                return
        argv, env, options = _launch(run, argv, identity, self.node)
        output: IO[bytes] | None = None
        log_path: Path | None = None
        try:
            if self._log_dir is not None:
                output, log_path = open_run_log(self._log_dir, run, identity)
            popen = subprocess.Popen(
                argv,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=output if output is not None else subprocess.DEVNULL,
                stderr=subprocess.STDOUT if output is not None else subprocess.DEVNULL,
                start_new_session=True,
                **options,
            )
        except (OSError, ValueError, LogPathError) as error:  # ValueError: a NUL in env or argv
            if output is not None:
                output.close()
            self._fail(run, f"could not start: {error}")
            return
        self._processes[run.workload_id] = _Process(run, popen, output)
        log.info(
            "process started",
            extra={
                "workload_id": run.workload_id,
                "attempt": run.attempt,
                "pid": popen.pid,
                "user": identity.name if identity is not None else None,
                "log": str(log_path) if log_path is not None else None,
            },
        )

    def _fail(self, run: RunRequest, message: str) -> None:
        """The run ends at once, never having run (reported by the next ``poll_ended``)."""
        self._ended.append(RunEnded(run.workload_id, run.attempt, None, message))

    def adopt(self, run: RunRequest) -> bool:
        return False  # a previous incarnation's processes are not ours to find

    def stop(self, workload_id: str, attempt: int, grace_period_s: float) -> None:
        process = self._processes.get(workload_id)
        if process is None or process.request.attempt != attempt or process.kill_at is not None:
            return
        _signal_group(process.popen.pid, signal.SIGTERM)
        process.kill_at = time.monotonic() + max(0.0, grace_period_s)
        log.info(
            "SIGTERM sent",
            extra={"workload_id": workload_id, "attempt": attempt, "grace_s": grace_period_s},
        )

    def poll_ended(self) -> list[RunEnded]:
        ended, self._ended = self._ended, []
        now = time.monotonic()
        for workload_id, process in sorted(self._processes.items()):
            returncode = process.popen.poll()
            if returncode is None:
                if process.kill_at is not None and now >= process.kill_at and not process.killed:
                    _signal_group(process.popen.pid, signal.SIGKILL)
                    process.killed = True
                    log.info("SIGKILL sent", extra={"workload_id": workload_id})
                continue
            # The main process is gone; leave nothing of its group holding the GPUs.
            _signal_group(process.popen.pid, signal.SIGKILL)
            if process.output is not None:
                process.output.close()
            del self._processes[workload_id]
            code, message = exit_code_of(returncode)
            ended.append(RunEnded(workload_id, process.request.attempt, code, message))
        return ended

    def reachable(self, node: str) -> bool:
        return node == self.node

    def readings(self, node: str) -> Sequence[GpuSample]:
        if node != self.node:
            return []
        if self._nvml is not None:
            samples = []
            for index in range(self._spec.gpus):
                try:
                    samples.append(self._nvml.sample(index))
                except Exception as error:  # a flaky GPU must not stop us
                    log.warning("NVML reading failed", extra={"gpu": index, "reason": str(error)})
                    samples.append(GpuSample(index=index))
            return samples
        return [GpuSample(index=i) for i in range(self._spec.gpus)]

    def close(self) -> None:
        """Stop every process still running (SIGTERM, then SIGKILL after the grace)."""
        for process in self._processes.values():
            _signal_group(process.popen.pid, signal.SIGTERM)
        deadline = time.monotonic() + self._shutdown_grace_s
        for process in self._processes.values():
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.popen.wait(timeout=max(0.0, deadline - time.monotonic()))
            _signal_group(process.popen.pid, signal.SIGKILL)
            process.popen.wait()
            if process.output is not None:
                process.output.close()
        self._processes.clear()
        if self._nvml is not None:
            self._nvml.shutdown()
            self._nvml = None
