"""The API server's refusals, in words."""

from __future__ import annotations

import json

from kubernetes.client.exceptions import ApiException


def why(error: ApiException) -> str:
    """The API server's message (its Status body), else the HTTP status."""
    try:
        body = json.loads(error.body or "{}")
        message = body.get("message")
    except (ValueError, AttributeError):
        message = None
    return f"{error.status} {message or error.reason}"
