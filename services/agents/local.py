"""This machine as a one-node cluster: each workload's ``spec["command"]`` really runs.

``command`` is an argv list, or a string run with ``/bin/sh -c``; ``env`` (a mapping) is added
to the agent's environment, ``cwd`` sets the working directory, and ``CUDA_VISIBLE_DEVICES`` is
set to the run's GPU indices (comma-separated). Each run is its own process group, so a stop
reaches the shell and its children: SIGTERM, then SIGKILL once the grace period is over. An
exit status of 0 is success; death by signal N is reported as exit code 128 + N.

GPU readings come from NVML (``pynvml``, package nvidia-ml-py) when a driver is present; if
NVML cannot start, the node has ``virtual_gpus`` slots that read 0 % and 0 bytes. Processes of
a previous incarnation of the agent cannot be recovered: :meth:`LocalAdapter.adopt` says so,
and the agent reports them lost (resumable ones are requeued by the scheduler).
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
from typing import IO, Any, Protocol

from services.agents.adapter import GpuSample, NodeSpec, RunEnded, RunRequest

log = logging.getLogger(__name__)


class GpuProbe(Protocol):
    """What the local adapter reads GPUs with: NVML, or a stand-in in tests."""

    count: int

    def gpu_type(self) -> str: ...

    def sample(self, index: int) -> GpuSample: ...

    def shutdown(self) -> None: ...


class Nvml:
    """The few NVML calls the agent makes, behind one object (a :class:`GpuProbe`)."""

    def __init__(self) -> None:
        import pynvml  # type: ignore[import-untyped]

        pynvml.nvmlInit()
        self._nvml: Any = pynvml
        self.count: int = int(pynvml.nvmlDeviceGetCount())
        self._handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(self.count)]

    def gpu_type(self) -> str:
        if not self._handles:
            return "none"
        name = self._nvml.nvmlDeviceGetName(self._handles[0])
        text = name.decode() if isinstance(name, bytes) else str(name)
        return "-".join(text.split()) or "gpu"

    def sample(self, index: int) -> GpuSample:
        handle = self._handles[index]
        memory = self._nvml.nvmlDeviceGetMemoryInfo(handle)
        rates = self._nvml.nvmlDeviceGetUtilizationRates(handle)
        total = int(memory.total)
        return GpuSample(
            index=index,
            utilisation_pct=float(min(100, max(0, rates.gpu))),
            memory_used_bytes=min(int(memory.used), total),
            memory_total_bytes=total,
        )

    def shutdown(self) -> None:
        with contextlib.suppress(Exception):  # a library that may be half gone
            self._nvml.nvmlShutdown()


def open_nvml() -> Nvml | None:
    """NVML if a driver answers, else None (never raises: no GPU is a normal case)."""
    try:
        nvml = Nvml()
    except Exception as error:  # pynvml raises many kinds
        log.info("NVML unavailable; using virtual GPU slots", extra={"reason": str(error)})
        return None
    if nvml.count == 0:
        nvml.shutdown()
        return None
    return nvml


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


def _signal_group(pid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, sig)


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
        self._spec = NodeSpec(self.node, gpus, gpu_type or detected_type)
        self._log_dir = log_dir
        self._shutdown_grace_s = shutdown_grace_s
        self._processes: dict[str, _Process] = {}
        self._ended: list[RunEnded] = []

    # -- the adapter -----------------------------------------------------------------------
    def nodes(self) -> Sequence[NodeSpec]:
        return [self._spec]

    def start(self, run: RunRequest) -> None:
        argv = _argv(run.spec.get("command"))
        if argv is None:
            self._ended.append(
                RunEnded(
                    run.workload_id,
                    run.attempt,
                    None,
                    "spec.command: give an argv list of strings or a shell string",
                )
            )
            return
        env = dict(os.environ)
        extra = run.spec.get("env")
        if isinstance(extra, dict):
            env.update({str(k): str(v) for k, v in extra.items()})
        env["CUDA_VISIBLE_DEVICES"] = ",".join(str(g) for g in run.gpus_on(self.node))
        env["FAIRSHARE_WORKLOAD_ID"] = run.workload_id
        env["FAIRSHARE_ATTEMPT"] = str(run.attempt)
        cwd = run.spec.get("cwd")
        output: IO[bytes] | None = None
        if self._log_dir is not None:
            self._log_dir.mkdir(parents=True, exist_ok=True)
            output = open(self._log_dir / f"{run.run_id}.log", "ab")  # noqa: SIM115 - kept open
        try:
            popen = subprocess.Popen(
                argv,
                env=env,
                cwd=cwd if isinstance(cwd, str) else None,
                stdin=subprocess.DEVNULL,
                stdout=output if output is not None else subprocess.DEVNULL,
                stderr=subprocess.STDOUT if output is not None else subprocess.DEVNULL,
                start_new_session=True,
            )
        except OSError as error:
            if output is not None:
                output.close()
            self._ended.append(
                RunEnded(run.workload_id, run.attempt, None, f"could not start: {error}")
            )
            return
        self._processes[run.workload_id] = _Process(run, popen, output)
        log.info(
            "process started",
            extra={"workload_id": run.workload_id, "attempt": run.attempt, "pid": popen.pid},
        )

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
