"""The FastAPI application: reads from the live view, writes events, and nothing else.

Every write follows one path: authenticate (401), validate (422, the field named), check the
target exists (404) and the caller may act on it (403), check for conflicts (409), then
publish the event and flush it (503 if the log did not take it: the client retries the same
request, which is idempotent), then wait, bounded, until the view has folded it
(read-your-writes; 202 Accepted if it has not yet). Nothing refused is ever published.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Annotated, Any

from fastapi import Depends, FastAPI, HTTPException, Query, Request, Response, status
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from sqlalchemy import Engine

from events.envelope import Envelope, new_event
from events.models import (
    BudgetWeightChanged,
    EventData,
    MembershipGranted,
    NodeCordoned,
    NodeUncordoned,
    WorkloadCancelled,
    WorkloadSubmitted,
)
from events.times import DEFAULT_WINDOW_S
from events.times import utc_from_epoch as _utc
from projections.budget_tree import ROOT
from projections.cluster_state import TERMINAL, WorkloadState
from projections.live_state import LiveState
from services.api import auth, queries
from services.api.auth import Principal
from services.api.models import (
    CancelRequest,
    CordonRequest,
    MemberRequest,
    SubmitRequest,
    WeightRequest,
)
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
)

Clock = Callable[[], float]


def _field_error(field: str | tuple[str | int, ...], message: str) -> HTTPException:
    """A 422 in FastAPI's own shape, naming the field."""
    loc = ["body", *((field,) if isinstance(field, str) else field)]
    return HTTPException(
        status.HTTP_422_UNPROCESSABLE_CONTENT,
        detail=[{"loc": loc, "msg": message, "type": "value_error"}],
    )


def _refuse(code: int, detail: str, who: Principal | None = None) -> HTTPException:
    log.info(
        "request refused",
        extra={"status": code, "reason": detail, "user": None if who is None else who.user},
    )
    return HTTPException(code, detail=detail)


_bearer = HTTPBearer(auto_error=False, description="a token from the tokens file")


def principal(
    request: Request,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
) -> Principal:
    """The caller, from the bearer token (401 when missing or unknown)."""
    if credentials is None:
        raise HTTPException(
            status.HTTP_401_UNAUTHORIZED,
            detail="missing bearer token (send 'Authorization: Bearer <token>')",
            headers={"WWW-Authenticate": "Bearer"},
        )
    tokens: dict[str, Principal] = request.app.state.tokens
    who = tokens.get(credentials.credentials)
    if who is None:
        log.info("unknown token refused")
        raise HTTPException(
            status.HTTP_401_UNAUTHORIZED,
            detail="unknown bearer token",
            headers={"WWW-Authenticate": "Bearer"},
        )
    return who


User = Annotated[Principal, Depends(principal)]


