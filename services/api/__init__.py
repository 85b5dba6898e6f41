"""The HTTP API of Fairshare (FastAPI): reads the live state folded from the log, and turns
authorised, valid requests into events (never anything else).

``create_app`` and ``LiveView`` are loaded on first use: the CLI client imports
:mod:`services.api.models` (and so this package) and must not pay for FastAPI or Kafka.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from services.api.auth import Principal, default_tokens, load_tokens

if TYPE_CHECKING:
    from services.api.app import create_app
    from services.api.view import LiveView

__all__ = ["LiveView", "Principal", "create_app", "default_tokens", "load_tokens"]


def __getattr__(name: str) -> Any:
    if name == "create_app":
        from services.api.app import create_app

        return create_app
    if name == "LiveView":
        from services.api.view import LiveView

        return LiveView
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
