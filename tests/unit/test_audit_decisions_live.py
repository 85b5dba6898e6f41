"""The live decision audit (``services/audit/decisions_live.py``) on a simulated log laid out
as a live one: every record on its topic's partition 0 at consecutive offsets, the passes'
outputs carried by the scheduler's source, and every command naming the cut of everything
before its pass (as a follower that had read all of it). The records a pass did not read lie
after the cut, so a pass decided on less than the audit folds would show.

The end-to-end case (a real stack, a leader killed with -9) is tests/e2e/test_audit_failover.py.
"""

from __future__ import annotations

from typing import Any

import pytest

from events import Topics
from events.envelope import Envelope
from events.models import InputPosition, PlaceCommand, PreemptCommand
from events.positions import Delivery, Position
from scheduling.scheduling_pass import SOURCE
from services.audit.decisions import PASS_OUTPUTS, audit_decisions, outputs_end, passes_in
from services.audit.decisions_live import audit_live_decisions
from tests.unit.test_audit_decisions import simulated_log

Log = list[Envelope[Any]]
TOPICS = Topics(prefix="live.")


def as_live(log: Log) -> list[Delivery]:
    """``log`` as a live log: positions, the scheduler's source, cuts in the records."""
    outputs: set[int] = set()
    for decided in passes_in(log):
        for index in range(decided.start, outputs_end(log, decided)):
            if isinstance(log[index].data, PASS_OUTPUTS):
                outputs.add(index)
    offsets: dict[str, int] = {}
    deliveries: list[Delivery] = []
    cut: list[InputPosition] = []
    for index, envelope in enumerate(log):
        topic = TOPICS.name(type(envelope.data).topic)
        if index in outputs and (not deliveries or deliveries[-1].envelope.source != SOURCE):
            cut = [
                InputPosition(topic=t, partition=0, offset=o) for t, o in sorted(offsets.items())
            ]
        data = envelope.data
        if isinstance(data, PlaceCommand | PreemptCommand) and index in outputs:
            decision = data.decision.model_copy(update={"input_position": tuple(cut)})
            data = data.model_copy(update={"decision": decision})
        source = SOURCE if index in outputs else envelope.source
        moved = envelope.model_copy(update={"data": data, "source": source})
        deliveries.append(Delivery(moved, Position(topic, 0, offsets.get(topic, 0))))
        offsets[topic] = offsets.get(topic, 0) + 1
    return deliveries


@pytest.fixture(scope="module")
def log() -> Log:
    return simulated_log(0, 200)


def test_a_simulated_log_laid_out_live_checks_out_pass_for_pass(log: Log) -> None:
    live = audit_live_decisions(as_live(log))
    assert live.problems == []
    assert live.cut_short == 0
    in_file = audit_decisions(log)
    assert (live.passes, live.commands, live.preemptions) == (
        in_file.passes,
        in_file.commands,
        in_file.preemptions,
    )
    assert live.passes > 10
    assert live.preemptions >= 3


def test_a_changed_victim_fails_in_a_live_log(log: Log) -> None:
    deliveries = as_live(log)
    index = next(
        i
        for i, d in enumerate(deliveries)
        if isinstance(d.envelope.data, PreemptCommand)
        and d.envelope.data.decision.reason == "preempt-for"
    )
    command = deliveries[index].envelope.data
    other = next(
        d.envelope.data
        for d in deliveries[:index]
        if isinstance(d.envelope.data, PlaceCommand)
        and d.envelope.data.workload_id != command.workload_id
    )
    forged = command.model_copy(
        update={
            "workload_id": other.workload_id,
            "attempt": other.attempt,
            "command_id": f"preempt:{other.workload_id}:{other.attempt}",
        }
    )
    tampered = deliveries[index].envelope.model_copy(update={"data": forged})
    deliveries[index] = Delivery(tampered, deliveries[index].position)
    rules = {p.rule for p in audit_live_decisions(deliveries).problems}
    assert "re-derived" in rules


def test_a_pass_decided_on_a_cut_that_hides_a_fact_fails(log: Log) -> None:
    """A pass whose records say it had not read the submission of the work it places (its cut
    moved back before it) is not what the pass decides from what it read."""
    deliveries = as_live(log)
    submitted_at = {
        d.envelope.data.workload_id: i
        for i, d in enumerate(deliveries)
        if type(d.envelope.data).__name__ == "WorkloadSubmitted"
    }
    place = next(
        i
        for i, d in enumerate(deliveries)
        if isinstance(d.envelope.data, PlaceCommand)
        and d.envelope.data.attempt == 1
        and i > 50
        and not any(
            isinstance(e.envelope.data, PlaceCommand | PreemptCommand)
            for e in deliveries[submitted_at[d.envelope.data.workload_id] : i]
        )
    )
    command = deliveries[place].envelope.data
    submit = deliveries[submitted_at[command.workload_id]].position
    shortened = tuple(
        p.model_copy(update={"offset": submit.offset}) if p.topic == submit.topic else p
        for p in command.decision.input_position
    )
    decision = command.decision.model_copy(update={"input_position": shortened})
    forged = command.model_copy(update={"decision": decision})
    tampered = deliveries[place].envelope.model_copy(update={"data": forged})
    deliveries[place] = Delivery(tampered, deliveries[place].position)
    assert "re-derived" in {p.rule for p in audit_live_decisions(deliveries).problems}


def test_passes_before_since_are_folded_as_stated_and_the_later_ones_checked(log: Log) -> None:
    """A history written by a generator (``fairshare bench kills``) was not decided by this
    policy: with ``since`` its passes are folded as the facts they stated, and only the passes
    from then on are re-derived. A forged pass before ``since`` is not judged; after, it is."""
    deliveries = as_live(log)
    commands = [i for i, d in enumerate(deliveries) if isinstance(d.envelope.data, PlaceCommand)]
    middle = deliveries[commands[len(commands) // 2]].envelope.time
    clean = audit_live_decisions(deliveries, since=middle)
    assert clean.problems == []
    assert clean.not_checked > 0
    assert 0 < clean.passes < audit_live_decisions(deliveries).passes

    def forge(index: int) -> list[Delivery]:
        changed = list(deliveries)
        command = changed[index].envelope.data
        assert isinstance(command, PlaceCommand)
        reason = command.decision.model_copy(update={"reason": "forged"})
        forged = command.model_copy(update={"decision": reason})
        envelope = changed[index].envelope.model_copy(update={"data": forged})
        changed[index] = Delivery(envelope, changed[index].position)
        return changed

    early, late = commands[1], commands[-2]
    assert audit_live_decisions(forge(early), since=middle).problems == []
    assert audit_live_decisions(forge(late), since=middle).problems != []
