"""Signing a browser in to the dashboard: the token is checked once and kept in a cookie.

``GET /dashboard/session``: whom the browser is signed in as, if anyone; ``POST
/dashboard/session`` (JSON ``{"token": ...}``) signs the browser in: the token is checked and
set as an ``HttpOnly``, ``SameSite=Strict`` cookie, which the page's own reads then carry
(:mod:`services.api.deps`: a cookie authorises reads only). ``DELETE /dashboard/session`` signs
out. Both need a JSON or a non-simple request, which a page of another site cannot send
without the API's consent (it gives none: no CORS). The cookie lasts 12 hours, or until the
token expires if that is sooner: a browser should not keep offering what the API will refuse.
"""

from __future__ import annotations

import logging
import time

from fastapi import APIRouter, Depends, HTTPException, Request, Response, status
from pydantic import BaseModel, ConfigDict, Field

from services.api.deps import SESSION_COOKIE, expired_detail, token_table

log = logging.getLogger(__name__)

#: How long a dashboard sign-in lasts (the cookie's Max-Age).
SESSION_MAX_AGE_S = 12 * 3600


class SignIn(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    token: str = Field(min_length=1, max_length=1024)


class Session(BaseModel):
    """Who the browser is signed in as; ``user`` None: not signed in."""

    user: str | None
    admin: bool = False


def _json_only(request: Request) -> None:
    """A cross-site form can post ``text/plain`` or form data without asking; only a page of
    this origin can send JSON here (a cross-origin one would need CORS, which the API never
    grants), so signing a victim's browser in as someone else takes more than a form."""
    kind = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if kind != "application/json":
        raise HTTPException(status.HTTP_415_UNSUPPORTED_MEDIA_TYPE, detail="send the token as JSON")


def session_router() -> APIRouter:
    router = APIRouter(prefix="/dashboard/session", tags=["dashboard"])

    @router.get("")
    def session(request: Request) -> Session:
        """Whom the session cookie names (200 either way: a page asking whether it is signed
        in is not an error)."""
        token = request.cookies.get(SESSION_COOKIE)
        who = None if token is None else token_table(request).authenticate(token)
        return Session(user=None) if who is None else Session(user=who.user, admin=who.admin)

    @router.post("", dependencies=[Depends(_json_only)])
    def sign_in(body: SignIn, request: Request, response: Response) -> Session:
        """Check a token and keep it in an HttpOnly, SameSite=Strict cookie for the page's
        reads (writes still need ``Authorization: Bearer``)."""
        found = token_table(request).match(body.token)
        if found is None:
            log.info("dashboard sign-in refused: unknown token")
            raise HTTPException(status.HTTP_401_UNAUTHORIZED, detail="unknown token")
        now = time.time()
        if found.expired(now):
            log.info("dashboard sign-in refused: expired token", extra={"user": found.who.user})
            raise HTTPException(
                status.HTTP_401_UNAUTHORIZED, detail=expired_detail(found.expires_at)
            )
        who = found.who
        max_age = SESSION_MAX_AGE_S
        if found.expires_at is not None:
            max_age = min(max_age, int(found.expires_at - now))
        response.set_cookie(
            SESSION_COOKIE,
            body.token,
            max_age=max_age,
            path="/",
            secure=request.url.scheme == "https",
            httponly=True,
            samesite="strict",
        )
        response.headers["Cache-Control"] = "no-store"
        return Session(user=who.user, admin=who.admin)

    @router.delete("", status_code=status.HTTP_204_NO_CONTENT)
    def sign_out(request: Request) -> Response:
        """Forget the session cookie (DELETE: no other site's page can send one here)."""
        response = Response(status_code=status.HTTP_204_NO_CONTENT)
        response.delete_cookie(
            SESSION_COOKIE,
            path="/",
            secure=request.url.scheme == "https",
            httponly=True,
            samesite="strict",
        )
        return response

    return router
