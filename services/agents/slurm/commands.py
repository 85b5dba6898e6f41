"""The Slurm commands the agent runs, and nothing else: every call is an argv list (never a
shell), with a timeout, and fails as :class:`SlurmError` with Slurm's own message.

:class:`SlurmControl` is what the adapter needs; :class:`SlurmCli` runs the real commands
(``sinfo``, ``squeue``, ``sbatch``, ``scancel``, ``scontrol``), and the unit tests put a fake
Slurm in its place that prints the same formats.
"""

from __future__ import annotations

import logging
import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import Protocol

from services.agents.slurm.parse import NATIVE_SQUEUE_FORMAT, SINFO_FORMAT, SQUEUE_FORMAT

log = logging.getLogger(__name__)

#: How much of the job-completion log is read: its end holds the recent jobs that matter.
COMPLETIONS_TAIL_BYTES = 8 << 20


class SlurmError(RuntimeError):
    """A Slurm command that failed, timed out or could not be run."""


class SlurmControl(Protocol):
    """What the adapter asks of Slurm. Listings return the command's output as text."""

    def list_nodes(self, partition: str | None) -> str: ...

    def list_jobs(self) -> str: ...

    def submit(self, argv: Sequence[str], script: str) -> str: ...

    def signal(self, job_id: str, signal_name: str) -> None: ...

    def cancel(self, job_id: str) -> None: ...

    def set_node_state(self, node: str, state: str, reason: str | None) -> None: ...

    def read_completions(self) -> str | None: ...

    def show_topology(self) -> str: ...


class NativeControl(Protocol):
    """What native work asks of Slurm besides (``native_runs.py``): its jobs on Fairshare's
    partitions, and the verbs that carry out Fairshare's decisions on them."""

    def list_native_jobs(self, partitions: Sequence[str]) -> str: ...

    def update_job(self, job_id: str, fields: Sequence[str]) -> None: ...

    def release(self, job_id: str) -> None: ...

    def requeue_held(self, job_id: str) -> None: ...

    def cancel(self, job_id: str) -> None: ...


class SlurmCli:
    """:class:`SlurmControl` over Slurm's commands on this host (they find slurmctld through
    ``slurm.conf`` or ``SLURM_CONF``, as they do for a person)."""

    def __init__(self, *, timeout_s: float = 15.0, jobcomp_log: Path | None = None) -> None:
        self.timeout_s = timeout_s
        self.jobcomp_log = jobcomp_log

    def _run(self, argv: Sequence[str], stdin: str | None = None) -> str:
        try:
            done = subprocess.run(
                list(argv),
                input=stdin,
                capture_output=True,
                text=True,
                timeout=self.timeout_s,
                check=False,
            )
        except (OSError, subprocess.SubprocessError) as error:
            raise SlurmError(f"{argv[0]}: {error}") from error
        if done.returncode != 0:
            message = (done.stderr or done.stdout).strip().replace("\n", "; ")[:500]
            raise SlurmError(f"{argv[0]} exited {done.returncode}: {message}")
        return done.stdout

    def list_nodes(self, partition: str | None) -> str:
        argv = ["sinfo", "--Node", "--noheader", f"--Format={SINFO_FORMAT}"]
        if partition:
            argv.append(f"--partition={partition}")
        return self._run(argv)

    def list_jobs(self) -> str:
        return self._run(["squeue", "--noheader", "--states=all", f"--Format={SQUEUE_FORMAT}"])

    def submit(self, argv: Sequence[str], script: str) -> str:
        """Run ``sbatch --parsable ...`` with the script on stdin; the new job's id."""
        out = self._run(argv, stdin=script).strip()
        job_id = out.split(";")[0].strip()  # "<id>" or "<id>;<cluster>"
        if not job_id.isdigit():
            raise SlurmError(f"sbatch: unexpected answer {out[:200]!r}")
        return job_id

    def signal(self, job_id: str, signal_name: str) -> None:
        # --full: every process of the batch step, not only its shell (the default for a batch
        # job is the job's steps alone, and a plain sbatch job has none).
        self._run(["scancel", f"--signal={signal_name}", "--full", job_id])

    def cancel(self, job_id: str) -> None:
        self._run(["scancel", job_id])

    # -- native work ------------------------------------------------------------------------
    def list_native_jobs(self, partitions: Sequence[str]) -> str:
        argv = ["squeue", "--noheader", "--states=all", f"--partition={','.join(partitions)}"]
        return self._run([*argv, f"--Format={NATIVE_SQUEUE_FORMAT}"])

    def update_job(self, job_id: str, fields: Sequence[str]) -> None:
        self._run(["scontrol", "update", f"JobId={job_id}", *fields])

    def release(self, job_id: str) -> None:
        self._run(["scontrol", "release", job_id])

    def requeue_held(self, job_id: str) -> None:
        """Requeue the job and hold it (the admin's hold, which its user cannot release):
        same job id, back to pending."""
        self._run(["scontrol", "requeue", job_id])
        self._run(["scontrol", "hold", job_id])

    def set_node_state(self, node: str, state: str, reason: str | None) -> None:
        argv = ["scontrol", "update", f"NodeName={node}", f"State={state}"]
        if reason is not None:
            argv.append(f"Reason={reason}")
        self._run(argv)

    def show_topology(self) -> str:
        """``scontrol show topology``: blocks or switches and their nodes ("" without a
        topology plugin, or when it cannot be read: placement then knows no blocks)."""
        try:
            return self._run(["scontrol", "show", "topology"])
        except SlurmError:
            return ""

    def read_completions(self) -> str | None:
        """The end of the job-completion log (its last :data:`COMPLETIONS_TAIL_BYTES`), None
        without one or when it cannot be read. Read only for a job squeue no longer lists."""
        if self.jobcomp_log is None:
            return None
        try:
            with self.jobcomp_log.open("rb") as file:
                size = file.seek(0, 2)
                file.seek(max(0, size - COMPLETIONS_TAIL_BYTES))
                data = file.read()
        except OSError as error:
            log.warning("cannot read the job-completion log", extra={"reason": str(error)})
            return None
        text = data.decode("utf-8", errors="replace")
        return text if size <= COMPLETIONS_TAIL_BYTES else text.partition("\n")[2]
