"""Headers that make every answer of the API safe to open in a browser, and the access-log
filter that keeps a token pasted into a URL out of the logs.

* ``Content-Security-Policy``: scripts, styles, images and requests from the API's own origin
  only, no inline script or style, no plugins, no ``<base>``, never framed. The dashboard puts
  data from the log (budget names, reasons, commands) into the page; if one ever carried markup
  that escaping missed, the browser still would not run it.
* ``Referrer-Policy: no-referrer``: a URL of the API never travels to another site.
* ``X-Content-Type-Options: nosniff``: JSON is never run as a script, nor a log as HTML.
* ``X-Frame-Options: DENY``: the old browsers' ``frame-ancestors 'none'``.

Swagger UI at ``/docs`` loads its code from the API itself (``docs_pages.py``) and starts it
with one inline script: that page alone gets a policy naming the exact hash of each inline
script it serves (computed from the page, which FastAPI builds from the app's own settings), so
it works without allowing inline script in general. ReDoc at ``/redoc`` styles itself with
``<style>`` elements it makes as it runs: that page alone allows inline styles (never inline
script), and workers from ``blob:`` (its search). Neither page names another origin.
"""

from __future__ import annotations

import base64
import hashlib
import logging
import re
from typing import Any

from fastapi import FastAPI
from starlette.datastructures import MutableHeaders
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from services.api.docs_pages import DOCS, REDOC

_COMMON = "object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
#: Every answer but the Swagger UI page.
CONTENT_SECURITY_POLICY = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    f"connect-src 'self'; {_COMMON}"
)
#: The ReDoc page (``docs_pages.REDOC``): inline styles, its search worker; script from here.
REDOC_POLICY = (
    "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; "
    f"img-src 'self' data:; worker-src 'self' blob:; connect-src 'self'; {_COMMON}"
)

HEADERS = {
    "Referrer-Policy": "no-referrer",
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
}

_INLINE_SCRIPT = re.compile(rb"<script>(.*?)</script>", re.DOTALL)


def install_security_headers(app: FastAPI) -> None:
    """Send the headers above on every answer of ``app`` (once, however often called)."""
    if getattr(app.state, "security_headers", False):
        return
    app.state.security_headers = True
    app.add_middleware(SecurityHeaders, docs_path=DOCS, redoc_path=REDOC)


def docs_policy(page: bytes) -> str:
    """The policy of the Swagger UI page: the API's origin, and each of its inline scripts by
    hash."""
    hashes = " ".join(
        "'sha256-" + base64.b64encode(hashlib.sha256(script).digest()).decode() + "'"
        for script in _INLINE_SCRIPT.findall(page)
    )
    return (
        f"default-src 'self'; script-src 'self' {hashes}; style-src 'self'; "
        f"img-src 'self' data:; connect-src 'self'; {_COMMON}"
    )


class SecurityHeaders:
    """ASGI middleware (not a ``BaseHTTPMiddleware``: it must not buffer or re-wrap streamed
    answers, and must see the ones an exception handler made)."""

    def __init__(
        self, app: ASGIApp, docs_path: str | None = None, redoc_path: str | None = None
    ) -> None:
        self.app = app
        self.docs_path = docs_path
        self.redoc_path = redoc_path

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        if self.docs_path is not None and scope["path"] == self.docs_path:
            await self.app(scope, receive, _DocsPage(send))
            return
        policy = CONTENT_SECURITY_POLICY
        if self.redoc_path is not None and scope["path"] == self.redoc_path:
            policy = REDOC_POLICY

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                _set(message, policy)
            await send(message)

        await self.app(scope, receive, send_with_headers)


class _DocsPage:
    """Holds the Swagger UI page back until it is whole, to hash its inline scripts."""

    def __init__(self, send: Send) -> None:
        self.send = send
        self.start: Message | None = None
        self.chunks: list[bytes] = []

    async def __call__(self, message: Message) -> None:
        if message["type"] == "http.response.start":
            self.start = message
            return
        if message["type"] != "http.response.body" or self.start is None:
            await self.send(message)
            return
        self.chunks.append(message.get("body", b""))
        if message.get("more_body", False):
            return
        page = b"".join(self.chunks)
        _set(self.start, docs_policy(page))
        await self.send(self.start)
        await self.send({"type": "http.response.body", "body": page})


def _set(start: Message, policy: str) -> None:
    headers = MutableHeaders(scope=start)
    headers["Content-Security-Policy"] = policy
    for name, value in HEADERS.items():
        headers[name] = value


# -- access logs ------------------------------------------------------------------------------
_TOKEN_IN_QUERY = re.compile(r"([?&](?:token|access_token)=)[^&#\s\"]*", re.IGNORECASE)


class RedactTokenQuery(logging.Filter):
    """Blanks ``token=`` / ``access_token=`` values in log lines (uvicorn's access log prints
    each request's path with its query). The API refuses such URLs, but the request is logged
    before it is answered, and an old bookmark or a pasted link must not leave a token there."""

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.args, tuple):
            record.args = tuple(_redact(arg) for arg in record.args)
        if isinstance(record.msg, str):
            record.msg = _TOKEN_IN_QUERY.sub(r"\1[redacted]", record.msg)
        return True


def _redact(value: Any) -> Any:
    return _TOKEN_IN_QUERY.sub(r"\1[redacted]", value) if isinstance(value, str) else value


def redact_access_log(logger_name: str = "uvicorn.access") -> None:
    """Install :class:`RedactTokenQuery` on the access logger (once)."""
    logger = logging.getLogger(logger_name)
    if not any(isinstance(f, RedactTokenQuery) for f in logger.filters):
        logger.addFilter(RedactTokenQuery())
