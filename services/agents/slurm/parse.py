"""What Slurm prints, read into values: pure, so every rule is tested on recorded outputs.

The Slurm agent reads Slurm with two listings per round, each chosen so that no field a Slurm
user controls can shift the others:

* nodes: ``sinfo --Node --noheader --Format=NodeList:|,StateComplete:|,Gres:|,GresUsed:|,
  Timestamp:|,Reason:`` (:data:`SINFO_FORMAT`), the free-text drain reason last;
* jobs: ``squeue --noheader --states=all --Format=JobID:|,State:|,exit_code:|,NodeList:|,
  tres-per-node:|,tres-per-job:|,Reason:|,Name:`` (:data:`SQUEUE_FORMAT`), the job name, free
  text for jobs Fairshare did not submit, last.

The optional job-completion log (``JobCompType=jobcomp/filetxt``) gives the exit code of a job
that has already left slurmctld's memory (``MinJobAge``), for an agent that was away longer.

The Fairshare side of a job is its name, ``<workload>+<attempt>+<cluster>``: ids never contain
``+`` (``events.types.ID_PATTERN``), so the name parses back exactly whatever the ids hold.
"""

from __future__ import annotations

import re
import signal
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass

from events.types import ID_PATTERN, MAX_ID_LENGTH
from services.agents.topology import Topology, valid

#: ``sinfo --Format``: one node per line (``--Node``), ``|`` after each field, reason last.
SINFO_FORMAT = "NodeList:|,StateComplete:|,Gres:|,GresUsed:|,Timestamp:|,Reason:"
#: ``squeue --Format``: one job per line, the job name (free text) last.
SQUEUE_FORMAT = (
    "JobID:|,State:|,exit_code:|,NodeList:|,tres-per-node:|,tres-per-job:|,Reason:|,Name:"
)

#: ``squeue --Format`` of the jobs on Fairshare's partitions (native work,
#: ``services.agents.slurm.native``): the job name (free text) last.
NATIVE_SQUEUE_FORMAT = (
    "JobID:|,State:|,Reason:|,Account:|,UserName:|,Partition:|,TimeLimit:|,MinTime:|,"
    "NumNodes:|,tres-per-node:|,tres-per-job:|,NodeList:|,exit_code:|,Name:"
)

#: The reason the agent gives Slurm when it drains a node Fairshare cordoned: a drain with this
#: prefix is Fairshare's own, and is never read back as a drain decided in Slurm.
FAIRSHARE_REASON_PREFIX = "fairshare:"

_ID = re.compile(ID_PATTERN)
_NAME_SEPARATOR = "+"


class SlurmParseError(ValueError):
    """Output that is not what the agent asked Slurm for (a changed format, a truncated read)."""


# -- host lists ------------------------------------------------------------------------------
_RANGE = re.compile(r"^(\d+)(?:-(\d+))?$")


def expand_hostlist(text: str) -> list[str]:
    """``gpu[01-03,07],cpu5`` as ``["gpu01", "gpu02", "gpu03", "gpu07", "cpu5"]`` (Slurm's
    compressed node lists; zero padding kept). Several bracket groups multiply out."""
    names: list[str] = []
    for item in _split_top_level(text.strip()):
        names.extend(_expand_one(item))
    return names


def _split_top_level(text: str) -> list[str]:
    items, depth, start = [], 0, 0
    for i, char in enumerate(text):
        if char == "[":
            depth += 1
        elif char == "]":
            depth -= 1
            if depth < 0:
                raise SlurmParseError(f"host list {text!r}: unbalanced ']'")
        elif char == "," and depth == 0:
            items.append(text[start:i])
            start = i + 1
    if depth != 0:
        raise SlurmParseError(f"host list {text!r}: unbalanced '['")
    items.append(text[start:])
    return [item for item in items if item]


def _expand_one(item: str) -> list[str]:
    open_at = item.find("[")
    if open_at < 0:
        return [item]
    close_at = item.index("]", open_at)
    prefix, body, rest = item[:open_at], item[open_at + 1 : close_at], item[close_at + 1 :]
    tails = _expand_one(rest) if rest else [""]
    out: list[str] = []
    for part in body.split(","):
        match = _RANGE.match(part)
        if match is None:
            raise SlurmParseError(f"host list {item!r}: bad range {part!r}")
        first, last = match.group(1), match.group(2) or match.group(1)
        width = len(first)
        if int(last) < int(first):
            raise SlurmParseError(f"host list {item!r}: descending range {part!r}")
        for number in range(int(first), int(last) + 1):
            out.extend(f"{prefix}{number:0{width}d}{tail}" for tail in tails)
    return out


