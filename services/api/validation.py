"""Bad requests answered as such: every malformed body a 422 (or 413 when too large), never a
500, and nothing read beyond the request size cap.

FastAPI's own 422 echoes each failing ``input`` back: an input of NaN or a lone surrogate
(both valid in Python's JSON parser) then cannot be written as JSON, and the client got a 500
instead. Here the echo is kept only when it is safe and short. A ``spec`` over its cap
(``events.types.MAX_SPEC_BYTES``) is a 413 naming the cap, as is a request body over
:data:`MAX_REQUEST_BYTES`: the broker would refuse such a record anyway, and a 503 would tell
the client to retry what can never succeed.
"""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from fastapi import Request, status
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse

from events.types import MAX_SPEC_BYTES, SpecTooLargeError

#: The largest request body the API reads (a spec at its cap, and the rest of a submission).
MAX_REQUEST_BYTES = 2 * MAX_SPEC_BYTES
#: How much of a failing input a 422 echoes back.
ECHO_CHARS = 120

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


async def request_validation_error(_request: Request, error: Exception) -> JSONResponse:
    """FastAPI's 422 shape (``detail``: a list of ``loc``, ``msg``, ``type``), with inputs
    echoed only when JSON can carry them, and 413 for a spec over its cap."""
    assert isinstance(error, RequestValidationError)
    details = []
    for item in error.errors():
        ctx = item.get("ctx") or {}
        if isinstance(ctx.get("error"), SpecTooLargeError):
            return JSONResponse(
                {"detail": f"spec is over {MAX_SPEC_BYTES} bytes as JSON (the cap of a spec)"},
                status.HTTP_413_CONTENT_TOO_LARGE,
            )
        detail: dict[str, Any] = {
            "loc": [_printable(part) for part in item.get("loc", ())],
            "msg": str(_printable(item.get("msg", ""))),
            "type": item.get("type", "value_error"),
        }
        echo = _echo(item.get("input"))
        if echo is not None:
            detail["input"] = echo
        details.append(detail)
    return JSONResponse({"detail": details}, status.HTTP_422_UNPROCESSABLE_CONTENT)


def _echo(value: Any) -> str | int | bool | float | None:
    """A failing input as the 422 may show it: scalars only, finite, printable, short."""
    if isinstance(value, bool | int):
        return value if abs(value) < 10**18 else None
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, str):
        text = str(_printable(value))
        return text if len(text) <= ECHO_CHARS else text[:ECHO_CHARS] + "..."
    return None


def _printable(value: object) -> str | int:
    """Strings with control characters and lone surrogates written as escapes (``loc`` keeps
    its list indexes as numbers)."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    text = str(value)
    if text.isprintable():
        return text
    return text.encode("unicode_escape", "backslashreplace").decode("ascii")


class BodyLimit:
    """Reads at most :data:`MAX_REQUEST_BYTES` of a request body, answering 413 beyond it
    (before any handler runs, so nothing is parsed, let alone published). The body is read
    here in full (it is small by then) and handed on as one message."""

    def __init__(self, app: ASGIApp, max_bytes: int = MAX_REQUEST_BYTES) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = dict(scope.get("headers") or []).get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.max_bytes:
            await self._refuse(send)
            return
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] != "http.request":
                break  # the client left: let the app see it as usual
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_bytes:
                await self._refuse(send)
                return
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": b"".join(chunks), "more_body": False}
            return await receive()

        await self.app(scope, replay, send)

    async def _refuse(self, send: Send) -> None:
        response = JSONResponse(
            {"detail": f"request body is over {self.max_bytes} bytes (the API's cap)"},
            status.HTTP_413_CONTENT_TOO_LARGE,
        )
        await response({"type": "http"}, _no_body, send)


async def _no_body() -> Message:
    return {"type": "http.disconnect"}
