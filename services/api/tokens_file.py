"""The tokens file: who may call the API, as the SHA-256 of each token (never the token).

.. code-block:: json

    {"version": 1,
     "tokens": [{"user": "ana", "admin": false, "sha256": "<64 hex digits>",
                 "added": "2026-12-01T10:00:00Z"}]}

``fairshare tokens add USER [--admin]`` creates or extends it and prints the new token once:
nothing can show it again, so a lost token is replaced, not recovered. A user may hold several
tokens (to rotate one without a gap); ``fairshare tokens remove USER`` drops all of a user's.
The API reads the file when it starts.

The file is written whole to a temporary file and renamed over the old one, readable by its
owner only: a crash mid-write leaves the old file, never half of one. The first version of this
file held the tokens themselves (``{"<token>": {"user": ...}}``); such a file is refused with
the way out, never read, so no deployment keeps serving clear-text tokens by accident.
"""

from __future__ import annotations

import json
import os
import tempfile
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, ValidationError

from events.types import Identifier
from services.api.tokens import Principal, TokenTable, hash_token, new_token


class TokenFileError(ValueError):
    """The tokens file is missing, not JSON, or has an invalid entry; the message says which."""


Sha256Hex = Annotated[str, StringConstraints(pattern=r"^[0-9a-f]{64}$")]


class TokenRecord(BaseModel):
    """One token: whose it is and its hash; ``added`` is for the operator reading the file."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    user: Identifier
    admin: bool = False
    sha256: Sha256Hex
    added: str = ""


class TokensDocument(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    version: Literal[1] = 1
    tokens: list[TokenRecord] = Field(default_factory=list)


def read_document(path: str | Path) -> TokensDocument:
    """The file's contents, validated; raises TokenFileError saying what is wrong."""
    try:
        text = Path(path).read_text()
    except OSError as error:
        raise TokenFileError(f"tokens: cannot read {path}: {error}") from error
    try:
        raw: Any = json.loads(text)
    except json.JSONDecodeError as error:
        raise TokenFileError(f"tokens: {path} is not JSON: {error}") from error
    if not isinstance(raw, dict):
        raise TokenFileError(f'tokens: {path} must hold a JSON object {{"version": 1, ...}}')
    if "tokens" not in raw and "version" not in raw and raw:
        raise TokenFileError(
            f"tokens: {path} looks like the old format, which held the tokens in clear; it is "
            "no longer read. Create a new file with `fairshare tokens add USER [--admin] "
            "--file FILE` (it stores hashes only) and give the users their new tokens"
        )
    try:
        document = TokensDocument.model_validate(raw)
    except ValidationError as error:
        first = error.errors()[0]
        where = ".".join(str(part) for part in first["loc"])
        raise TokenFileError(f"tokens: {path}: {where}: {first['msg']}") from error
    seen: set[str] = set()
    for record in document.tokens:
        if record.sha256 in seen:
            raise TokenFileError(f"tokens: {path}: one hash is listed twice")
        seen.add(record.sha256)
    return document


def load_tokens(path: str | Path) -> TokenTable:
    """The table the API authenticates with (see the module docstring for the format)."""
    document = read_document(path)
    return TokenTable({r.sha256: Principal(r.user, r.admin) for r in document.tokens})


def add_token(path: str | Path, user: str, *, admin: bool = False) -> str:
    """Add a fresh token for ``user`` to the file (created if missing); returns the token,
    which is stored nowhere: the caller shows it once."""
    path = Path(path)
    document = read_document(path) if path.exists() else TokensDocument()
    token = new_token()
    try:
        record = TokenRecord(
            user=user,
            admin=admin,
            sha256=hash_token(token),
            added=datetime.now(UTC).replace(microsecond=0).isoformat().replace("+00:00", "Z"),
        )
    except ValidationError as error:
        raise TokenFileError(f"tokens: user {user!r}: {error.errors()[0]['msg']}") from error
    document.tokens.append(record)
    write_document(path, document)
    return token


def remove_tokens(path: str | Path, user: str) -> int:
    """Drop every token of ``user``; how many there were."""
    document = read_document(path)
    kept = [r for r in document.tokens if r.user != user]
    removed = len(document.tokens) - len(kept)
    if removed:
        write_document(Path(path), TokensDocument(tokens=kept))
    return removed


def write_document(path: Path, document: TokensDocument) -> None:
    """Replace the file atomically (temporary file in the same folder, fsync, rename),
    readable and writable by its owner only."""
    path.parent.mkdir(parents=True, exist_ok=True)
    # mkstemp creates the file with mode 0600, before anything is written to it
    handle, temporary = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(handle, "w") as out:
            out.write(document.model_dump_json(indent=2) + "\n")
            out.flush()
            os.fsync(out.fileno())
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
