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

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from events.envelope import Envelope
from events.models import (
    EventData,
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
from projections.trust import Distrust
from scheduling.memos import PassMemos
from scheduling.scheduling_pass import PassContext, PassResult, run_pass
from scheduling.settings import with_settings
from services.audit.trust import AuditTrust, Verdicts, describe

Command = PlaceCommand | PreemptCommand

#: What a pass states besides its commands; they belong to the pass, not to its input.
_PASS_FACTS = (WorkloadRequeued, WorkloadLost, NodeDrained, WorkloadPlaced, LedgerCharge)
#: What a pass emits (``PassResult.ordered``): folded in place by the re-run pass.
PASS_OUTPUTS = (
    PlaceCommand,
    PreemptCommand,
    WorkloadRequeued,
    WorkloadLost,
    NodeDrained,
    WorkloadPlaced,
)

#: The rule a problem breaks, as the CLI names it.
Rule = Literal["re-derived", "contract", "victim", "command-id", "usage", "signer"]


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
    #: (each also a ``re-derived`` problem: the pass ranks on those snapshots).
    standings_differ: int = 0

    @property
    def ok(self) -> bool:
        return not self.problems and not self.bad_lines


@dataclass(frozen=True)
class _Pass:
    start: int  # index of its first output in the log
    lines: tuple[int, ...]  # indices of its commands
    pass_id: int


def passes_in(log: Sequence[Envelope[Any]]) -> list[_Pass]:
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


def _dump(command: Command) -> dict[str, Any]:
    return command.model_dump(mode="json")


def compare_commands(
    pass_id: int,
    recorded: Sequence[tuple[int, Command]],
    derived: Sequence[Command],
    check_order: bool = True,
) -> list[Problem]:
    """Recorded against re-derived commands, by command id, field by field (the records'
    budget standings included), then in order (``check_order``: the recorded ones are in the
    order they were decided)."""
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
        elif _dump(expected) != _dump(command):
            problems.append(
                Problem(
                    pass_id,
                    line,
                    "re-derived",
                    f"{_describe(command)} differs from the re-derived {_describe(expected)}"
                    f" in {', '.join(_differing(expected, command))}",
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
    in_order = [c.command_id for _, c in recorded] == [c.command_id for c in derived]
    if check_order and not problems and not in_order:
        problems.append(
            Problem(pass_id, first_line, "re-derived", "the commands are in another order")
        )
    return problems


def _differing(expected: Command, recorded: Command) -> list[str]:
    a, b = _dump(expected), _dump(recorded)
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


def standings_differ(recorded: Sequence[tuple[int, Command]], derived: Sequence[Command]) -> int:
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
        problems += _usage_named(state, pass_id, line, command)
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


def _usage_named(state: LiveState, pass_id: int, line: int, command: Command) -> list[Problem]:
    """A record that names the usage snapshot it ranked on must name the log's latest one for
    its pool before the pass."""
    named = command.decision.usage_as_of
    if named is None:
        return []
    latest = state.usage.get(command.pool)
    if latest is not None and latest.window_end == named:
        return []
    has = "none" if latest is None else f"the one of {latest.window_end.isoformat()}"
    return [
        Problem(
            pass_id,
            line,
            "usage",
            f"{_describe(command)} ranks on the usage snapshot of {named.isoformat()}; the "
            f"latest the log holds for pool {command.pool} before the pass is {has}",
        )
    ]


def audit_decisions(log: Iterable[Envelope[Any] | BadLine]) -> DecisionAudit:
    """Fold the log pass by pass; at each pass, run it again and compare.

    The pass is re-run the way the live scheduler runs it: on the one folded state, in place,
    with memos kept from pass to pass (``PassMemos``), its decisions folded in as it makes
    them; the log's copies of those decisions are then only noted as seen
    (:meth:`LiveState.record_own`), as the live service notes its own when they come back. So
    an audit costs what the scheduler's passes cost, never a copy of the cluster per pass.
    Where a pass does not check out, the state it folded in place is not the log's: it is
    rebuilt from the log up to that pass, and the log's outputs are folded as any reader
    folds them (rare, and only for a log that breaks a rule).

    Every record's budget standings (usage, ratios, ranks) are compared too: the pass ranks on
    the log's own usage snapshots (:func:`projections.usage_snapshots.usage_to_rank`), so a
    record that ranks on other usage was not decided from this log.
    """
    audit = DecisionAudit()
    envelopes: list[Envelope[Any]] = []
    for item in log:
        if isinstance(item, BadLine):
            audit.bad_lines.append(item)
        else:
            envelopes.append(item)
    audit.events = len(envelopes)
    signers, verdicts = judged(envelopes)
    replay = _Replay(envelopes, verdicts)
    for decided in passes_in(envelopes):
        audit.problems.extend(replay.fold_to(decided.start))
        audit.problems.extend(replay.check(decided, audit))
    audit.problems.extend(replay.fold_to(len(envelopes)))
    audit.problems.extend(signers)
    return audit


def judged(log: Sequence[Envelope[Any]]) -> tuple[list[Problem], Verdicts]:
    """Every record of ``log`` that may not be believed (``services.audit.trust``), by its
    line, and the verdicts for the live states that fold the log: they fold none of these,
    and verify no signature again. A pass's own outputs are only noted as seen by those
    states, so they are judged here, with the rest, once."""
    trust = AuditTrust(log)
    lines: dict[tuple[str, str | None], int] = {}
    verdicts: dict[int, Distrust] = {}
    for line, envelope in enumerate(log, start=1):
        verdict = trust.judge(envelope)
        if verdict is not None:
            verdicts[id(envelope)] = verdict
            lines.setdefault((envelope.id, envelope.signer), line)
    problems = [
        Problem(None, lines.get((refusal.event_id, refusal.signer), 0), "signer", describe(refusal))
        for refusal in trust.refusals
    ]
    return problems, Verdicts(verdicts)


def signer_problems(log: Sequence[Envelope[Any]]) -> list[Problem]:
    """The records of ``log`` not believed, as problems (:func:`judged`)."""
    return judged(log)[0]


class _Replay:
    """The state the log has folded to, and the memos of the passes run on it."""

    def __init__(self, log: Sequence[Envelope[Any]], verdicts: Verdicts) -> None:
        self.log = log
        self.verdicts = verdicts
        self.state = LiveState(trust=verdicts)
        self.memos = PassMemos()
        self.folded = 0

    def fold_to(self, end: int) -> list[Problem]:
        problems = _fold(self.state, self.log, self.folded, end)
        self.folded = max(self.folded, end)
        return problems

    def check(self, decided: _Pass, audit: DecisionAudit) -> list[Problem]:
        log, state = self.log, self.state
        recorded: list[tuple[int, Command]] = [
            (index + 1, log[index].data) for index in decided.lines
        ]
        now = log[decided.lines[0]].time.timestamp()
        problems, result, derived = rerun_pass(state, self.memos, now, recorded, audit)
        end = outputs_end(log, decided)
        stated: list[EventData] = [
            log[i].data for i in range(decided.start, end) if _is_output(log[i].data)
        ]
        mismatch = compare_commands(decided.pass_id, recorded, derived) + compare_facts(
            decided.pass_id, recorded[0][0], stated, result.events
        )
        problems += mismatch
        if mismatch:
            problems += self._rebuild(decided.start, end)
        else:
            for index in range(decided.start, end):
                if _is_output(log[index].data):
                    state.record_own(log[index])
                else:
                    state.apply(log[index])
            self.folded = end
        return problems

    def _rebuild(self, start: int, end: int) -> list[Problem]:
        """The pass folded in place what the log does not hold: start again from the log, and
        fold the pass's outputs as the log states them."""
        self.state = LiveState(trust=self.verdicts)
        for index in range(start):
            self.state.apply(self.log[index])
        self.folded = start
        return self.fold_to(end)


def rerun_pass(
    state: LiveState,
    memos: PassMemos,
    now: float,
    recorded: Sequence[tuple[int, Command]],
    audit: DecisionAudit,
) -> tuple[list[Problem], PassResult, list[Command]]:
    """One pass of the log, counted, checked against the rules that hold whatever the policy,
    and run again in place on ``state`` at ``now``: the problems, its result, its commands."""
    first = recorded[0][1]
    audit.passes += 1
    audit.commands += len(recorded)
    audit.preemptions += sum(isinstance(c, PreemptCommand) for _, c in recorded)
    problems = check_rules(state, first.decision.pass_id, now, recorded)
    context = pass_context(state, now, first)
    result = run_pass(state.cluster, state.tree, state.usage_source(now), context, memos)
    derived = [c for c in result.commands if isinstance(c, PlaceCommand | PreemptCommand)]
    audit.standings_differ += standings_differ(recorded, derived)
    return problems, result, derived


def _is_output(data: object) -> bool:
    return isinstance(data, PASS_OUTPUTS)


def outputs_end(log: Sequence[Envelope[Any]], decided: _Pass) -> int:
    """Just past the pass's last output: its last command, and the facts it states right after
    it at the same instant (a placement's ``WorkloadPlaced`` follows its command)."""
    end = decided.lines[-1] + 1
    at = log[decided.lines[-1]].time
    while end < len(log) and _is_output(log[end].data) and log[end].time == at:
        if isinstance(log[end].data, PlaceCommand | PreemptCommand):
            break
        end += 1
    return end


def compare_facts(
    pass_id: int,
    line: int,
    stated: Sequence[EventData],
    derived: Sequence[EventData],
    in_order: bool = True,
) -> list[Problem]:
    """The facts a pass states (requeues, lost work, drained nodes, placements), field by
    field, and in order where ``stated`` is in the order they were stated (one file; a live
    pass spreads them over several topics, whose relative order no reader sees)."""
    logged = [d for d in stated if not isinstance(d, PlaceCommand | PreemptCommand)]
    theirs_listed, mine_listed = [_fact(d) for d in logged], [_fact(d) for d in derived]
    if in_order and theirs_listed == mine_listed:
        return []
    if not in_order and sorted(theirs_listed) == sorted(mine_listed):
        return []
    theirs, mine = {_fact(d) for d in logged}, {_fact(d) for d in derived}
    parts = [f"the pass states {_name(d)}, which the log lacks" for d in derived]
    parts = [p for p, d in zip(parts, derived, strict=True) if _fact(d) not in theirs][:3]
    parts += [
        f"the log states {_name(d)}, which the pass does not"
        for d in logged
        if _fact(d) not in mine
    ][:3]
    return [Problem(pass_id, line, "re-derived", "; ".join(parts) or "facts in another order")]


def _fact(data: EventData) -> str:
    return f"{type(data).__name__}{data.model_dump_json()}"


def _name(data: EventData) -> str:
    fields = data.model_dump(mode="json")
    named = ", ".join(f"{k}={fields[k]}" for k in ("workload_id", "attempt", "node") if k in fields)
    return f"{type(data).__name__}({named})"


def pass_context(state: LiveState, now: float, first: Command) -> PassContext:
    """The pass's context as its first command and the settings its leader stated give it
    (the defaults where none was stated: a log from before settings were facts)."""
    ctx = PassContext(
        now=now,
        pass_id=first.decision.pass_id,
        input_position=first.decision.input_position,
        epoch=first.epoch,
    )
    return ctx if state.settings is None else with_settings(ctx, state.settings)


def _fold(state: LiveState, log: Sequence[Envelope[Any]], start: int, end: int) -> list[Problem]:
    """Fold ``log[start:end]``, with what :func:`misplaced` finds on the way."""
    problems = []
    for index in range(start, end):
        problem = misplaced(state, log[index], index + 1)
        if problem is not None:
            problems.append(problem)
        state.apply(log[index])
    return problems


def misplaced(state: LiveState, envelope: Envelope[Any], line: int) -> Problem | None:
    """A placement stated without its command: a command was taken out of the log (with the
    whole pass, when it was the pass's only one)."""
    data = envelope.data
    if not isinstance(data, WorkloadPlaced) or data.command_id in state.command_ids:
        return None
    return Problem(
        None,
        line,
        "re-derived",
        f"{data.workload_id} (attempt {data.attempt}) placed by {data.command_id}, "
        "which the log lacks",
    )
