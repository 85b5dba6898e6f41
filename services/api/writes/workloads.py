"""Writes of ``/workloads``: submit one, cancel one.

A submit does not go the skeleton's way (:mod:`.skeleton`): its idempotency must hold across
the gap between flush and fold, so a repeated submit in that gap is compared with what this
process published (:class:`services.api.application.Submissions`) instead of being published
again, and the lock of its id is let go before the wait for the view."""

from __future__ import annotations

from typing import Any

from events.envelope import Envelope
from events.models import WorkloadArraySubmitted, WorkloadCancelled, WorkloadSubmitted
from events.native_work import NATIVE_KEY
from events.times import utc_iso
from projections.cluster_types import TERMINAL, WorkloadState
from projections.figures import registered_gpus
from projections.live_state import LiveState
from scheduling.settings import time_limits_of
from scheduling.spec_checks import spec_problems
from scheduling.time_limits import refusal as time_limit_refusal
from services.api import auth, queries
from services.api import models as m
from services.api.application import Application, Outcome, Result
from services.api.auth import Principal
from services.api.errors import Conflict, Forbidden, Invalid
from services.api.writes.skeleton import Publish, Unchanged, write

#: Fields of a submission that must match for a repeated submit to be the same request.
SUBMIT_FIELDS = (
    "budget",
    "pools",
    "gpus",
    "gang",
    "min_runtime_s",
    "resumable",
    "priority",
    "submitter",
    "spec",
    "time_limit_s",
)


def submit(app: Application, who: Principal, body: m.SubmitRequest) -> Result[m.SubmitAnswer]:
    """UNCHANGED: the same workload exists; ACCEPTED: recorded but not visible yet (also for a
    repeat of such a submit); same id with other content: :class:`Conflict`."""
    app.ready()
    data = WorkloadSubmitted(
        workload_id=body.workload_id,
        budget=body.budget,
        pools=tuple(body.pools),
        gpus=body.gpus,
        gang=body.gang,
        min_runtime_s=body.min_runtime_s,
        resumable=body.resumable,
        priority=body.priority,
        submitter=who.user,
        spec=body.spec,
        time_limit_s=body.time_limit_s,
    )
    workload_id = body.workload_id
    with app.submissions.lock(workload_id):
        with app.view.read() as state:
            existing = state.cluster.workloads.get(workload_id)
            if existing is not None:
                app.submissions.folded(workload_id)
                _same_submission(_fields(existing), data)
                return Result(
                    Outcome.UNCHANGED, queries.workload_view(state, existing, app.clock())
                )
            earlier = app.submissions.unseen(workload_id)
            if workload_id in state.cluster.arrays or isinstance(earlier, WorkloadArraySubmitted):
                raise Conflict(
                    f"{workload_id} is a job array's id; choose a new workload_id", user=who.user
                )
            if earlier is None:
                check_submission(state, who, body, app.clock())
            forgot_some = state.forgotten_before > float("-inf")
        if earlier is None and forgot_some:
            _not_forgotten(app, workload_id)
        if earlier is not None:
            _same_submission(earlier.model_dump(), data)
            return Result(Outcome.ACCEPTED, m.AlreadyAccepted(workload_id=workload_id))
        envelope = app.publish(data, who, f" with the same workload_id {workload_id!r}")
        app.submissions.published(data)
    if app.visible(envelope):
        with app.view.read() as state:
            app.submissions.folded(workload_id)
            return Result(
                Outcome.DONE,
                queries.workload_view(state, state.cluster.workloads[workload_id], app.clock()),
            )
    return Result(
        Outcome.ACCEPTED, m.WorkloadAccepted(event_id=envelope.id, workload_id=workload_id)
    )


