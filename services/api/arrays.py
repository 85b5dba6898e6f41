"""Job arrays in the API's application layer: submit one, read its summary, cancel it whole.

A submission writes one fact (``WorkloadArraySubmitted``): the array is in the log whole or
not at all, and its cost does not grow with its size (10,000 elements are one record, one
flush and one fold). A retry of the same request finds the array and answers it unchanged;
the same id with other content, an id that is a workload's, or elements whose ids are taken,
are refused (409) before anything is written.

A cancel of the whole array is one ``WorkloadCancelled`` per element still pending or
running, published together and flushed once: each lies on its element's partition, where the
scheduler's placement of that element does, so every reader orders the two alike (a fact of
the array's own would race the placements on other partitions). A cancel that fails half-way
is finished by its retry: cancelling a cancelled element changes nothing.
"""

from __future__ import annotations

import time
from collections import Counter
from typing import Any

from events.arrays import canonical, element_id, parse_indices
from events.envelope import Envelope
from events.models import EventData, WorkloadArraySubmitted, WorkloadCancelled
from events.models.arrays import ELEMENT_FIELDS
from projections.cluster_types import ACTIVE, TERMINAL, ArrayState
from projections.live_state import LiveState
from services.api import auth
from services.api import models as m
from services.api.application import Application, Outcome, Result
from services.api.auth import Principal
from services.api.errors import Conflict, Forbidden, NotFound
from services.api.sentences import iso
from services.api.waiting import workload_name
from services.api.writes.workloads import check_submission

#: How many taken element ids a 409 names.
NAMED = 5


def submit_array(
    app: Application, who: Principal, body: m.ArraySubmitRequest
) -> Result[m.ArraySubmitAnswer]:
    """UNCHANGED: the same array exists; ACCEPTED: recorded but not visible yet (also for a
    repeat of such a submit); same id with other content, or ids taken: :class:`Conflict`."""
    app.ready()
    data = _fact(body, who)
    array_id = body.array_id
    with app.submissions.lock(array_id):
        with app.view.read() as state:
            existing = state.cluster.arrays.get(array_id)
            if existing is not None:
                app.submissions.folded(array_id)
                _same_array(existing.submitted, data)
                return Result(Outcome.UNCHANGED, array_view(state, existing))
            earlier = app.submissions.unseen(array_id)
            if earlier is None:
                check_submission(state, who, body, app.clock())
                _ids_free(state, data, who)
            forgot_some = state.forgotten_before > float("-inf")
        if earlier is None and forgot_some:
            _not_forgotten(app, data, who)
        if earlier is not None:
            _same_array(earlier, data)
            return Result(Outcome.ACCEPTED, m.ArrayAlreadyAccepted(array_id=array_id))
        envelope = app.publish(data, who, f" with the same array_id {array_id!r}")
        app.submissions.published(data)
    if app.visible(envelope):
        with app.view.read() as state:
            app.submissions.folded(array_id)
            return Result(Outcome.DONE, array_view(state, state.cluster.arrays[array_id]))
    return Result(Outcome.ACCEPTED, m.ArrayAccepted(event_id=envelope.id, array_id=array_id))


def _fact(body: m.ArraySubmitRequest, who: Principal) -> WorkloadArraySubmitted:
    """The fact a request states: its indices in canonical form (two requests for one set of
    indices state the same fact), submitted by the caller."""
    fields: dict[str, Any] = {
        name: getattr(body, name) for name in ELEMENT_FIELDS if name != "submitter"
    }
    fields["pools"] = tuple(body.pools)
    return WorkloadArraySubmitted(
        array_id=body.array_id,
        indices=canonical(body.indices),
        max_running=body.max_running,
        submitter=who.user,
        **fields,
    )


def _same_array(existing: EventData, data: WorkloadArraySubmitted) -> None:
    if not isinstance(existing, WorkloadArraySubmitted):
        raise Conflict(f"{data.array_id} is a workload's id; choose a new array_id")
    differing = [
        name
        for name in ("indices", "max_running", *ELEMENT_FIELDS)
        if getattr(existing, name) != getattr(data, name)
    ]
    if differing:
        raise Conflict(
            f"array {data.array_id} was already submitted with other "
            f"{', '.join(differing)}; choose a new array_id"
        )


def _ids_free(state: LiveState, data: WorkloadArraySubmitted, who: Principal) -> None:
    """No workload the view holds has the array's id or an element's."""
    workloads = state.cluster.workloads
    if data.array_id in workloads:
        raise Conflict(f"{data.array_id} is a workload's id; choose a new array_id", user=who.user)
    taken = [
        element
        for element in (element_id(data.array_id, i) for i in parse_indices(data.indices))
        if element in workloads
    ]
    if taken:
        raise Conflict(_taken(data.array_id, taken), user=who.user)


def _not_forgotten(app: Application, data: WorkloadArraySubmitted, who: Principal) -> None:
    """Ids are for ever: the array's id and its elements' are checked against what the read
    models keep of work the view has forgotten."""
    from services.api.past_work import past_array, past_taken

    if past_array(app.read_model_engine(), data.array_id):
        raise Conflict(
            f"array {data.array_id} was already submitted (its elements ended before the "
            "live window); choose a new array_id",
            user=who.user,
        )
    ids = [data.array_id, *(element_id(data.array_id, i) for i in parse_indices(data.indices))]
    taken = past_taken(app.read_model_engine(), ids)
    if data.array_id in taken:
        raise Conflict(f"{data.array_id} is a workload's id; choose a new array_id", user=who.user)
    if taken:
        raise Conflict(_taken(data.array_id, sorted(taken)), user=who.user)


