"""Who a request comes from, and how the API recognises a token without ever holding it.

A token is a random secret (:func:`new_token`: 32 bytes from ``secrets``, 256 bits); the API
keeps only its SHA-256, in memory and in the tokens file (:mod:`services.api.tokens_file`), so
a copied file or a memory dump lets nobody in. A plain, unsalted hash is enough because the
input is random and long: there is no dictionary to try and no search that could finish (a
slow, salted KDF protects *guessable* secrets such as passwords, which these are not).

A presented token is hashed and compared with *every* known hash by
:func:`hmac.compare_digest`, never looked up in a dictionary of tokens: how long the answer
takes then depends on neither how much of a valid token a caller guessed nor which entry
matched.

A token may expire (:attr:`TokenTable.expires`, from the file's ``expires``): the comparison
still runs over every entry, and only then is the one that matched checked against the clock,
so an expired token costs the same time as a valid one and an unknown one.

The demo tokens (``admin-token`` ...) are public by design; the API serves them only on a
loopback address (:func:`services.api.serve.tokens_for`).
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Protocol

#: Random bytes in a new token (``secrets.token_urlsafe``: 43 URL-safe characters).
TOKEN_BYTES = 32


@dataclass(frozen=True)
class Principal:
    """Who a request comes from."""

    user: str
    admin: bool = False
    #: Reads every budget's money (statements, forecasts), as admins do, and changes nothing
    #: an admin may: a finance team's or a controller's token (docs/security.md, roles).
    finance: bool = False


def hash_token(token: str) -> str:
    """The SHA-256 of a token, in hex: the only form in which the API keeps a token."""
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


def new_token() -> str:
    """A fresh token: unguessable, and safe in an HTTP header or a cookie as it is."""
    return secrets.token_urlsafe(TOKEN_BYTES)


@dataclass(frozen=True)
class Match:
    """The entry a presented token matched: whose it is and until when it may be used.

    Kept apart from :class:`Principal` so that a caller cannot take an expired token's holder
    for the caller by forgetting to look at the date: :meth:`TokenTable.authenticate` does."""

    who: Principal
    #: Unix seconds; None: the token never expires.
    expires_at: float | None = None

    def expired(self, now: float) -> bool:
        return self.expires_at is not None and now >= self.expires_at


class TokenTable(dict[str, Principal]):
    """Token hash (SHA-256, hex) -> who holds that token.

    A dict so that it is what ``create_app`` has always taken, but keyed by hashes: looking up
    a presented token here finds nothing; :meth:`match` and :meth:`authenticate` are the ways
    in. :attr:`expires` says when each hash stops being accepted (absent: never)."""

    def __init__(
        self,
        entries: Mapping[str, Principal] | Iterable[tuple[str, Principal]] = (),
        expires: Mapping[str, float] | None = None,
    ) -> None:
        super().__init__(entries)
        #: Hash -> Unix seconds after which it is refused; a hash not here never expires.
        self.expires: dict[str, float] = dict(expires or {})

    def match(self, token: str) -> Match | None:
        """The entry ``token`` matches, expired or not, or None. Every entry is compared, in
        constant time each, before the match's date is even read."""
        presented = hash_token(token).encode("ascii")
        found: str | None = None
        for digest in self:
            if hmac.compare_digest(digest.encode("ascii"), presented):
                found = digest
        if found is None:
            return None
        return Match(self[found], self.expires.get(found))

    def authenticate(self, token: str, now: float | None = None) -> Principal | None:
        """Who holds ``token``, or None (unknown, or expired at ``now``: the wall clock)."""
        found = self.match(token)
        if found is None or found.expired(time.time() if now is None else now):
            return None
        return found.who

    def current(self) -> TokenTable:
        """Itself: a table given as it is never changes (:class:`TokenSource`)."""
        return self

    @classmethod
    def of_tokens(cls, tokens: dict[str, Principal]) -> TokenTable:
        """The table of tokens given in clear (the demo's, tests'): hashed here, kept hashed."""
        return cls({hash_token(token): who for token, who in tokens.items()})


class TokenSource(Protocol):
    """Where the API gets the table for each request: a fixed :class:`TokenTable`, or the
    tokens file re-read when it changes (:class:`services.api.tokens_file.TokensFile`)."""

    def current(self) -> TokenTable: ...


#: The demo's users (``fairshare up``, ``fairshare api serve`` without ``--tokens``): public,
#: so served only on a loopback address.
DEMO_TOKENS: dict[str, Principal] = {
    "admin-token": Principal("admin", admin=True),
    "ana-token": Principal("ana"),
    "bo-token": Principal("bo"),
    "chen-token": Principal("chen"),
    "finance-token": Principal("fin", finance=True),
}


def default_tokens() -> TokenTable:
    """The demo's tokens (``admin-token``, ``ana-token``, ``bo-token``, ``chen-token``,
    ``finance-token``)."""
    return TokenTable.of_tokens(DEMO_TOKENS)
