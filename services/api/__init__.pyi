"""The HTTP API of Fairshare (see ``__init__.py``): the names its package exports."""

from .app import create_app as create_app
from .auth import (
    Principal as Principal,
    default_tokens as default_tokens,
    load_tokens as load_tokens,
)
from .view import LiveView as LiveView
