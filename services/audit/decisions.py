"""``fairshare audit decisions``: every scheduling pass in a log re-derived and checked.

The scheduler is deterministic (design 3.3), so an auditor does not have to trust its decision
records: folding the log up to where a pass was decided, with the fold the live service uses
(:class:`~projections.live_state.LiveState`), and running the same pure pass at the same instant
must give the very commands the log holds, records included. Any other command was not decided
by these rules from these facts.

Two rules are also checked on their own, outside the pass, because they must hold whatever the
preemption policy becomes (churn control and the debug lane change *which* victims are picked,
never these): no allocated work is preempted for another workload or drained while still
inside its contract, and a preemption names work that is actually on the cluster at that
attempt. The rank rule (a victim past its contract ranks behind the preemptor once the request
is counted; the debug lane's exception) is not restated here: the re-derived pass is the
authority on it, so a victim the policy would not pick fails as a command not re-derived.

Where a pass was decided: in a log written in decision order (``fairshare simulate
--events-out``; one partition read in order), a pass begins at the first of its outputs, the
facts it states just before its first command at the same instant (requeues, lost work,
drained nodes, placements) included; everything before that line is its input. Pure: the caller
reads the file.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from events.envelope import Envelope
from events.models import (
    LedgerCharge,
    NodeDrained,
    PlaceCommand,
    PreemptCommand,
    WorkloadLost,
    WorkloadPlaced,
    WorkloadRequeued,
)
from events.ndjson import BadLine
from projections.live_state import LiveState
from services.scheduler.core.scheduling_pass import PassContext, run_pass

Command = PlaceCommand | PreemptCommand

#: What a pass states besides its commands; they belong to the pass, not to its input.
_PASS_FACTS = (WorkloadRequeued, WorkloadLost, NodeDrained, WorkloadPlaced, LedgerCharge)

#: The rule a problem breaks, as the CLI names it.
Rule = Literal["re-derived", "contract", "victim", "command-id"]


@dataclass(frozen=True)
class Problem:
    pass_id: int | None
    line: int
    rule: Rule
    message: str

    def __str__(self) -> str:
        where = f"pass {self.pass_id}" if self.pass_id is not None else "between passes"
        return f"{where} (line {self.line}): {self.rule}: {self.message}"


@dataclass
class DecisionAudit:
    events: int = 0
    passes: int = 0
    commands: int = 0
    preemptions: int = 0
    problems: list[Problem] = field(default_factory=list)
    bad_lines: list[BadLine] = field(default_factory=list)
    #: Commands whose records rank the budgets with other usage than the log's snapshots give
    #: (not a problem unless the audit compares standings).
    standings_differ: int = 0

    @property
    def ok(self) -> bool:
        return not self.problems and not self.bad_lines


@dataclass(frozen=True)
class _Pass:
    start: int  # index of its first output in the log
    lines: tuple[int, ...]  # indices of its commands
    pass_id: int


def _passes(log: Sequence[Envelope[Any]]) -> list[_Pass]:
    """Commands grouped by the pass that decided them: consecutive commands (other events may
    lie between) with the same pass id."""
    groups: list[list[int]] = []
    last_id: int | None = None
    for index, envelope in enumerate(log):
        data = envelope.data
        if not isinstance(data, PlaceCommand | PreemptCommand):
            continue
        if last_id != data.decision.pass_id or not groups:
            groups.append([])
        groups[-1].append(index)
        last_id = data.decision.pass_id
    passes = []
    floor = 0
    for lines in groups:
        first = lines[0]
        at = log[first].time
        start = first
        while (
            start - 1 >= floor
            and isinstance(log[start - 1].data, _PASS_FACTS)
            and log[start - 1].time == at
        ):
            start -= 1
        floor = lines[-1] + 1
        passes.append(_Pass(start, tuple(lines), log[first].data.decision.pass_id))
    return passes


def _dump(command: Command, standings: bool = True) -> dict[str, Any]:
    dumped = command.model_dump(mode="json")
    if not standings:
        dumped["decision"].pop("budgets", None)
    return dumped


def _compare(
    pass_id: int,
    recorded: Sequence[tuple[int, Command]],
    derived: Sequence[Command],
    standings: bool,
) -> list[Problem]:
    """Recorded against re-derived commands, by command id, then in order; the budgets'
    standings in the records only with ``standings``."""
    problems: list[Problem] = []
    mine = {c.command_id: c for c in derived}
    theirs = {c.command_id: (line, c) for line, c in recorded}
    first_line = recorded[0][0]
    for line, command in recorded:
        expected = mine.get(command.command_id)
        if expected is None:
            problems.append(
                Problem(
                    pass_id,
                    line,
                    "re-derived",
                    f"{_describe(command)} is not what the pass decides from the log",
                )
            )
        elif _dump(expected, standings) != _dump(command, standings):
            problems.append(
                Problem(
                    pass_id,
                    line,
                    "re-derived",
                    f"{_describe(command)} differs from the re-derived {_describe(expected)}"
                    f" in {', '.join(_differing(expected, command, standings))}",
                )
            )
    for command in derived:
        if command.command_id not in theirs:
            problems.append(
                Problem(
                    pass_id,
                    first_line,
                    "re-derived",
                    f"the pass decides {_describe(command)}, which the log lacks",
                )
            )
    if not problems and [c.command_id for _, c in recorded] != [c.command_id for c in derived]:
        problems.append(
            Problem(pass_id, first_line, "re-derived", "the commands are in another order")
        )
    return problems


def _differing(expected: Command, recorded: Command, standings: bool) -> list[str]:
    a, b = _dump(expected, standings), _dump(recorded, standings)
    keys = sorted(key for key in a.keys() | b.keys() if a.get(key) != b.get(key))
    if "decision" in keys:
        decision_a, decision_b = a["decision"], b["decision"]
        keys.remove("decision")
        keys += [
            f"decision.{key}"
            for key in sorted(decision_a.keys() | decision_b.keys())
            if decision_a.get(key) != decision_b.get(key)
        ]
    return keys


def _standings_differ(recorded: Sequence[tuple[int, Command]], derived: Sequence[Command]) -> int:
    mine = {c.command_id: c for c in derived}
    return sum(
        1
        for _, c in recorded
        if c.command_id in mine and c.decision.budgets != mine[c.command_id].decision.budgets
    )


def _describe(command: Command) -> str:
    if isinstance(command, PlaceCommand):
        nodes = ", ".join(f"{p.node}{list(p.gpus)}" for p in command.placement.nodes)
        return f"place {command.workload_id} (attempt {command.attempt}) on {nodes}"
    why: str = command.decision.reason
    if command.decision.preemptor:
        why += f" {command.decision.preemptor}"
    return f"preempt {command.workload_id} (attempt {command.attempt}, {why})"


def check_rules(
    state: LiveState, pass_id: int, now: float, recorded: Sequence[tuple[int, Command]]
) -> list[Problem]:
    """The rules that hold whatever the policy: checked on the state the pass started from."""
    problems: list[Problem] = []
    for line, command in recorded:
        kind = "place" if isinstance(command, PlaceCommand) else "preempt"
        expected_id = f"{kind}:{command.workload_id}:{command.attempt}"
        if command.command_id != expected_id:
            problems.append(
                Problem(
                    pass_id,
                    line,
                    "command-id",
                    f"{command.command_id} names another workload or attempt than "
                    f"{_describe(command)}",
                )
            )
        if not isinstance(command, PreemptCommand):
            continue
        workload = state.cluster.workloads.get(command.workload_id)
        if (
            workload is None
            or workload.attempt != command.attempt
            or not workload.placement
            or workload.status not in ("placed", "running")
        ):
            status = "unknown" if workload is None else f"{workload.status}, at attempt "
            if workload is not None:
                status += str(workload.attempt)
            problems.append(
                Problem(
                    pass_id,
                    line,
                    "victim",
                    f"{_describe(command)}: not on the cluster at that attempt ({status})",
                )
            )
            continue
        if (
            command.decision.reason in ("preempt-for", "drain")
            and workload.allocated
            and not workload.contract_over(now)
        ):
            problems.append(
                Problem(
                    pass_id,
                    line,
                    "contract",
                    f"{_describe(command)}: still inside its contract "
                    f"({workload.ran_s(now):.0f} s run of {workload.min_runtime_s} s)",
                )
            )
    return problems


def audit_decisions(
    log: Iterable[Envelope[Any] | BadLine], standings: bool = False
) -> DecisionAudit:
    """Fold the log pass by pass; before each pass, run it again and compare.

    ``standings``: also require the budgets' usage and ranks in every record to be those the
    log's usage snapshots give. Right for the service's logs, whose pass reads exactly those;
    the simulator's pass reads its own exact usage, which its snapshots only round, so its
    records' standings differ slightly while every command (ids, victims, placements,
    reasons, preemptors) is the same.
    """
    audit = DecisionAudit()
    envelopes: list[Envelope[Any]] = []
    for item in log:
        if isinstance(item, BadLine):
            audit.bad_lines.append(item)
        else:
            envelopes.append(item)
    audit.events = len(envelopes)
    state = LiveState()
    folded = 0
    for decided in _passes(envelopes):
        audit.problems.extend(_fold(state, envelopes, folded, decided.start))
        folded = decided.start
        recorded: list[tuple[int, Command]] = [
            (index + 1, envelopes[index].data) for index in decided.lines
        ]
        first = recorded[0][1]
        now = envelopes[decided.lines[0]].time.timestamp()
        audit.passes += 1
        audit.commands += len(recorded)
        audit.preemptions += sum(isinstance(c, PreemptCommand) for _, c in recorded)
        audit.problems.extend(check_rules(state, decided.pass_id, now, recorded))
        grace = next((c.grace_period_s for _, c in recorded if isinstance(c, PreemptCommand)), 30)
        derived = _rederive(state, now, first, grace)
        audit.standings_differ += _standings_differ(recorded, derived)
        audit.problems.extend(_compare(decided.pass_id, recorded, derived, standings))
    audit.problems.extend(_fold(state, envelopes, folded, len(envelopes)))
    return audit


def _fold(state: LiveState, log: Sequence[Envelope[Any]], start: int, end: int) -> list[Problem]:
    """Fold ``log[start:end]``; a placement stated without its command means a command was
    taken out of the log (with the whole pass, when it was the pass's only one)."""
    problems = []
    for index in range(start, end):
        data = log[index].data
        if isinstance(data, WorkloadPlaced) and data.command_id not in state.command_ids:
            problems.append(
                Problem(
                    None,
                    index + 1,
                    "re-derived",
                    f"{data.workload_id} (attempt {data.attempt}) placed by {data.command_id}, "
                    "which the log lacks",
                )
            )
        state.apply(log[index])
    return problems


def _rederive(state: LiveState, now: float, first: Command, grace: int) -> list[Command]:
    """The pass run again on a copy of the folded state, as the service runs it: the usage
    source reads the cluster the pass is changing (maintenance can end runs before a pool is
    ordered)."""
    ctx = PassContext(
        now=now,
        pass_id=first.decision.pass_id,
        input_position=first.decision.input_position,
        grace_period_s=grace,
        epoch=first.epoch,
    )
    scratch = LiveState(cluster=copy.deepcopy(state.cluster), tree=state.tree, usage=state.usage)
    result = run_pass(scratch.cluster, scratch.tree, scratch.usage_source(now), ctx)
    return [c for c in result.commands if isinstance(c, PlaceCommand | PreemptCommand)]
