"""FastAPI dependencies of every router of the app (the API's own, the dashboard's and the
reports'): who is calling, and the application context a request works on.

They live apart from :mod:`services.api.app` so that routers the app mounts can use the same
token rule without importing the module that mounts them.
"""

from __future__ import annotations

import logging
from typing import Annotated

from fastapi import Depends, HTTPException, Request, status
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from services.api.application import Application
from services.api.auth import Principal

log = logging.getLogger(__name__)

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


def context(request: Request) -> Application:
    """The application layer the app was built with (``create_app`` keeps it in the state)."""
    application: Application = request.app.state.application
    return application


#: The caller (401 without a valid token).
User = Annotated[Principal, Depends(principal)]
#: The application layer: the view, the log, the clock and the limits of this app.
Context = Annotated[Application, Depends(context)]