# -- GRES --------------------------------------------------------------------------------------
@dataclass(frozen=True)
class GpuGres:
    """The GPUs of one GRES string: how many, and their type when Slurm names one."""

    count: int
    gpu_type: str | None


def parse_gpu_gres(text: str) -> GpuGres:
    """GPUs in a GRES string: ``gpu:8``, ``gpu:h100:4(S:0-1)``, ``gpu:a100:2,gpu:h100:2``,
    ``gpu:2(IDX:0-1)``, ``gres:gpu:2`` / ``gres/gpu:2`` (a job's TRES), ``(null)``, ``N/A``.
    Other kinds of GRES (``nic:1``, ``shard:8``) are not GPUs and count 0."""
    count, types = 0, []
    for item in _split_top_level(text.strip()):
        entry = re.sub(r"\(.*\)$", "", item.strip())
        for prefix in ("gres:", "gres/"):
            if entry.startswith(prefix):
                entry = entry[len(prefix) :]
        parts = entry.split(":")
        if parts[0] != "gpu" or len(parts) < 2:
            continue
        if not parts[-1].isdigit():
            continue  # "gpu:h100" without a count: not an allocation
        count += int(parts[-1])
        if len(parts) >= 3 and parts[1]:
            types.append(parts[1])
    return GpuGres(count, types[0] if len(set(types)) == 1 else None)


# -- nodes -------------------------------------------------------------------------------------
#: Base states (and flags) in which slurmd is not there to run anything: the node is dead or
#: powered off, and the agent leaves it alone (no heartbeats: the scheduler declares it down).
_UNREACHABLE = {
    "down",
    "not_responding",
    "no_respond",
    "future",
    "unknown",
    "inval",
    "power_down",
    "powered_down",
    "powering_down",
    "power_up",
    "powering_up",
    "reboot_issued",
}
#: Flags (and states) under which Slurm starts no new job there: a cordon in Fairshare terms.
_DRAINED = {"drain", "drained", "draining", "fail", "failing", "maint", "reboot_requested"}


@dataclass(frozen=True)
class SlurmNode:
    """One node as ``sinfo`` shows it."""

    name: str
    #: ``StateComplete``: the base state and its flags, ``idle+drain``, ``down+not_responding``.
    state: str
    gpus: int
    gpus_used: int
    gpu_type: str | None
    #: Why it is down or drained (admin text), "" when none.
    reason: str = ""
    #: When the reason was set, as Slurm prints it ("" when unknown).
    reason_time: str = ""

    @property
    def words(self) -> frozenset[str]:
        return frozenset(w for w in self.state.lower().rstrip("*~#!%$@^-").split("+") if w)

    @property
    def unreachable(self) -> bool:
        """Dead, powered off or not responding: nothing can run there now."""
        return bool(self.words & _UNREACHABLE) or self.state.endswith("*")

    @property
    def drained(self) -> bool:
        """Slurm takes no new job there (drain, fail, maintenance): cordoned for Fairshare."""
        return bool(self.words & _DRAINED)

    @property
    def drained_by_fairshare(self) -> bool:
        """Drained by the agent itself (``--drain-in-slurm``), not by a Slurm admin."""
        return self.drained and self.reason.startswith(FAIRSHARE_REASON_PREFIX)


def parse_sinfo(text: str) -> dict[str, SlurmNode]:
    """The nodes of ``sinfo --Node --noheader --Format=<SINFO_FORMAT>``, by name (a node in
    several partitions is listed once per partition: the first line counts)."""
    nodes: dict[str, SlurmNode] = {}
    for line in text.splitlines():
        if not line.strip():
            continue
        fields = line.split("|", 5)
        if len(fields) != 6:
            raise SlurmParseError(f"sinfo: expected 6 fields, got {len(fields)}: {line!r}")
        name, state, gres, used, stamp, reason = (f.strip() for f in fields)
        if name in nodes:
            continue
        total = parse_gpu_gres(gres)
        nodes[name] = SlurmNode(
            name=name,
            state=state,
            gpus=total.count,
            gpus_used=parse_gpu_gres(used).count,
            gpu_type=total.gpu_type,
            reason="" if reason.lower() in ("none", "(null)") else reason,
            reason_time="" if stamp in ("Unknown", "N/A") else stamp,
        )
    return nodes


