"""Why the API refuses a request, in its own terms; :mod:`services.api.app` maps each to HTTP
in one place.

The application layer and the read side raise these instead of HTTP exceptions so that the
rules can be called (and tested) without a web framework, and so that one status code and one
body shape belong to each kind of refusal.
"""

from __future__ import annotations

from typing import Literal


class DomainError(Exception):
    """A refused request; ``message`` is what the client is told, ``user`` who asked (for the
    log line, when known)."""

    def __init__(self, message: str, *, user: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.user = user


class NotFound(DomainError):  # noqa: N818 (named for the refusal, as HTTP names it)
    """An unknown budget, workload, node or pool (404)."""


class Forbidden(DomainError):  # noqa: N818 (named for the refusal, as HTTP names it)
    """The caller may not do this; the message names the rule (403)."""


class Conflict(DomainError):  # noqa: N818 (named for the refusal, as HTTP names it)
    """The request contradicts the state: the same workload id with other content, a closed
    budget, cancelling finished work (409)."""


#: Where an invalid field is: the first element of a 422's ``loc``, as FastAPI names it.
Location = Literal["body", "query", "path"]


class Invalid(DomainError):  # noqa: N818 (named for the refusal, as HTTP names it)
    """A field that is well-formed but not acceptable here: a budget that is not a leaf, an
    unknown pool, a query's time that is none (422, naming the field as FastAPI's own
    validation errors do). The one 422 of the routes and the application layer alike, so that
    no route builds the body by hand."""

    def __init__(
        self,
        field: str | tuple[str | int, ...],
        message: str,
        *,
        location: Location = "body",
        user: str | None = None,
    ) -> None:
        super().__init__(message, user=user)
        self.field: tuple[str | int, ...] = (field,) if isinstance(field, str) else field
        self.location: Location = location

    @property
    def loc(self) -> tuple[str | int, ...]:
        """The field's full path, as a 422's ``loc`` gives it (``("query", "since")``)."""
        return (self.location, *self.field)


class TooLarge(DomainError):  # noqa: N818 (named for the refusal, as HTTP names it)
    """The log refused the event for its size: retrying cannot help (413, never 503)."""


class Unavailable(DomainError):  # noqa: N818 (named for the refusal, as HTTP names it)
    """The view is still reading the log (nothing was recorded), or the log did not
    acknowledge the events in time (they may still be recorded, if they reached it before the
    link failed); the same request may be retried after ``retry_after_s``, and takes effect
    once either way (503)."""

    def __init__(self, message: str, *, retry_after_s: int, user: str | None = None) -> None:
        super().__init__(message, user=user)
        self.retry_after_s = retry_after_s
