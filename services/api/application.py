"""The API's application layer: every write as a plain function, with no HTTP in it.

Each write follows one path: the view must have read the log (else :class:`Unavailable`),
the request is validated against the state (:class:`Invalid`, :class:`NotFound`), the caller
authorised (:class:`Forbidden`), conflicts refused (:class:`Conflict`); only then is the event
published and flushed (:class:`Unavailable` if the log did not take it: the client retries the
same request, which is idempotent), and the function waits, bounded, until the view has folded
it (read-your-writes). Nothing refused is ever published. The result says whether anything
changed, so the HTTP layer can pick its status code; the errors are mapped to HTTP once, in
:mod:`services.api.app`.
"""

from __future__ import annotations

import logging
import os
import threading
import zlib
from collections.abc import Callable, Collection
from dataclasses import dataclass
from decimal import Decimal
from enum import Enum
from typing import Any, Generic, TypeVar

from sqlalchemy import Engine

from events.envelope import Envelope, new_event
from events.models import (
    BudgetClosed,
    BudgetCreated,
    BudgetWeightChanged,
    EventData,
    MembershipGranted,
    MembershipRevoked,
    NodeCordoned,
    NodeUncordoned,
    PriceSet,
    WorkloadArraySubmitted,
    WorkloadCancelled,
    WorkloadSubmitted,
)
from events.times import DEFAULT_WINDOW_S, HOUR, utc_from_epoch
from events.types import Role
from projections.budget_tree import ROOT, BudgetNode, parent_of
from projections.cluster_types import TERMINAL, WorkloadState
from projections.live_state import LiveState
from projections.price_book import Price, PriceBook, hour_of, price_of
from scheduling.settings import time_limits_of
from scheduling.time_limits import refusal as time_limit_refusal
from services.agents.spec_checks import spec_problems
from services.api import auth, queries
from services.api import models as m
from services.api.auth import Principal
from services.api.errors import Conflict, Forbidden, Invalid, NotFound, TooLarge, Unavailable
from services.api.view import LiveView
from services.bus.port import EventPublisher, PublishError

log = logging.getLogger(__name__)

SOURCE = "fairshare-api"
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

Clock = Callable[[], float]
A = TypeVar("A")


class Outcome(Enum):
    #: Nothing published: the state already was what was asked.
    UNCHANGED = "unchanged"
    #: Published, and the view has folded it: the answer is the new state.
    DONE = "done"
    #: Recorded in the log, not yet visible in the view: the answer says what was recorded.
    ACCEPTED = "accepted"


@dataclass(frozen=True)
class Result(Generic[A]):
    outcome: Outcome
    answer: A


#: A submission: one workload, or a job array.
Submission = WorkloadSubmitted | WorkloadArraySubmitted


class Submissions:
    """Submissions (workloads and arrays, by their ids) this process published that its view
    has not folded yet.

    Idempotency must hold across the gap between flush and fold: a repeated submit in that gap
    is compared with what was published instead of being published again. :meth:`lock` keeps
    two submits of one id from both publishing; submits of other ids mostly hold other locks
    (striped by id), so they publish and wait for the broker side by side."""

    STRIPES = 64

    def __init__(self) -> None:
        self._stripes = [threading.Lock() for _ in range(self.STRIPES)]
        self._unseen: dict[str, Submission] = {}

    def lock(self, workload_id: str) -> threading.Lock:
        return self._stripes[zlib.crc32(workload_id.encode()) % self.STRIPES]

    def unseen(self, workload_id: str) -> Submission | None:
        return self._unseen.get(workload_id)

    def published(self, data: Submission) -> None:
        self._unseen[data.subject()] = data

    def folded(self, workload_id: str) -> None:
        self._unseen.pop(workload_id, None)


