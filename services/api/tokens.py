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

The demo tokens (``admin-token`` ...) are public by design; the API serves them only on a
loopback address (:func:`services.api.server.tokens_for`).
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from dataclasses import dataclass

#: Random bytes in a new token (``secrets.token_urlsafe``: 43 URL-safe characters).
TOKEN_BYTES = 32


@dataclass(frozen=True)
class Principal:
    """Who a request comes from."""

    user: str
    admin: bool = False


def hash_token(token: str) -> str:
    """The SHA-256 of a token, in hex: the only form in which the API keeps a token."""
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


def new_token() -> str:
    """A fresh token: unguessable, and safe in an HTTP header or a cookie as it is."""
    return secrets.token_urlsafe(TOKEN_BYTES)


class TokenTable(dict[str, Principal]):
    """Token hash (SHA-256, hex) -> who holds that token.

    A dict so that it is what ``create_app`` has always taken, but keyed by hashes: looking up
    a presented token here finds nothing; :meth:`authenticate` is the way in."""

    def authenticate(self, token: str) -> Principal | None:
        """Who holds ``token``, or None. Every entry is compared, in constant time each."""
        presented = hash_token(token).encode("ascii")
        found: Principal | None = None
        for digest, who in self.items():
            if hmac.compare_digest(digest.encode("ascii"), presented):
                found = who
        return found

    @classmethod
    def of_tokens(cls, tokens: dict[str, Principal]) -> TokenTable:
        """The table of tokens given in clear (the demo's, tests'): hashed here, kept hashed."""
        return cls({hash_token(token): who for token, who in tokens.items()})


#: The demo's users (``fairshare up``, ``fairshare api serve`` without ``--tokens``): public,
#: so served only on a loopback address.
DEMO_TOKENS: dict[str, Principal] = {
    "admin-token": Principal("admin", admin=True),
    "ana-token": Principal("ana"),
    "bo-token": Principal("bo"),
    "chen-token": Principal("chen"),
}


def default_tokens() -> TokenTable:
    """The demo's tokens (``admin-token``, ``ana-token``, ``bo-token``, ``chen-token``)."""
    return TokenTable.of_tokens(DEMO_TOKENS)