def _taken(array_id: str, taken: list[str]) -> str:
    named = ", ".join(taken[:NAMED]) + (
        f" and {len(taken) - NAMED} more" if len(taken) > NAMED else ""
    )
    return (
        f"the ids of {len(taken)} element(s) of {array_id} are workloads' already ({named}); "
        "choose another array_id"
    )


def array_view(state: LiveState, array: ArrayState) -> m.ArrayView:
    """An array's fields and its elements' counts by status, as the view holds them."""
    workloads = state.cluster.workloads
    held = [workloads[w] for w in array.elements if w in workloads]
    return array_answer(
        array.submitted,
        array.submitted_at,
        Counter[str](w.status for w in held),
        held=sum(1 for w in held if state.cluster.indexes.held_by_array(w)),
        archived=len(array.elements) - len(held),
    )


def array_answer(
    fact: WorkloadArraySubmitted,
    submitted_at: float,
    statuses: Counter[str],
    *,
    held: int,
    archived: int,
) -> m.ArrayView:
    """The answer about an array: its fact, and its elements' counts (by status, held back by
    its throttle, forgotten by the view), from the view or from the read models."""
    indices = parse_indices(fact.indices)
    return m.ArrayView(
        array_id=fact.array_id,
        budget=fact.budget,
        submitter=fact.submitter,
        name=workload_name(fact.spec),
        indices=fact.indices,
        count=len(indices),
        first_element=element_id(fact.array_id, indices[0]),
        last_element=element_id(fact.array_id, indices[-1]),
        max_running=fact.max_running,
        pools=list(fact.pools),
        gpus=fact.gpus,
        gang=fact.gang,
        min_runtime_s=fact.min_runtime_s,
        allocated=fact.min_runtime_s > 0,
        priority=fact.priority,
        submitted_at=iso(submitted_at),
        statuses=dict(sorted(statuses.items())),
        running=sum(statuses[s] for s in ACTIVE),
        held=held,
        archived=archived,
    )


def array_or_past(app: Application, array_id: str) -> m.ArrayView:
    """The array as the view holds it, or once the view has forgotten it (every element
    ended a window ago) as the read models keep it: every element archived."""
    from services.api.past_work import past_array_fact

    with app.view.read() as state:
        array = state.cluster.arrays.get(array_id)
        if array is not None:
            return array_view(state, array)
    past = past_array_fact(app.read_model_engine(), array_id)
    if past is None:
        raise NotFound(f"unknown array {array_id!r}")
    fact, submitted_at, statuses = past
    return array_answer(fact, submitted_at, statuses, held=0, archived=sum(statuses.values()))


def array_or_404(state: LiveState, array_id: str) -> ArrayState:
    array = state.cluster.arrays.get(array_id)
    if array is None:
        raise NotFound(f"unknown array {array_id!r}")
    return array


def cancel_array(
    app: Application, who: Principal, array_id: str, reason: str = ""
) -> Result[m.ArrayCancelView]:
    """Cancel every element still pending or running (its submitter, a manager of its budget,
    or an admin). UNCHANGED when none is left to cancel; DONE once the view has folded every
    cancel (running elements stop when the scheduler's preempt commands are carried out)."""
    app.ready()
    with app.view.read() as state:
        array = array_or_404(state, array_id)
        fact = array.submitted
        refusal = auth.may_cancel(who, state.tree, fact.budget, fact.submitter)
        if refusal is not None:
            raise Forbidden(refusal, user=who.user)
        targets, already, ended = _to_cancel(state, array)
    if not targets:
        view = m.ArrayCancelView(
            array_id=array_id, cancelled=0, already_cancelled=already, ended=ended, visible=True
        )
        return Result(Outcome.UNCHANGED, view)
    facts: list[EventData] = [
        WorkloadCancelled(workload_id=w, cancelled_by=who.user, reason=reason) for w in targets
    ]
    envelopes = app.publish_all(facts, who, f" to cancel array {array_id!r}")
    visible = _all_visible(app, envelopes)
    view = m.ArrayCancelView(
        array_id=array_id,
        cancelled=len(targets),
        already_cancelled=already,
        ended=ended,
        visible=visible,
    )
    return Result(Outcome.DONE if visible else Outcome.ACCEPTED, view)


def _to_cancel(state: LiveState, array: ArrayState) -> tuple[list[str], int, int]:
    """The elements to cancel, and how many are cancelled (or being) and ended otherwise."""
    targets: list[str] = []
    already = ended = 0
    for workload_id in array.elements:
        workload = state.cluster.workloads.get(workload_id)
        if workload is None:
            ended += 1  # forgotten: it ended a window ago
        elif workload.status == "cancelled" or workload.cancel_requested:
            already += 1
        elif workload.status in TERMINAL:
            ended += 1
        elif workload.status == "pending" or workload.status in ACTIVE:
            targets.append(workload_id)
        elif workload.workload_id in state.cluster.awaiting_requeue:
            targets.append(workload_id)  # stopped, to be requeued: the cancel ends it
        else:
            ended += 1  # preempted or lost for good
    return targets, already, ended


def _all_visible(app: Application, envelopes: list[Envelope[Any]]) -> bool:
    """Whether the view folds every one of ``envelopes`` within one read-your-writes bound
    (they were flushed together, so once the first is folded the rest follow at once)."""
    deadline = time.monotonic() + app.read_your_writes_s
    return all(
        app.view.wait_for(envelope.id, max(0.0, deadline - time.monotonic()))
        for envelope in envelopes
    )
