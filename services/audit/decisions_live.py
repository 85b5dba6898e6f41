"""The decision audit of a live log: the passes of the running schedulers, re-derived from the
records they had read.

A live scheduler decides from what its follower has handed out, and every command names that
cut (``DecisionRecord.input_position``: per partition, the next offset it had not read). It also
goes on from its own decisions before they come back to it from the log (it folds a pass's
outputs as it makes them). So the state a pass was decided on is the fold of

* every record below the cut its commands name,
* every output of a scheduler stated before the pass (its own earlier passes, a deposed or
  killed leader's passes that the new one read at its catch-up, passes that stated facts and no
  command), and
* the liveness facts (``NodeDown``, ``NodeUp``) the leader stated at the pass's instant, just
  before running it;

folded in event-time order, as the follower merges. That is what this module folds, pass by
pass, before re-running the pass with :mod:`services.audit.decisions`' checks: in place, with
memos kept, as the leader ran it; a failover is nothing special (the new leader's first pass
names a cut past the old one's outputs).

One pass is allowed to be cut short: the last one an epoch published, when its leader was
killed while publishing it. Its records must then all be what the pass decides (a prefix of it
per partition is what a kill leaves); what it lacks is counted in ``cut_short``, not reported.
The state is then rebuilt from the log, as the next leader rebuilt it.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from events.envelope import Envelope
from events.models import (
    EventData,
    NodeDown,
    NodeUp,
    PlaceCommand,
    PreemptCommand,
    SchedulerSettings,
)
from events.positions import Delivery, TopicPartition
from projections.live_state import LiveState
from scheduling.memos import PassMemos
from scheduling.scheduling_pass import SOURCE
from services.audit.decisions import (
    Command,
    DecisionAudit,
    compare_commands,
    compare_facts,
    judged,
    misplaced,
    rerun_pass,
)
from services.audit.trust import Verdicts

#: What a leader states at a pass's instant before running it: the liveness of nodes, and its
#: settings (before its first pass of an epoch). Inputs of the pass, not its outputs.
_BEFORE = (NodeDown, NodeUp, SchedulerSettings)


@dataclass
class LiveDecisionAudit(DecisionAudit):
    #: Passes whose leader was killed while publishing them (their records a part of them).
    cut_short: int = 0
    #: Passes before the audit's ``since``, folded as stated, not re-derived.
    not_checked: int = 0


@dataclass(frozen=True)
class _LivePass:
    at: datetime
    commands: tuple[int, ...]  # indices, in the order they lie in their partitions
    outputs: tuple[int, ...]  # its other outputs (not liveness)
    liveness: tuple[int, ...]
    epoch: int


def audit_live_decisions(
    deliveries: Sequence[Delivery], since: datetime | None = None
) -> LiveDecisionAudit:
    """Every pass of the schedulers' outputs in ``deliveries`` (the whole log, with positions,
    as :func:`services.bench.chaos.checks.read_log` reads it) re-derived and checked; with
    ``since``, only the passes from then on (the earlier ones are folded as the facts they
    stated: a history written by a generator, not decided by this policy)."""
    audit = LiveDecisionAudit(events=len(deliveries))
    log = _MergedLog(deliveries)
    signers, log.verdicts = judged([delivery.envelope for delivery in log.deliveries])
    log.state = LiveState(trust=log.verdicts)
    passes = log.passes()
    last_of_epoch = {p.epoch: p.at for p in passes}
    for decided in passes:
        log.fold(log.inputs_of(decided), audit)
        if since is not None and decided.at < since:
            audit.not_checked += 1  # its outputs are folded as inputs of the next pass
            continue
        _check(log, decided, decided.at == last_of_epoch[decided.epoch], audit)
    audit.problems += signers
    return audit


class _MergedLog:
    """The log in the follower's merge order, what of it is folded, and the state."""

    def __init__(self, deliveries: Sequence[Delivery]) -> None:
        order = sorted(
            range(len(deliveries)),
            key=lambda i: (
                deliveries[i].envelope.time,
                deliveries[i].position.topic,
                deliveries[i].position.partition,
                deliveries[i].position.offset,
            ),
        )
        self.deliveries = [deliveries[i] for i in order]
        self.folded = [False] * len(order)
        self.by_partition: dict[TopicPartition, list[int]] = defaultdict(list)
        self.outputs_at: dict[datetime, list[int]] = defaultdict(list)
        for index, delivery in enumerate(self.deliveries):
            position = delivery.position
            self.by_partition[(position.topic, position.partition)].append(index)
            if delivery.envelope.source == SOURCE:
                self.outputs_at[delivery.envelope.time].append(index)
        for indices in self.by_partition.values():
            indices.sort(key=lambda i: self.deliveries[i].position.offset)
        self.read_to: dict[TopicPartition, int] = dict.fromkeys(self.by_partition, 0)
        self.output_times = sorted(self.outputs_at)
        self.outputs_folded_to = 0  # how many of output_times are folded
        #: What the audit believes of each record (judged once: ``services.audit.trust``).
        self.verdicts = Verdicts({})
        self.state = LiveState(trust=self.verdicts)
        self.memos = PassMemos()

    def envelope(self, index: int) -> Envelope[EventData]:
        return self.deliveries[index].envelope

    def command(self, index: int) -> Command:
        data = self.envelope(index).data
        if not isinstance(data, PlaceCommand | PreemptCommand):
            raise TypeError(f"record {index + 1} is not a command")
        return data

    def passes(self) -> list[_LivePass]:
        found = []
        for at in self.output_times:
            group = sorted(self.outputs_at[at], key=self._position)
            commands = tuple(i for i in group if _is_command(self.envelope(i).data))
            if not commands:
                continue  # a pass that stated facts only: folded as an input of the next
            liveness = tuple(i for i in group if isinstance(self.envelope(i).data, _BEFORE))
            outputs = tuple(i for i in group if i not in commands and i not in liveness)
            epoch = self.command(commands[0]).epoch
            found.append(_LivePass(at, commands, outputs, liveness, epoch))
        return found

    def _position(self, index: int) -> tuple[str, int, int]:
        position = self.deliveries[index].position
        return (position.topic, position.partition, position.offset)

    def inputs_of(self, decided: _LivePass) -> list[int]:
        """What the pass was decided on and is not folded yet, in merge order."""
        first = self.command(decided.commands[0])
        cut = {(p.topic, p.partition): p.offset for p in first.decision.input_position}
        todo: list[int] = []
        for key, indices in self.by_partition.items():
            start = self.read_to[key]
            end = start
            while end < len(indices) and self.deliveries[indices[end]].position.offset < cut.get(
                key, 0
            ):
                end += 1
            todo += indices[start:end]
            self.read_to[key] = max(start, end)
        while (
            self.outputs_folded_to < len(self.output_times)
            and self.output_times[self.outputs_folded_to] < decided.at
        ):
            todo += self.outputs_at[self.output_times[self.outputs_folded_to]]
            self.outputs_folded_to += 1
        todo += decided.liveness
        return sorted({i for i in todo if not self.folded[i]})

    def fold(self, indices: Sequence[int], audit: DecisionAudit) -> None:
        for index in indices:
            envelope = self.envelope(index)
            problem = misplaced(self.state, envelope, index + 1)
            if problem is not None:
                audit.problems.append(problem)
            self.state.apply(envelope)
            self.folded[index] = True

    def rebuild(self, also: Sequence[int]) -> None:
        """Start again from the log: everything folded so far, and ``also``, as a reader folds
        them (the state a pass left in place is not what the log holds)."""
        for index in also:
            self.folded[index] = True
        self.state = LiveState(trust=self.verdicts)
        for index, done in enumerate(self.folded):
            if done:
                self.state.apply(self.envelope(index))


