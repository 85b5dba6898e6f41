"""The FastAPI application, assembled: the application context, the routers, the mapping of
refusals to HTTP, and the dashboard and reports served alongside.

Reads answer from the live view, writes go through :mod:`services.api.writes` (which
publish events and nothing else). Every refusal is a :class:`DomainError` mapped to a status
code and body here, and only here.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable

from fastapi import FastAPI, Request, status
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from sqlalchemy import Engine
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from events.times import DEFAULT_WINDOW_S
from services.api.application import WRITE_TIMEOUT_S, Application, Clock
from services.api.auth import Principal
from services.api.docs_pages import serve_docs
from services.api.errors import (
    Conflict,
    DomainError,
    Forbidden,
    Invalid,
    NotFound,
    TooLarge,
    Unavailable,
)
from services.api.gauges import ViewGauges
from services.api.metrics import RequestMetrics, metrics_endpoint
from services.api.routes import (
    budgets,
    dashboard,
    meta,
    money,
    nodes,
    prices,
    queue,
    reports,
    workloads,
)
from services.api.security import install_security_headers
from services.api.tokens import TokenSource
from services.api.validation import BodyLimit, request_validation_error
from services.api.view import LiveView
from services.bus.kafka import FatalBusError
from services.bus.port import EventPublisher
from services.runtime.service import EXIT_CRASH, exit_now

log = logging.getLogger(__name__)

#: In the order their paths are matched.
ROUTERS = (
    meta.router,
    workloads.router,
    queue.router,
    money.router,  # before budgets: /budgets/{path} would take /budgets/{path}/statement
    budgets.router,
    nodes.router,
    prices.router,
)

#: Refusals answered ``{"detail": message}`` with their status code.
REFUSALS: dict[type[DomainError], int] = {
    NotFound: status.HTTP_404_NOT_FOUND,
    Forbidden: status.HTTP_403_FORBIDDEN,
    Conflict: status.HTTP_409_CONFLICT,
    TooLarge: status.HTTP_413_CONTENT_TOO_LARGE,
}


def create_app(
    view: LiveView,
    publisher: EventPublisher,
    tokens: dict[str, Principal] | TokenSource,
    clock: Clock = time.time,
    *,
    window_s: int = DEFAULT_WINDOW_S,
    read_your_writes_s: float = 5.0,
    flush_timeout_s: float = WRITE_TIMEOUT_S,
    engine: Engine | None = None,
) -> FastAPI:
    """The API over ``view`` (read) and ``publisher`` (write), with bearer ``tokens`` (a
    table, or the tokens file re-read as it changes); the reports and the dashboard read the
    read models of ``engine`` (or ``$FAIRSHARE_DATABASE_URL``)."""
    app = FastAPI(
        docs_url=None,  # served below from the package's own copies (docs_pages.py)
        redoc_url=None,
        title="Fairshare API",
        version="1",
        description="GPU time by budgets: submit and inspect workloads, budgets and nodes. "
        "Every accepted write is an event on the log.",
    )
    app.state.view = view
    app.state.gauges = ViewGauges(view, clock, window_s)
    app.state.publisher = publisher
    app.state.tokens = tokens
    app.state.application = Application(
        view,
        publisher,
        clock,
        window_s=window_s,
        read_your_writes_s=read_your_writes_s,
        flush_timeout_s=flush_timeout_s,
        read_models=engine,
    )
    app.add_exception_handler(DomainError, domain_error)
    app.add_exception_handler(FatalBusError, fatal_bus_error)
    app.add_exception_handler(RequestValidationError, request_validation_error)
    app.add_middleware(WhileReadingTheLog)
    app.add_middleware(LogCrashes)  # outside it: its errors are logged too
    app.add_middleware(BodyLimit)  # nothing reads a body over the cap
    install_security_headers(app)  # last added = outermost: every answer, 413s too, has them
    app.add_middleware(RequestMetrics)  # outermost of all: every answer is timed
    app.add_route("/metrics", metrics_endpoint, include_in_schema=False)
    serve_docs(app)
    for router in ROUTERS:
        app.include_router(router)
    _serve_reports_and_dashboard(app, view, clock, engine)
    return app


async def domain_error(request: Request, error: Exception) -> JSONResponse:
    """A refusal of the application layer or the read side, in HTTP: FastAPI's own shape
    (``{"detail": ...}``; for 422 a list naming the field, as its validation errors do)."""
    if isinstance(error, Invalid):
        detail = [{"loc": list(error.loc), "msg": error.message, "type": "value_error"}]
        return JSONResponse({"detail": detail}, status.HTTP_422_UNPROCESSABLE_CONTENT)
    if isinstance(error, Unavailable):
        return JSONResponse(
            {"detail": error.message},
            status.HTTP_503_SERVICE_UNAVAILABLE,
            headers={"Retry-After": str(error.retry_after_s)},
        )
    assert isinstance(error, DomainError)
    code = next(
        (c for kind, c in REFUSALS.items() if isinstance(error, kind)),
        status.HTTP_400_BAD_REQUEST,
    )
    log.info("request refused", extra={"status": code, "reason": error.message, "user": error.user})
    return JSONResponse({"detail": error.message}, code)


#: What answers while the view is still reading the log's history: liveness (with how far it
#: has read), the metrics (a slow catch-up is what they show) and the API's description.
#: Everything else would answer from a partial state.
_ANSWERS_WHILE_READING = ("/health", "/metrics", "/docs", "/openapi.json")


class WhileReadingTheLog:
    """Until the view has read the log's history once, a 503 with Retry-After for every
    request but ``/health``: the API listens at once (a long history no longer leaves
    ``/health`` unreachable while it folds), and no read answers from half the log.

    Plain ASGI, as are the API's other middlewares: Starlette's ``BaseHTTPMiddleware`` (what
    ``@app.middleware("http")`` makes) runs every request through a task group and memory
    streams, and two of them took ~30% of the API's CPU under a burst of submissions."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and not str(scope["path"]).startswith(_ANSWERS_WHILE_READING):
            application: Application = scope["app"].state.application
            try:
                application.ready()
            except Unavailable as error:
                answer = await domain_error(Request(scope), error)
                await answer(scope, receive, send)
                return
        await self.app(scope, receive, send)