def check_submission(
    state: LiveState, who: Principal, body: m.WorkloadTemplate, now: float
) -> None:
    """What the request body alone cannot say (of a workload, or of every element of an
    array): a known leaf budget, known pools, the caller's membership, an open budget; and no
    native origin in its spec (only a cluster's agent states one: ``events.native_work``)."""
    queries.budget_or_404(state, body.budget)
    node = state.tree.nodes[body.budget]
    if not node.is_leaf:
        raise Invalid(
            "budget",
            f"{body.budget} is not a leaf budget (it has {', '.join(node.children)}); "
            "submit to one of its children",
        )
    if NATIVE_KEY in body.spec:
        raise Invalid(
            ("spec", NATIVE_KEY),
            "is stated by a cluster's agent for its users' own work (a Kubernetes Job applied "
            "with schedulerName fairshare), never through the API",
        )
    for index, pool in enumerate(body.pools):
        if pool not in state.cluster.pools:
            known = ", ".join(sorted(state.cluster.pools)) or "none"
            raise Invalid(("pools", index), f"unknown pool {pool!r} (known: {known})")
    _fits_some_pool_ever(state, body)
    for index, pool in enumerate(body.pools):
        for executor in sorted(state.cluster.indexes.executors.get(pool, ())):
            problems = spec_problems(executor, body.spec)
            if problems:
                raise Invalid(
                    "spec",
                    f"pool {pool!r} (pools[{index}]) runs on {executor}, where this spec "
                    "cannot run: " + "; ".join(problems),
                )
    limits = time_limits_of(state.settings)
    too_long = time_limit_refusal(body.time_limit_s, body.min_runtime_s, tuple(body.pools), limits)
    if too_long is not None:
        raise Invalid("time_limit_s", too_long)
    refusal = auth.may_submit(who, state.tree, body.budget)
    if refusal is not None:
        raise Forbidden(refusal, user=who.user)
    closed = [a for a in state.tree.ancestors(body.budget) if not state.tree.nodes[a].open_at(now)]
    if closed:
        raise Conflict(f"budget {body.budget} is closed ({closed[0]} was closed)")


def _fits_some_pool_ever(state: LiveState, body: m.WorkloadTemplate) -> None:
    """Refuse a gang no node set of any of its pools could ever hold (every node registered
    there up and empty): it would wait forever, and its demand would swamp every figure."""
    most = {pool: registered_gpus(state.cluster, pool) for pool in body.pools}
    if any(body.gpus <= gpus for gpus in most.values()):
        return
    largest = max(most.values(), default=0)
    where = ", ".join(f"{pool!r} {gpus}" for pool, gpus in most.items())
    raise Invalid(
        "gpus",
        f"{body.gpus} GPUs can never start: the most any of its pools could ever hold is "
        f"{largest} (every node of the pool up and empty; GPUs per pool: {where})",
    )


def _fields(workload: WorkloadState) -> dict[str, Any]:
    return {
        "budget": workload.budget,
        "pools": tuple(workload.pools),
        "gpus": workload.gpus,
        "gang": workload.gang,
        "min_runtime_s": workload.min_runtime_s,
        "resumable": workload.resumable,
        "priority": workload.priority,
        "submitter": workload.submitter,
        "spec": workload.spec,
        "time_limit_s": workload.time_limit_s,
    }


def _not_forgotten(app: Application, workload_id: str) -> None:
    """A workload id is for ever: one the view has forgotten (its work ended a window ago) is
    still taken, as the read models show."""
    from services.api.past_work import past_end

    ended = past_end(app.read_model_engine(), workload_id)
    if ended is not None:
        raise Conflict(
            f"workload {workload_id} was already submitted (it ended {utc_iso(ended)}); "
            "choose a new workload_id"
        )


def _same_submission(existing: dict[str, Any], data: WorkloadSubmitted) -> None:
    differing = [f for f in SUBMIT_FIELDS if existing.get(f) != getattr(data, f)]
    if differing:
        raise Conflict(
            f"workload {data.workload_id} was already submitted with other "
            f"{', '.join(differing)}; choose a new workload_id"
        )


def cancel(
    app: Application, who: Principal, workload_id: str, reason: str = ""
) -> Result[m.CancelAnswer]:
    """Cancel a workload (its submitter, a manager of its budget, or an admin). UNCHANGED if
    it already is cancelled or being cancelled; running work stops when the scheduler's
    preempt command is carried out."""

    def check(state: LiveState) -> Unchanged[m.CancelAnswer] | Publish[m.CancelAnswer]:
        workload = queries.workload_or_404(state, workload_id)
        refusal = auth.may_cancel(who, state.tree, workload.budget, workload.submitter)
        if refusal is not None:
            raise Forbidden(refusal, user=who.user)
        if workload.status == "cancelled" or workload.cancel_requested:
            return Unchanged(queries.workload_view(state, workload, app.clock()))
        if workload.status in TERMINAL:
            raise Conflict(
                f"workload {workload_id} already ended ({workload.status})", user=who.user
            )
        data = WorkloadCancelled(workload_id=workload_id, cancelled_by=who.user, reason=reason)
        return Publish(data, lambda _: _workload_now(app, workload_id))

    return write(app, who, check, lambda envelope: _accepted(envelope, workload_id))


def _workload_now(app: Application, workload_id: str) -> m.WorkloadView:
    with app.view.read() as state:
        return queries.workload_view(state, state.cluster.workloads[workload_id], app.clock())


def _accepted(envelope: Envelope[Any], workload_id: str) -> m.WorkloadAccepted:
    return m.WorkloadAccepted(event_id=envelope.id, workload_id=workload_id)