# -- jobs --------------------------------------------------------------------------------------
#: Job states after which the job holds nothing any more. COMPLETING is not one: its GPUs are
#: still held until its processes are gone.
TERMINAL_STATES = frozenset(
    {
        "BOOT_FAIL",
        "CANCELLED",
        "COMPLETED",
        "DEADLINE",
        "FAILED",
        "NODE_FAIL",
        "OUT_OF_MEMORY",
        "PREEMPTED",
        "REVOKED",
        "SPECIAL_EXIT",
        "TIMEOUT",
    }
)
#: States in which the job waits and holds no node yet.
WAITING_STATES = frozenset({"PENDING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED"})


@dataclass(frozen=True)
class RunTag:
    """Which Fairshare run a Slurm job is: its job name says it."""

    workload_id: str
    attempt: int
    cluster: str


def job_name(tag: RunTag) -> str:
    """``<workload>+<attempt>+<cluster>``: readable in ``squeue`` (the workload first), and
    exact to parse back, since ``+`` is in no id."""
    return _NAME_SEPARATOR.join((tag.workload_id, str(tag.attempt), tag.cluster))


def job_comment(tag: RunTag) -> str:
    """The job's comment, for people and tools reading Slurm (``squeue -O Comment``)."""
    return f"fairshare workload={tag.workload_id} attempt={tag.attempt} cluster={tag.cluster}"


def parse_job_name(name: str) -> RunTag | None:
    """The run a job name stands for, None for a job Fairshare did not name."""
    parts = name.split(_NAME_SEPARATOR)
    if len(parts) != 3:
        return None
    workload_id, attempt, cluster = parts
    if not (attempt.isascii() and attempt.isdigit()) or int(attempt) < 1:
        return None
    for part in (workload_id, cluster):
        if len(part) > MAX_ID_LENGTH or _ID.match(part) is None:
            return None
    return RunTag(workload_id, int(attempt), cluster)


