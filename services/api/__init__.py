"""The HTTP API of Fairshare (FastAPI): reads the live state folded from the log, and turns
authorised, valid requests into events (never anything else)."""

from services.api.app import create_app
from services.api.auth import Principal, default_tokens, load_tokens
from services.api.view import LiveView

__all__ = ["LiveView", "Principal", "create_app", "default_tokens", "load_tokens"]
