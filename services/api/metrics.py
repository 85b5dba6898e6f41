"""The API's ``/metrics`` and its request latency, by method, route and status.

The route is the template the request matched (``/workloads/{workload_id}``), never the raw
path: a label value per workload id, or per path a scanner tries, would be a series each that
Prometheus keeps. A request no route matched is ``unmatched``, and a method outside HTTP's
usual ones is ``other``, for the same reason. Timing wraps the whole app, so the 413s of the
body limit, the 503s while the view reads the log and the 500s of a crash are counted too.

``/metrics`` itself is unauthenticated, like ``/health``: what it exposes is counts per pool,
budget and route, which every signed-in user can see in the dashboard anyway.
"""

from __future__ import annotations

import time
from typing import Any

from fastapi import Request, Response
from prometheus_client import REGISTRY, Histogram
from prometheus_client.exposition import choose_encoder
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from services.metrics import common as _common  # noqa: F401 (restarts, dead letters)
from services.metrics import lag as _lag  # noqa: F401 (registers the lag of every reader)

API_REQUEST_DURATION = Histogram(
    "fairshare_api_request_duration_seconds",
    "HTTP requests answered by the API, by method, route template and status code",
    ["method", "route", "status"],
)

METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})


def route_label(scope: Scope) -> str:
    route: Any = scope.get("route")
    path = getattr(route, "path", None)
    return path if isinstance(path, str) and path else "unmatched"


def method_label(method: str) -> str:
    return method if method in METHODS else "other"


class RequestMetrics:
    """ASGI middleware: the duration of every HTTP request, labelled once it is answered."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = 500  # an exception that escapes every handler is answered 500 by the server

        async def send_and_note(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
            await send(message)

        try:
            await self.app(scope, receive, send_and_note)
        finally:
            API_REQUEST_DURATION.labels(
                method_label(str(scope.get("method", ""))), route_label(scope), str(status)
            ).observe(time.perf_counter() - started)


def metrics_endpoint(request: Request) -> Response:
    """This process's metrics and the gauges of its view (``gauges.py``), in the format the
    scraper asked for (OpenMetrics or text)."""
    from services.api.gauges import WithGauges

    encoder, content_type = choose_encoder(request.headers.get("accept", ""))
    gauges = getattr(request.app.state, "gauges", None)
    return Response(encoder(WithGauges(REGISTRY, gauges)), media_type=content_type)