class Application:
    """What every request works on: the view (read), the log (write), the clock and the
    limits, and the locks that keep concurrent writes consistent."""

    def __init__(
        self,
        view: LiveView,
        publisher: EventPublisher,
        clock: Clock,
        *,
        window_s: int = DEFAULT_WINDOW_S,
        read_your_writes_s: float = 5.0,
        flush_timeout_s: float = 10.0,
        read_models: Engine | None = None,
    ) -> None:
        self.view = view
        self.publisher = publisher
        self.clock = clock
        self.window_s = window_s
        self.read_your_writes_s = read_your_writes_s
        self.flush_timeout_s = flush_timeout_s
        #: The SQL read models delivered and owed are computed from (None: see
        #: :meth:`read_model_engine`).
        self.read_models = read_models
        self.submissions = Submissions()
        #: Held from the check of a budget change to its being visible: two creates of one path
        #: must not both publish.
        self.budget_lock = threading.Lock()
        #: Held from the check of a price to its being visible: two prices for one instant
        #: must not both publish.
        self.price_lock = threading.Lock()
        self._engine_lock = threading.Lock()

    def read_model_engine(self) -> Engine | None:
        """The read models: the engine the app was built with, else one made once from
        ``$FAIRSHARE_DATABASE_URL``, else None (no delivered and owed figures)."""
        with self._engine_lock:
            if self.read_models is None and os.environ.get("FAIRSHARE_DATABASE_URL"):
                from sqlalchemy import create_engine

                self.read_models = create_engine(os.environ["FAIRSHARE_DATABASE_URL"])
            return self.read_models

    def ready(self) -> None:
        """Writes wait until the view has read the log's history: checks against a partial
        state could accept what the whole log refuses."""
        self.view.sync()
        if not self.view.caught_up:
            raise Unavailable(
                "the API is still reading the event log; retry shortly", retry_after_s=2
            )

    def publish(self, data: EventData, who: Principal, retry: str = "") -> Envelope[Any]:
        """Publish and flush one event; ``retry`` tells the client what to send again."""
        return self.publish_all([data], who, retry)[0]

    def publish_all(
        self, facts: list[EventData], who: Principal, retry: str = ""
    ) -> list[Envelope[Any]]:
        """Publish events and flush them once (a batch costs one wait for the broker, not
        one per event); ``retry`` tells the client what to send again."""
        at = utc_from_epoch(self.clock())
        envelopes = [new_event(data, source=SOURCE, time=at) for data in facts]
        # No lock: the publisher's flush answers for this thread's records (requests publish
        # side by side; the check-then-publish of one id is guarded by its caller's lock).
        try:
            for envelope in envelopes:
                self.publisher.publish(envelope)
            self.publisher.flush(self.flush_timeout_s)
        except PublishError as error:
            first = envelopes[0]
            if "MSG_SIZE_TOO_LARGE" in str(error):  # no retry can make it fit
                raise TooLarge(
                    f"the event log refuses a record this large ({error}); nothing was recorded",
                    user=who.user,
                ) from error
            log.warning(
                "event log did not accept a request",
                extra={"type": first.type, "subject": first.subject, "error": str(error)},
            )
            recorded = (
                "it was not recorded" if len(envelopes) == 1 else "not all of it was recorded"
            )
            raise Unavailable(
                f"the event log did not accept the request ({error}); {recorded}. Retry the "
                f"same request{retry}: it is idempotent",
                retry_after_s=1,
                user=who.user,
            ) from error
        log.info(
            "event published",
            extra={
                "type": envelopes[0].type,
                "subject": envelopes[0].subject,
                "event_id": envelopes[0].id,
                "user": who.user,
                "events": len(envelopes),
            },
        )
        return envelopes

    def visible(self, envelope: Envelope[Any]) -> bool:
        """Whether the view folded ``envelope`` within the read-your-writes bound."""
        return self.view.wait_for(envelope.id, self.read_your_writes_s)