@dataclass(frozen=True)
class SlurmJob:
    """One job as ``squeue --states=all`` shows it (finished ones stay for ``MinJobAge``)."""

    job_id: str
    #: Slurm's state name, ``RUNNING``; a ``+`` flag suffix is dropped.
    state: str
    #: The exit status as waitpid(2) gives it (``exit_code``: 768 is exit 3, 15 is SIGTERM).
    wait_status: int | None
    nodes: tuple[str, ...]
    #: GPUs per node (``--gres=gpu:N``) or per job (``--gpus=N``), 0 when it asked for none.
    gpus_per_node: int
    gpus_per_job: int
    reason: str
    name: str

    @property
    def tag(self) -> RunTag | None:
        return parse_job_name(self.name)

    def submitted_by(self, cluster: str) -> bool:
        """Whether the agent of Fairshare cluster ``cluster`` submitted it (its name says so):
        every other job, of users or of another Fairshare cluster, is foreign to that agent."""
        tag = self.tag
        return tag is not None and tag.cluster == cluster

    @property
    def ended(self) -> bool:
        return self.state in TERMINAL_STATES

    @property
    def waiting(self) -> bool:
        return self.state in WAITING_STATES

    @property
    def holds_nodes(self) -> bool:
        """Running, suspended or completing: its GPUs are taken."""
        return not (self.ended or self.waiting) and bool(self.nodes)

    def gpus_on(self, node: str) -> int:
        """GPUs it holds on ``node``: per node when it asked so; for a per-job count spread
        over several nodes Slurm does not say, so an even share (rounded up) stands in."""
        if node not in self.nodes:
            return 0
        if self.gpus_per_node:
            return self.gpus_per_node
        return -(-self.gpus_per_job // len(self.nodes)) if self.gpus_per_job else 0

    def end(self) -> JobEnd:
        return JobEnd(self.job_id, self.state, *exit_of(self.state, self.wait_status))


def parse_squeue(text: str) -> list[SlurmJob]:
    """The jobs of ``squeue --noheader --states=all --Format=<SQUEUE_FORMAT>``."""
    jobs = []
    for line in text.splitlines():
        if not line.strip():
            continue
        fields = line.split("|", 7)
        if len(fields) != 8:
            raise SlurmParseError(f"squeue: expected 8 fields, got {len(fields)}: {line!r}")
        job_id, state, status, nodelist, per_node, per_job, reason, name = fields
        job_id, state, status = job_id.strip(), state.strip(), status.strip()
        if not job_id or not re.fullmatch(r"[0-9][0-9_+\[\]-]*", job_id):
            raise SlurmParseError(f"squeue: bad job id {job_id!r}")
        nodes = nodelist.strip()
        jobs.append(
            SlurmJob(
                job_id=job_id,
                state=state.split("+")[0].upper(),
                wait_status=int(status) if status.lstrip("-").isdigit() else None,
                nodes=tuple(expand_hostlist(nodes)) if nodes and nodes != "(null)" else (),
                gpus_per_node=parse_gpu_gres(per_node).count,
                gpus_per_job=parse_gpu_gres(per_job).count,
                reason=reason.strip(),
                name=name,
            )
        )
    return jobs


# -- how a job ended ---------------------------------------------------------------------------
@dataclass(frozen=True)
class JobEnd:
    """A finished job: its exit code in shell style, and a sentence for the log."""

    job_id: str
    state: str
    exit_code: int | None
    message: str


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def exit_of(state: str, wait_status: int | None) -> tuple[int | None, str]:
    """The exit code and message of a job in ``state`` with this waitpid(2) status: a normal
    exit N is N; death by signal N is 128 + N (as a shell says); a job that never ran has
    None."""
    if state in ("BOOT_FAIL", "DEADLINE", "REVOKED") or wait_status is None:
        return None, f"Slurm job {state}: it never ran"
    signo, code = wait_status & 0x7F, (wait_status >> 8) & 0xFF
    if signo:
        return 128 + signo, f"Slurm job {state}: killed by {_signal_name(signo)}"
    if state == "CANCELLED" and code == 0:
        return None, "Slurm job CANCELLED before it ran"
    return code, f"Slurm job {state}: exited with status {code}"


def exit_of_pair(state: str, code: int, signo: int) -> tuple[int | None, str]:
    """:func:`exit_of` for the ``code:signal`` pair of the completion log and ``scontrol``."""
    return exit_of(state, (code << 8) | signo)


_JOBCOMP = re.compile(
    r"^JobId=(?P<id>\S+) .*? Name=(?P<name>.*?) JobState=(?P<state>\S+) .*"
    r"ExitCode=(?P<code>\d+):(?P<signal>\d+)\s*$"
)


def parse_jobcomp(text: str) -> dict[str, JobEnd]:
    """Ends of jobs by name in a ``jobcomp/filetxt`` log (one line per finished job; the last
    line of a name wins: a name is one Fairshare run). Lines of another shape are skipped: the
    log is Slurm's, not ours to refuse."""
    ends: dict[str, JobEnd] = {}
    for line in text.splitlines():
        match = _JOBCOMP.match(line)
        if match is None:
            continue
        state = match["state"].split("+")[0].upper()
        code, message = exit_of_pair(state, int(match["code"]), int(match["signal"]))
        ends[match["name"]] = JobEnd(match["id"], state, code, message)
    return ends


# -- what a node holds -------------------------------------------------------------------------
def foreign_gpus(
    node: SlurmNode,
    jobs: Iterable[SlurmJob],
    cluster: str,
    ours: Mapping[str, int] | None = None,
    native: Collection[str] = (),
) -> int:
    """GPUs of ``node`` held by jobs this cluster's agent did not submit (jobs submitted around
    Fairshare, or by another Fairshare cluster's agent): what Slurm says is in use, less what
    this agent's jobs hold there (``ours``: GPUs per job id, known from the placement; otherwise
    what the job asked for). Jobs of ``native`` (the ids of native work, sent to Fairshare's
    partitions and placed by it) are Fairshare's too."""
    mine = 0
    for job in jobs:
        if not (job.submitted_by(cluster) or job.job_id in native) or not job.holds_nodes:
            continue
        if node.name not in job.nodes:
            continue
        known = None if ours is None else ours.get(job.job_id)
        mine += known if known is not None else job.gpus_on(node.name)
    return max(0, node.gpus_used - mine)


def parse_scontrol_topology(text: str) -> Topology:
    """``scontrol show topology`` as node -> (block, ""): a ``BlockName=`` line's nodes, or a
    leaf switch's (``Level=0``) nodes, form a block. A node under two leaf switches (a
    misconfiguration Slurm warns about) keeps the first, in the order listed."""
    found: Topology = {}
    for line in text.splitlines():
        fields = dict(
            token.split("=", 1)
            for token in line.split()
            if "=" in token and not token.startswith("=")
        )
        if "BlockName" in fields:
            block = fields["BlockName"]
        elif "SwitchName" in fields and fields.get("Level", "0") == "0":
            block = fields["SwitchName"]
        else:
            continue
        nodes = fields.get("Nodes", "")
        if not nodes or nodes == "(null)":
            continue
        for node in expand_hostlist(nodes):
            found.setdefault(node, (valid(block), ""))
    return found