def _is_command(data: object) -> bool:
    return isinstance(data, PlaceCommand | PreemptCommand)


def _check(log: _MergedLog, decided: _LivePass, last: bool, audit: LiveDecisionAudit) -> None:
    state = log.state
    recorded: list[tuple[int, Command]] = [(i + 1, log.command(i)) for i in decided.commands]
    first = recorded[0][1]
    problems, result, derived = rerun_pass(
        state, log.memos, decided.at.timestamp(), recorded, audit
    )
    audit.problems += problems
    partitions = {log.deliveries[i].position.partition for i in decided.commands}
    stated = [log.envelope(i).data for i in decided.outputs]
    line = recorded[0][0]
    mismatch = compare_commands(first.decision.pass_id, recorded, derived, len(partitions) == 1)
    mismatch += compare_facts(first.decision.pass_id, line, stated, result.events, False)
    outputs = [*decided.commands, *decided.outputs]
    if not mismatch:
        for index in outputs:
            state.record_own(log.envelope(index))
            log.folded[index] = True
        return
    if last and _a_part_of(recorded, derived, stated, result.events):
        audit.cut_short += 1
    else:
        audit.problems += mismatch
    log.rebuild(outputs)


def _a_part_of(
    recorded: Sequence[tuple[int, Command]],
    derived: Sequence[Command],
    stated: Sequence[EventData],
    facts: Sequence[EventData],
) -> bool:
    """Whether every recorded output is one the pass decides, as it decides it."""
    mine = {c.command_id: c.model_dump(mode="json") for c in derived}
    if any(mine.get(c.command_id) != c.model_dump(mode="json") for _, c in recorded):
        return False
    derived_facts = {f"{type(f).__name__}{f.model_dump_json()}" for f in facts}
    return all(f"{type(f).__name__}{f.model_dump_json()}" in derived_facts for f in stated)