def create_app(
    view: LiveView,
    publisher: EventPublisher,
    tokens: dict[str, Principal],
    clock: Clock = time.time,
    *,
    window_s: int = DEFAULT_WINDOW_S,
    read_your_writes_s: float = 5.0,
    flush_timeout_s: float = 10.0,
    engine: Engine | None = None,
) -> FastAPI:
    """The API over ``view`` (read) and ``publisher`` (write), with bearer ``tokens``."""
    app = FastAPI(
        title="Fairshare API",
        version="1",
        description="GPU time by budgets: submit and inspect workloads, budgets and nodes. "
        "Every accepted write is an event on the log.",
    )
    app.state.view = view
    app.state.publisher = publisher
    app.state.tokens = tokens
    publish_lock = threading.Lock()
    submit_lock = threading.Lock()
    #: Submissions this process published that the view has not folded yet (idempotency
    #: holds across the gap between flush and fold).
    unseen: dict[str, WorkloadSubmitted] = {}

    def ready() -> None:
        view.sync()
        if not view.caught_up:
            raise HTTPException(
                status.HTTP_503_SERVICE_UNAVAILABLE,
                detail="the API is still reading the event log; retry shortly",
                headers={"Retry-After": "2"},
            )

    def publish(data: EventData, who: Principal, retry: str) -> Envelope[Any]:
        envelope = new_event(data, source=SOURCE, time=_utc(clock()))
        with publish_lock:
            try:
                publisher.publish(envelope)
                publisher.flush(flush_timeout_s)
            except PublishError as error:
                log.warning(
                    "event log did not accept a request",
                    extra={"type": envelope.type, "subject": envelope.subject, "error": str(error)},
                )
                raise HTTPException(
                    status.HTTP_503_SERVICE_UNAVAILABLE,
                    detail=f"the event log did not accept the request ({error}); it was not "
                    f"recorded. Retry the same request{retry}: it is idempotent",
                    headers={"Retry-After": "1"},
                ) from error
        log.info(
            "event published",
            extra={
                "type": envelope.type,
                "subject": envelope.subject,
                "event_id": envelope.id,
                "user": who.user,
            },
        )
        return envelope

    def visible(envelope: Envelope[Any]) -> bool:
        return view.wait_for(envelope.id, read_your_writes_s)

    def accepted(response: Response, envelope: Envelope[Any], **extra: Any) -> dict[str, Any]:
        response.status_code = status.HTTP_202_ACCEPTED
        return {
            "status": "accepted",
            "event_id": envelope.id,
            "detail": "recorded in the event log; not yet visible in this API's view",
            **extra,
        }

    def workload_or_404(state: LiveState, workload_id: str) -> WorkloadState:
        workload = state.cluster.workloads.get(workload_id)
        if workload is None:
            raise _refuse(status.HTTP_404_NOT_FOUND, f"unknown workload {workload_id!r}")
        return workload

    def budget_or_404(state: LiveState, budget: str) -> None:
        if budget == ROOT or budget not in state.tree.nodes:
            raise _refuse(status.HTTP_404_NOT_FOUND, f"unknown budget {budget!r}")

    # -- meta -----------------------------------------------------------------------------
    @app.get("/health", tags=["meta"])
    def health() -> dict[str, Any]:
        """Liveness and whether the view has read the log's history (no token needed)."""
        view.sync()
        return {
            "status": "ok",
            "caught_up": view.caught_up,
            "consumer_running": view.running,
            "events": view.state.events,
        }

    @app.get("/me", tags=["meta"])
    def me(who: User) -> dict[str, Any]:
        """Who the token belongs to, and their roles."""
        with view.read() as state:
            roles = {
                path: sorted(node.members[who.user])
                for path, node in sorted(state.tree.nodes.items())
                if node.members.get(who.user)
            }
        return {"user": who.user, "admin": who.admin, "roles": roles}

    # -- workloads --------------------------------------------------------------------------
    @app.post("/workloads", tags=["workloads"], status_code=status.HTTP_201_CREATED)
    def submit(body: SubmitRequest, who: User, response: Response) -> dict[str, Any]:
        """Submit a workload. Same id and same content again: 200 with the existing one;
        same id, other content: 409."""
        ready()
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
        )
        with submit_lock:
            with view.read() as state:
                existing = state.cluster.workloads.get(body.workload_id)
                if existing is not None:
                    unseen.pop(body.workload_id, None)
                    _same_submission(existing_fields(existing), data, body.workload_id)
                    response.status_code = status.HTTP_200_OK
                    return queries.workload_view(existing)
                earlier = unseen.get(body.workload_id)
                if earlier is None:
                    check_submission(state, who, body, clock())
            if earlier is not None:
                _same_submission(earlier.model_dump(), data, body.workload_id)
                response.status_code = status.HTTP_202_ACCEPTED
                return {
                    "status": "accepted",
                    "workload_id": body.workload_id,
                    "detail": "already submitted; not yet visible in this API's view",
                }
            envelope = publish(data, who, f" with the same workload_id {body.workload_id!r}")
            unseen[body.workload_id] = data
        if visible(envelope):
            with view.read() as state:
                unseen.pop(body.workload_id, None)
                return queries.workload_view(state.cluster.workloads[body.workload_id])
        return accepted(response, envelope, workload_id=body.workload_id)

    def check_submission(state: LiveState, who: Principal, body: SubmitRequest, now: float) -> None:
        budget_or_404(state, body.budget)
        node = state.tree.nodes[body.budget]
        if not node.is_leaf:
            raise _field_error(
                "budget",
                f"{body.budget} is not a leaf budget (it has {', '.join(node.children)}); "
                "submit to one of its children",
            )
        for index, pool in enumerate(body.pools):
            if pool not in state.cluster.pools:
                known = ", ".join(sorted(state.cluster.pools)) or "none"
                raise _field_error(("pools", index), f"unknown pool {pool!r} (known: {known})")
        refusal = auth.may_submit(who, state.tree, body.budget)
        if refusal is not None:
            raise _refuse(status.HTTP_403_FORBIDDEN, refusal, who)
        closed = [
            a for a in state.tree.ancestors(body.budget) if not state.tree.nodes[a].open_at(now)
        ]
        if closed:
            raise _refuse(
                status.HTTP_409_CONFLICT, f"budget {body.budget} is closed ({closed[0]} was closed)"
            )

    @app.get("/workloads", tags=["workloads"])
    def list_workloads(
        who: User,
        status_: Annotated[str | None, Query(alias="status")] = None,
        budget: str | None = None,
        submitter: str | None = None,
        pool: str | None = None,
        limit: Annotated[int, Query(ge=1, le=100_000)] = 1000,
    ) -> dict[str, Any]:
        """Workloads, newest first, filtered by status, budget (its subtree), submitter, pool."""
        with view.read() as state:
            found = [
                w
                for w in state.cluster.workloads.values()
                if queries.matches(w, status=status_, budget=budget, submitter=submitter, pool=pool)
            ]
            found.sort(key=lambda w: (-w.submitted_at, w.workload_id))
            return {
                "total": len(found),
                "workloads": [queries.workload_view(w) for w in found[:limit]],
            }

    @app.get("/workloads/{workload_id}", tags=["workloads"])
    def get_workload(workload_id: str, who: User) -> dict[str, Any]:
        with view.read() as state:
            return queries.workload_view(workload_or_404(state, workload_id))

    @app.post("/workloads/{workload_id}/cancel", tags=["workloads"])
    def cancel(
        workload_id: str,
        who: User,
        response: Response,
        body: CancelRequest | None = None,
    ) -> dict[str, Any]:
        """Cancel a workload (its submitter, a manager of its budget, or an admin). Running
        work is stopped by the scheduler's preempt command; the answer is 202 until then."""
        ready()
        with view.read() as state:
            workload = workload_or_404(state, workload_id)
            refusal = auth.may_cancel(who, state.tree, workload.budget, workload.submitter)
            if refusal is not None:
                raise _refuse(status.HTTP_403_FORBIDDEN, refusal, who)
            if workload.status == "cancelled" or workload.cancel_requested:
                return queries.workload_view(workload)  # already done: nothing to publish
            if workload.status in TERMINAL:
                raise _refuse(
                    status.HTTP_409_CONFLICT,
                    f"workload {workload_id} already ended ({workload.status})",
                    who,
                )
        data = WorkloadCancelled(
            workload_id=workload_id, cancelled_by=who.user, reason=(body.reason if body else "")
        )
        envelope = publish(data, who, "")
        response.status_code = status.HTTP_202_ACCEPTED
        if visible(envelope):
            with view.read() as state:
                return queries.workload_view(state.cluster.workloads[workload_id])
        return accepted(response, envelope, workload_id=workload_id)

    @app.get("/workloads/{workload_id}/why", tags=["workloads"])
    def why(workload_id: str, who: User) -> dict[str, Any]:
        """Why a workload is pending (per pool: position and reasons) and why it was
        preempted (the decision records of its preempt commands)."""
        now = clock()
        with view.read() as state:
            workload = workload_or_404(state, workload_id)
            pending = []
            if workload.status == "pending":
                for pool in workload.pools:
                    entry = queries.pool_queue(state, pool, now, window_s, only=workload_id)
                    for item in entry["pending"]:
                        pending.append(
                            {
                                "pool": pool,
                                "position": item["position"],
                                "queue_length": entry["queue_length"],
                                "budget_rank": item["budget_rank"],
                                "usage_ratio": item["usage_ratio"],
                                "reasons": item["reasons"],
                            }
                        )
            records = queries.command_records(state, workload_id)
            return {
                "workload_id": workload_id,
                "status": workload.status,
                "attempt": workload.attempt,
                "as_of": queries.iso(now),
                "pending": pending,
                **records,
            }

    # -- the queue ------------------------------------------------------------------------
    @app.get("/queue", tags=["queue"])
    def queue(
        who: User,
        pool: str | None = None,
        budget: str | None = None,
        submitter: str | None = None,
        reasons: bool = True,
    ) -> dict[str, Any]:
        """Pending work per pool in the order the scheduler considers it, with each
        workload's position and why it is pending."""
        now = clock()
        with view.read() as state:
            pools = queries.known_pools(state)
            if pool is not None:
                if pool not in pools:
                    raise _refuse(status.HTTP_404_NOT_FOUND, f"unknown pool {pool!r}")
                pools = [pool]
            result = []
            for name in pools:
                entry = queries.pool_queue(state, name, now, window_s, reasons=reasons)
                entry["pending"] = [
                    item
                    for item in entry["pending"]
                    if (
                        budget is None
                        or item["budget"] == budget
                        or item["budget"].startswith(budget + "/")
                    )
                    and (submitter is None or item["submitter"] == submitter)
                ]
                result.append(entry)
            return {"as_of": queries.iso(now), "window_s": window_s, "pools": result}

    # -- budgets ----------------------------------------------------------------------------
    @app.get("/budgets", tags=["budgets"])
    def budgets(who: User, pool: str | None = None) -> dict[str, Any]:
        """The budget tree with, per pool: share, window usage, usage ratio, rank, owed and
        delivered GPU-seconds (see ``owed`` in the answer for how it is computed)."""
        now = clock()
        with view.read() as state:
            pools = None
            if pool is not None:
                if pool not in queries.known_pools(state):
                    raise _refuse(status.HTTP_404_NOT_FOUND, f"unknown pool {pool!r}")
                pools = [pool]
            return queries.budget_report(state, now, window_s, pools)

    @app.get("/budgets/{budget:path}", tags=["budgets"])
    def budget(budget: str, who: User) -> dict[str, Any]:
        now = clock()
        with view.read() as state:
            budget_or_404(state, budget)
            report = queries.budget_report(state, now, window_s)
            entry = next(b for b in report["budgets"] if b["budget"] == budget)
            return {**entry, "as_of": report["as_of"], "window_s": window_s}

    @app.put("/budgets/{budget:path}/weight", tags=["budgets"])
    def set_weight(
        budget: str, body: WeightRequest, who: User, response: Response
    ) -> dict[str, Any]:
        """Set a budget's weight (in every pool, or in ``pool``): a manager of its parent."""
        ready()
        with view.read() as state:
            budget_or_404(state, budget)
            refusal = auth.may_set_weight(who, state.tree, budget)
            if refusal is not None:
                raise _refuse(status.HTTP_403_FORBIDDEN, refusal, who)
            if not state.tree.nodes[budget].open_at(clock()):
                raise _refuse(status.HTTP_409_CONFLICT, f"budget {budget} is closed", who)
        data = BudgetWeightChanged(
            budget=budget,
            weight=body.weight,
            pool=body.pool,
            changed_by=who.user,
            reason=body.reason,
        )
        envelope = publish(data, who, "")
        if not visible(envelope):
            return accepted(response, envelope, budget=budget)
        return {"budget": budget, "weight": body.weight, "pool": body.pool, "event_id": envelope.id}

    @app.post("/budgets/{budget:path}/members", tags=["budgets"], status_code=201)
    def add_member(
        budget: str, body: MemberRequest, who: User, response: Response
    ) -> dict[str, Any]:
        """Grant ``user`` a role on the budget's subtree: a manager of the budget (or above)."""
        ready()
        with view.read() as state:
            budget_or_404(state, budget)
            refusal = auth.may_manage(who, state.tree, budget)
            if refusal is not None:
                raise _refuse(status.HTTP_403_FORBIDDEN, refusal, who)
            if body.role in state.tree.nodes[budget].members.get(body.user, set()):
                response.status_code = status.HTTP_200_OK
                return {"budget": budget, "user": body.user, "role": body.role, "changed": False}
        data = MembershipGranted(budget=budget, user=body.user, role=body.role, granted_by=who.user)
        envelope = publish(data, who, "")
        if not visible(envelope):
            return accepted(response, envelope, budget=budget)
        return {"budget": budget, "user": body.user, "role": body.role, "changed": True}

    # -- nodes ----------------------------------------------------------------------------
    @app.get("/nodes", tags=["nodes"])
    def nodes(who: User, pool: str | None = None) -> dict[str, Any]:
        with view.read() as state:
            found = [
                queries.node_view(n)
                for _, n in sorted(state.cluster.nodes.items())
                if pool is None or n.pool == pool
            ]
            return {"nodes": found}

    @app.get("/nodes/{node}", tags=["nodes"])
    def node(node: str, who: User) -> dict[str, Any]:
        with view.read() as state:
            found = state.cluster.nodes.get(node)
            if found is None:
                raise _refuse(status.HTTP_404_NOT_FOUND, f"unknown node {node!r}", who)
            return queries.node_view(found)

    def node_action(
        node: str, who: User, response: Response, cordon: bool, reason: str
    ) -> dict[str, Any]:
        ready()
        refusal = auth.may_operate_nodes(who)
        if refusal is not None:
            raise _refuse(status.HTTP_403_FORBIDDEN, refusal, who)
        with view.read() as state:
            found = state.cluster.nodes.get(node)
            if found is None:
                raise _refuse(status.HTTP_404_NOT_FOUND, f"unknown node {node!r}", who)
            if found.cordoned == cordon:
                return queries.node_view(found)  # already so: nothing to publish
        data: EventData = (
            NodeCordoned(node=node, cordoned_by=who.user, reason=reason)
            if cordon
            else NodeUncordoned(node=node, uncordoned_by=who.user)
        )
        envelope = publish(data, who, "")
        if not visible(envelope):
            return accepted(response, envelope, node=node)
        with view.read() as state:
            return queries.node_view(state.cluster.nodes[node])

    @app.post("/nodes/{node}/cordon", tags=["nodes"])
    def cordon(
        node: str, who: User, response: Response, body: CordonRequest | None = None
    ) -> dict[str, Any]:
        """Stop new placements on a node (admins); its work drains as contracts end."""
        return node_action(node, who, response, True, body.reason if body else "")

    @app.post("/nodes/{node}/uncordon", tags=["nodes"])
    def uncordon(node: str, who: User, response: Response) -> dict[str, Any]:
        """Return a node to service (admins)."""
        return node_action(node, who, response, False, "")

    # Reports (read models: ``engine`` or $FAIRSHARE_DATABASE_URL) and the dashboard.
    from services.dashboard.api import mount_dashboard
    from services.reports.api import reports_router

    app.include_router(reports_router(engine))
    mount_dashboard(app, view, clock, engine=engine)
    return app


def existing_fields(workload: WorkloadState) -> dict[str, Any]:
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
    }


def _same_submission(existing: dict[str, Any], data: WorkloadSubmitted, workload_id: str) -> None:
    differing = [f for f in SUBMIT_FIELDS if existing.get(f) != getattr(data, f)]
    if differing:
        raise _refuse(
            status.HTTP_409_CONFLICT,
            f"workload {workload_id} was already submitted with other "
            f"{', '.join(differing)}; choose a new workload_id",
        )


__all__ = ["create_app"]