class LogCrashes:
    """Any error no handler answered: a 500 with a plain message, and one structured log line
    with the request and the whole traceback (the server alone would log only "Exception in
    ASGI application"). Every 500 is a bug to fix: the fuzz test asserts there are none."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = False

        async def noting_start(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, receive, noting_start)
        except Exception as error:
            log.exception(
                "request failed",
                extra={
                    "method": scope.get("method", ""),
                    "path": scope["path"],
                    "error_type": type(error).__name__,
                },
            )
            if started:  # half an answer is out: only the server can end the connection
                raise
            answer = JSONResponse(
                {"detail": "internal error (logged); please report it"},
                status.HTTP_500_INTERNAL_SERVER_ERROR,
            )
            await answer(scope, receive, send)


#: How the API process ends once its bus client is dead (replaced in tests).
end_process: Callable[[int], None] = os._exit
#: Time for the 503 to reach the client before the process ends.
EXIT_DELAY_S = 0.2


def fatal_bus_error(_request: Request, error: Exception) -> JSONResponse:
    """Crash-only: the API's Kafka client is dead (a fatal librdkafka error), so no later
    request could be served either. Answer this one 503 (writes are idempotent: the client
    retries the same request), log why, and end the process; its supervisor restarts it with a
    fresh client and a view rebuilt from the log. Lingering would answer 500 to every write."""
    exit_now(EXIT_CRASH, f"fatal bus error: {error}", error)
    threading.Timer(EXIT_DELAY_S, end_process, (EXIT_CRASH,)).start()
    return JSONResponse(
        {"detail": "the API lost its connection to the log and restarts; retry"},
        status.HTTP_503_SERVICE_UNAVAILABLE,
        headers={"Retry-After": "2"},
    )


def _serve_reports_and_dashboard(
    app: FastAPI, view: LiveView, clock: Clock, engine: Engine | None
) -> None:
    """The reports' routes and the dashboard (its page and its data routes)."""
    app.include_router(reports.reports_router(engine))
    dashboard.mount_dashboard(app, view, clock, engine=engine)


__all__ = ["create_app"]
