"""The command-line client of the Fairshare API (``fairshare submit``, ``queue``, ``why`` ...).

The names below are loaded on first use: ``fairshare`` imports :mod:`.commands` (and so this
package) on every start, and must not pay for the HTTP client before a command calls the API.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from services.client.api import ApiError, FairshareClient
    from services.client.commands import client_app, register

__all__ = ["ApiError", "FairshareClient", "client_app", "register"]


def __getattr__(name: str) -> Any:
    if name in ("ApiError", "FairshareClient"):
        from services.client import api

        return getattr(api, name)
    if name in ("client_app", "register"):
        from services.client import commands

        return getattr(commands, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