# -- workloads ----------------------------------------------------------------------------------
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
    array): a known leaf budget, known pools, the caller's membership, an open budget."""
    queries.budget_or_404(state, body.budget)
    node = state.tree.nodes[body.budget]
    if not node.is_leaf:
        raise Invalid(
            "budget",
            f"{body.budget} is not a leaf budget (it has {', '.join(node.children)}); "
            "submit to one of its children",
        )
    for index, pool in enumerate(body.pools):
        if pool not in state.cluster.pools:
            known = ", ".join(sorted(state.cluster.pools)) or "none"
            raise Invalid(("pools", index), f"unknown pool {pool!r} (known: {known})")
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
    from services.api.sentences import iso

    ended = past_end(app.read_model_engine(), workload_id)
    if ended is not None:
        raise Conflict(
            f"workload {workload_id} was already submitted (it ended {iso(ended)}); "
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
    app.ready()
    with app.view.read() as state:
        workload = queries.workload_or_404(state, workload_id)
        refusal = auth.may_cancel(who, state.tree, workload.budget, workload.submitter)
        if refusal is not None:
            raise Forbidden(refusal, user=who.user)
        if workload.status == "cancelled" or workload.cancel_requested:
            return Result(Outcome.UNCHANGED, queries.workload_view(state, workload, app.clock()))
        if workload.status in TERMINAL:
            raise Conflict(
                f"workload {workload_id} already ended ({workload.status})", user=who.user
            )
    envelope = app.publish(
        WorkloadCancelled(workload_id=workload_id, cancelled_by=who.user, reason=reason), who
    )
    if app.visible(envelope):
        with app.view.read() as state:
            return Result(
                Outcome.DONE,
                queries.workload_view(state, state.cluster.workloads[workload_id], app.clock()),
            )
    return Result(
        Outcome.ACCEPTED, m.WorkloadAccepted(event_id=envelope.id, workload_id=workload_id)
    )


# -- budgets ------------------------------------------------------------------------------------
def set_weight(
    app: Application, who: Principal, budget: str, body: m.WeightRequest
) -> Result[m.WeightAnswer]:
    """Set a budget's weight (in every pool, or in ``body.pool``): a manager of its parent."""
    app.ready()
    with app.view.read() as state:
        queries.budget_or_404(state, budget)
        refusal = auth.may_set_weight(who, state.tree, budget)
        if refusal is not None:
            raise Forbidden(refusal, user=who.user)
        if not state.tree.nodes[budget].open_at(app.clock()):
            raise Conflict(f"budget {budget} is closed", user=who.user)
        if body.pool is not None and body.pool not in state.cluster.pools:
            known = ", ".join(sorted(state.cluster.pools)) or "none"
            raise Invalid("pool", f"unknown pool {body.pool!r} (known: {known})", user=who.user)
    data = BudgetWeightChanged(
        budget=budget, weight=body.weight, pool=body.pool, changed_by=who.user, reason=body.reason
    )
    envelope = app.publish(data, who)
    if not app.visible(envelope):
        return Result(Outcome.ACCEPTED, m.BudgetAccepted(event_id=envelope.id, budget=budget))
    answer = m.WeightSet(budget=budget, weight=body.weight, pool=body.pool, event_id=envelope.id)
    return Result(Outcome.DONE, answer)


def add_member(
    app: Application,
    who: Principal,
    budget: str,
    body: m.MemberRequest,
    known_users: Collection[str] | None = None,
) -> Result[m.MemberAnswer]:
    """Grant ``body.user`` a role on the budget's subtree: a manager of the budget (or above).
    UNCHANGED if the role is already held."""
    app.ready()
    with app.view.read() as state:
        queries.budget_or_404(state, budget)
        refusal = auth.may_manage(who, state.tree, budget)
        if refusal is not None:
            raise Forbidden(refusal, user=who.user)
        if known_users is not None and body.user not in known_users:
            raise Invalid("user", f"unknown user {body.user!r}: no token names them", user=who.user)
        if body.role in state.tree.nodes[budget].members.get(body.user, set()):
            grant = m.MemberGrant(budget=budget, user=body.user, role=body.role, changed=False)
            return Result(Outcome.UNCHANGED, grant)
    data = MembershipGranted(budget=budget, user=body.user, role=body.role, granted_by=who.user)
    envelope = app.publish(data, who)
    if not app.visible(envelope):
        return Result(Outcome.ACCEPTED, m.BudgetAccepted(event_id=envelope.id, budget=budget))
    grant = m.MemberGrant(budget=budget, user=body.user, role=body.role, changed=True)
    return Result(Outcome.DONE, grant)


def create_budget(
    app: Application, who: Principal, body: m.BudgetCreateRequest
) -> Result[m.BudgetAnswer]:
    """A new budget under an open parent: a manager of the parent (top-level: admins).
    UNCHANGED if it exists with these weights; a parent that funds work gets no children (its
    work would lose its leaf)."""
    app.ready()
    with app.budget_lock:
        now = app.clock()
        with app.view.read() as state:
            existing = _check_new_budget(state, who, body, now)
            if existing is not None:
                return Result(Outcome.UNCHANGED, _budget_state(body.budget, existing, now, False))
        data = BudgetCreated(
            budget=body.budget,
            weight=body.weight,
            pool_weights=dict(body.pool_weights),
            created_by=who.user,
            description=body.description,
        )
        return _budget_written(app, app.publish(data, who), body.budget)


def _check_new_budget(
    state: LiveState, who: Principal, body: m.BudgetCreateRequest, now: float
) -> BudgetNode | None:
    """The existing budget if it is the same (None: create it); refusals raised in the API's
    order: 404, 422, 403, 409."""
    tree, budget = state.tree, body.budget
    parent = parent_of(budget)
    if parent != ROOT and parent not in tree.nodes:
        raise NotFound(f"unknown budget {parent!r} (the parent of {budget})", user=who.user)
    for pool in body.pool_weights:
        if pool not in state.cluster.pools:
            known = ", ".join(sorted(state.cluster.pools)) or "none"
            raise Invalid(("pool_weights", pool), f"unknown pool {pool!r} (known: {known})")
    refusal = auth.may_set_weight(who, tree, budget)
    if refusal is not None:
        raise Forbidden(refusal, user=who.user)
    existing = tree.nodes.get(budget)
    if existing is not None:
        if not existing.open_at(now):
            raise Conflict(f"budget {budget} was closed; a budget's path is never reused")
        weights = {p: existing.weight_at(p, now) for p in existing.pool_weights}
        if existing.weight_at("", now) == body.weight and weights == dict(body.pool_weights):
            return existing
        raise Conflict(
            f"budget {budget} exists with other weights; change them with PUT "
            f"/budgets/{budget}/weight",
            user=who.user,
        )
    if parent != ROOT:
        closed = [a for a in tree.ancestors(parent) if not tree.nodes[a].open_at(now)]
        if closed:
            raise Conflict(f"budget {parent} is closed ({closed[0]} was closed)", user=who.user)
        working = _unfinished_work(state, parent)
        if tree.nodes[parent].is_leaf and working:
            raise Conflict(
                f"{parent} funds work that has not ended ({working[0]}"
                f"{' and more' if len(working) > 1 else ''}): a budget with work cannot get "
                "children, its work would no longer be funded by a leaf",
                user=who.user,
            )
    return None


def _unfinished_work(state: LiveState, budget: str) -> list[str]:
    return sorted(
        w.workload_id
        for w in state.cluster.workloads.values()
        if w.budget == budget and not queries.finished(state, w)
    )


def close_budget(
    app: Application, who: Principal, budget: str, body: m.BudgetCloseRequest
) -> Result[m.BudgetAnswer]:
    """Close a budget (its subtree takes no new work, its work waits last): a manager of its
    parent (top-level: admins). UNCHANGED if it is closed already."""
    app.ready()
    with app.budget_lock:
        now = app.clock()
        with app.view.read() as state:
            queries.budget_or_404(state, budget)
            refusal = auth.may_set_weight(who, state.tree, budget)
            if refusal is not None:
                raise Forbidden(refusal, user=who.user)
            node = state.tree.nodes[budget]
            if not node.open_at(now):
                return Result(Outcome.UNCHANGED, _budget_state(budget, node, now, False))
        data = BudgetClosed(budget=budget, closed_by=who.user, reason=body.reason)
        return _budget_written(app, app.publish(data, who), budget)


def _budget_written(
    app: Application, envelope: Envelope[Any], budget: str
) -> Result[m.BudgetAnswer]:
    if not app.visible(envelope):
        return Result(Outcome.ACCEPTED, m.BudgetAccepted(event_id=envelope.id, budget=budget))
    now = app.clock()
    with app.view.read() as state:
        return Result(Outcome.DONE, _budget_state(budget, state.tree.nodes[budget], now, True))


def _budget_state(budget: str, node: BudgetNode, now: float, changed: bool) -> m.BudgetState:
    return m.BudgetState(
        budget=budget,
        parent=parent_of(budget) or None,
        leaf=node.is_leaf,
        closed=not node.open_at(now),
        weight=node.weight_at("", now),
        pool_weights={p: node.weight_at(p, now) for p in sorted(node.pool_weights)},
        changed=changed,
    )


def revoke_member(
    app: Application, who: Principal, budget: str, user: str, role: Role
) -> Result[m.RevokeAnswer]:
    """Take ``role`` on ``budget`` from ``user``: a manager of the budget (or above).
    UNCHANGED if they do not hold it there (the answer names an ancestor where they still
    do: roles cover subtrees, so revoking here would change nothing)."""
    app.ready()
    with app.view.read() as state:
        queries.budget_or_404(state, budget)
        refusal = auth.may_manage(who, state.tree, budget)
        if refusal is not None:
            raise Forbidden(refusal, user=who.user)
        still = _held_above(state, budget, user, role)
        if role not in state.tree.nodes[budget].members.get(user, set()):
            revoke = m.MemberRevoke(
                budget=budget, user=user, role=role, changed=False, still_held_on=still
            )
            return Result(Outcome.UNCHANGED, revoke)
    data = MembershipRevoked(budget=budget, user=user, role=role, revoked_by=who.user)
    envelope = app.publish(data, who)
    if not app.visible(envelope):
        return Result(Outcome.ACCEPTED, m.BudgetAccepted(event_id=envelope.id, budget=budget))
    revoke = m.MemberRevoke(budget=budget, user=user, role=role, changed=True, still_held_on=still)
    return Result(Outcome.DONE, revoke)


def _held_above(state: LiveState, budget: str, user: str, role: str) -> str | None:
    """The nearest ancestor of ``budget`` on which ``user`` holds ``role``."""
    for ancestor in reversed(state.tree.ancestors(budget)[:-1]):
        if role in state.tree.nodes[ancestor].members.get(user, set()):
            return ancestor
    return None


# -- prices -------------------------------------------------------------------------------------
def set_price(app: Application, who: Principal, body: m.PriceRequest) -> Result[m.PriceAnswer]:
    """Set the price of a GPU-hour in a pool (admins): from ``body.effective_at`` on (default:
    the start of the current hour), on the hour, never in a closed month. UNCHANGED if this
    very price is already set (a retried request); another price for the same instant:
    :class:`Conflict`."""
    app.ready()
    if not who.admin:
        raise Forbidden(f"{who.user} is not an admin: only admins set prices", user=who.user)
    with app.price_lock:
        now = app.clock()
        effective_at = _price_instant(body, now, who)
        with app.view.read() as state:
            _check_price_references(state, body, who)
            book = state.tree.prices
            existing = _same_instant(book, body.pool, body.budget, effective_at)
            if existing is not None and _same_price(existing, body):
                return Result(Outcome.UNCHANGED, _price_answer(existing, False, None))
            data = PriceSet(
                pool=body.pool,
                currency=body.currency,
                per_gpu_hour=body.per_gpu_hour,
                effective_at=utc_from_epoch(effective_at),
                budget=body.budget,
                set_by=who.user,
                reason=body.reason,
            )
            _check_price_refusal(book, price_of(data), who)
        envelope = app.publish(data, who)
        if not app.visible(envelope):
            accepted = m.PriceAccepted(event_id=envelope.id, pool=body.pool)
            return Result(Outcome.ACCEPTED, accepted)
    return Result(Outcome.DONE, _price_answer(price_of(data), True, envelope.id))


def _price_instant(body: m.PriceRequest, now: float, who: Principal) -> int:
    """When the price takes effect, in epoch seconds: on the hour, in the current month or
    later (a closed month is never repriced: its charges are final)."""
    if body.effective_at is None:
        return hour_of(int(now))
    stamp = body.effective_at.timestamp()
    if stamp % HOUR:
        raise Invalid(
            "effective_at",
            "a price takes effect on the hour (charges are hourly), e.g. "
            f"{iso_time(hour_of(int(stamp)))}",
            user=who.user,
        )
    month = month_start(now)
    if stamp < month:
        raise Invalid(
            "effective_at",
            f"{iso_time(stamp)} is before {iso_time(month)}, the start of the current month: "
            "a closed month is never repriced",
            user=who.user,
        )
    return int(stamp)


def month_start(now: float) -> int:
    """The start of the UTC month holding ``now``, in epoch seconds."""
    day = utc_from_epoch(now)
    return int(day.replace(day=1, hour=0, minute=0, second=0, microsecond=0).timestamp())


def iso_time(at: float) -> str:
    return utc_from_epoch(at).isoformat().replace("+00:00", "Z")


def _check_price_references(state: LiveState, body: m.PriceRequest, who: Principal) -> None:
    """A currency of ISO 4217, a known pool and, for a negotiated rate, a known budget."""
    import pycountry

    if pycountry.currencies.get(alpha_3=body.currency) is None:
        raise Invalid(
            "currency", f"{body.currency!r} is not an ISO 4217 currency code", user=who.user
        )
    if body.pool not in state.cluster.pools:
        known = ", ".join(sorted(state.cluster.pools)) or "none"
        raise Invalid("pool", f"unknown pool {body.pool!r} (known: {known})", user=who.user)
    if body.budget is not None:
        queries.budget_or_404(state, body.budget)


def _same_instant(book: PriceBook, pool: str, budget: str | None, at: int) -> Price | None:
    return next((p for p in book.histories.get((pool, budget), []) if p.effective_at == at), None)


def _same_price(existing: Price, body: m.PriceRequest) -> bool:
    return existing.currency == body.currency and existing.per_gpu_hour == Decimal(
        body.per_gpu_hour
    )


def _check_price_refusal(book: PriceBook, price: Price, who: Principal) -> None:
    """What the book would refuse: another currency (422), a second price for the same pool,
    subtree and instant (409)."""
    refusal = book.refusal(price)
    if refusal is None:
        return
    if book.currency is not None and price.currency != book.currency:
        raise Invalid("currency", refusal, user=who.user)
    raise Conflict(refusal, user=who.user)


def _price_answer(price: Price, changed: bool, event_id: str | None) -> m.PriceSetView:
    return m.PriceSetView(**price_view(price).model_dump(), changed=changed, event_id=event_id)


def price_view(price: Price) -> m.PriceView:
    return m.PriceView(
        pool=price.pool,
        budget=price.budget,
        currency=price.currency,
        per_gpu_hour=format(price.per_gpu_hour, "f"),
        effective_at=iso_time(price.effective_at),
        set_by=price.set_by,
        reason=price.reason,
    )


def price_list(state: LiveState, pool: str | None) -> m.PriceList:
    """Every price of the live state's book (of ``pool`` only, if given)."""
    book = state.tree.prices
    return m.PriceList(currency=book.currency, prices=[price_view(p) for p in book.prices(pool)])


# -- nodes --------------------------------------------------------------------------------------
def set_cordon(
    app: Application, who: Principal, node: str, cordon: bool, reason: str = ""
) -> Result[m.NodeAnswer]:
    """Cordon (stop new placements; work drains as contracts end) or uncordon a node: admins.
    UNCHANGED if it already is so."""
    app.ready()
    refusal = auth.may_operate_nodes(who)
    if refusal is not None:
        raise Forbidden(refusal, user=who.user)
    with app.view.read() as state:
        found = queries.node_or_404(state, node, user=who.user)
        if found.cordoned == cordon:
            return Result(Outcome.UNCHANGED, queries.node_view(found))
    data: EventData = (
        NodeCordoned(node=node, cordoned_by=who.user, reason=reason)
        if cordon
        else NodeUncordoned(node=node, uncordoned_by=who.user)
    )
    envelope = app.publish(data, who)
    if not app.visible(envelope):
        return Result(Outcome.ACCEPTED, m.NodeAccepted(event_id=envelope.id, node=node))
    with app.view.read() as state:
        return Result(Outcome.DONE, queries.node_view(state.cluster.nodes[node]))
