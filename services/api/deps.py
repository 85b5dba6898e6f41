"""FastAPI dependencies of every router of the app (the API's own, the dashboard's and the
reports'): who is calling, and the application context a request works on.

They live apart from :mod:`services.api.app` so that routers the app mounts can use the same
token rule without importing the module that mounts them.

A caller is recognised by ``Authorization: Bearer <token>``, or, for reads only, by the
dashboard's session cookie (set by ``POST /dashboard/session``): the browser attaches a cookie
to every request by itself, so a write must never be authorised by one. With the cookie
``HttpOnly`` and ``SameSite=Strict``, and writes needing the header, a page of another site can
neither read the token nor make the browser write with it (no CSRF). The token is never read
from the URL: URLs end up in access logs, browser history and ``Referer`` headers.

An expired token is refused with a 401 that says so and how to get a new one: only its holder
can present it, and "unknown" would send them hunting for a typo. An unknown token's 401 says
nothing more than that.
"""

from __future__ import annotations

import logging
import time
from typing import Annotated

from fastapi import Depends, HTTPException, Request, status
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from services.api.application import Application
from services.api.tokens import Principal, TokenTable
from services.api.tokens_file import timestamp

log = logging.getLogger(__name__)

_bearer = HTTPBearer(auto_error=False, description="a token from the tokens file")

#: The dashboard's session cookie: the token itself, HttpOnly, SameSite=Strict.
SESSION_COOKIE = "fairshare_session"
#: Methods a session cookie may authorise: reads, which change nothing.
COOKIE_METHODS = frozenset({"GET", "HEAD"})


def principal(
    request: Request,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
) -> Principal:
    """The caller, from the bearer token or (reads only) the session cookie; 401 otherwise."""
    token = credentials.credentials if credentials is not None else None
    if token is None and request.method in COOKIE_METHODS:
        token = request.cookies.get(SESSION_COOKIE)
    if token is None:
        raise HTTPException(
            status.HTTP_401_UNAUTHORIZED,
            detail="missing bearer token (send 'Authorization: Bearer <token>')",
            headers={"WWW-Authenticate": "Bearer"},
        )
    found = token_table(request).match(token)
    if found is None:
        log.info("unknown token refused")
        raise HTTPException(
            status.HTTP_401_UNAUTHORIZED,
            detail="unknown bearer token",
            headers={"WWW-Authenticate": "Bearer"},
        )
    if found.expired(time.time()):
        log.info("expired token refused", extra={"user": found.who.user})
        raise HTTPException(
            status.HTTP_401_UNAUTHORIZED,
            detail=expired_detail(found.expires_at),
            headers={"WWW-Authenticate": 'Bearer error="invalid_token"'},
        )
    return found.who


def expired_detail(expires_at: float | None) -> str:
    """What a holder of an expired token is told: when, and the way to a new one."""
    when = "" if expires_at is None else f" at {timestamp(expires_at)}"
    return (
        f"this token expired{when}: ask an admin for a new one "
        "(`fairshare tokens renew USER` issues it)"
    )


def token_table(request: Request) -> TokenTable:
    """The app's tokens now: a :class:`TokenTable` of hashes, or the tokens file's latest
    (:class:`~services.api.tokens_file.TokensFile`). A plain dict of tokens in clear would be a
    bug (every token refused, or kept in clear), so it fails loudly."""
    tokens = request.app.state.tokens
    table = tokens.current() if hasattr(tokens, "current") else tokens
    if not isinstance(table, TokenTable):
        raise TypeError(
            "the app's tokens must be a TokenTable (hashes): build it with load_tokens(path), "
            "TokensFile(path), default_tokens() or TokenTable.of_tokens(...)"
        )
    return table


def context(request: Request) -> Application:
    """The application layer the app was built with (``create_app`` keeps it in the state)."""
    application: Application = request.app.state.application
    return application


#: The caller (401 without a valid token).
User = Annotated[Principal, Depends(principal)]
#: The application layer: the view, the log, the clock and the limits of this app.
Context = Annotated[Application, Depends(context)]
