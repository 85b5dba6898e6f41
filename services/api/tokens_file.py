"""The tokens file: who may call the API, as the SHA-256 of each token (never the token).

.. code-block:: json

    {"version": 2,
     "tokens": [{"user": "ana", "admin": false, "sha256": "<64 hex digits>",
                 "added": "2026-12-01T10:00:00Z", "expires": "2027-03-01T10:00:00Z"}]}

``fairshare tokens add USER [--admin | --finance] [--expires-in 30d | --no-expiry]`` creates
or extends it and prints the new token once: nothing can show it again, so a lost token is
replaced, not recovered. A token expires :data:`DEFAULT_EXPIRY_S` (90 days) after it is added
unless told otherwise: a token that leaked unnoticed, or whose holder left, stops working by
itself. ``"expires": "never"`` is written only on request (``--no-expiry``, for a service's
token that its operator rotates). A user may hold several tokens (to rotate one without a gap);
``fairshare tokens renew USER`` replaces all of a user's with one fresh token, ``fairshare
tokens remove USER`` drops them.

Version 1 files have no ``expires``: their tokens keep working and never expire (expiring them
on an upgrade would lock every user and service out at once, with no warning), but the API
logs a warning at start and ``tokens list`` marks each one to be renewed. Any change written
by ``fairshare tokens`` makes the file version 2, leaving those entries without a date.

The API re-reads the file when it changes (:class:`TokensFile`), so an added, renewed or
removed token takes effect within a second, without a restart.

The file is written whole to a temporary file and renamed over the old one, readable by its
owner only: a crash mid-write leaves the old file, never half of one. The first version of this
file held the tokens themselves (``{"<token>": {"user": ...}}``); such a file is refused with
the way out, never read, so no deployment keeps serving clear-text tokens by accident.
"""

from __future__ import annotations

import json
import logging
import os
import tempfile
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StringConstraints,
    ValidationError,
    field_validator,
)

from events.types import Identifier
from services.api.tokens import Principal, TokenTable, hash_token, new_token

log = logging.getLogger(__name__)

#: How long a new token is accepted unless ``--expires-in`` or ``--no-expiry`` says otherwise.
DEFAULT_EXPIRY_S = 90 * 86400
#: ``expires`` of a token that was given no end on purpose (``--no-expiry``).
NEVER = "never"


class TokenFileError(ValueError):
    """The tokens file is missing, not JSON, or has an invalid entry; the message says which."""


Sha256Hex = Annotated[str, StringConstraints(pattern=r"^[0-9a-f]{64}$")]


def timestamp(unix_s: float) -> str:
    """``2027-03-01T10:00:00Z``: how the file and the API's answers write an instant."""
    moment = datetime.fromtimestamp(unix_s, UTC).replace(microsecond=0)
    return moment.isoformat().replace("+00:00", "Z")


class TokenRecord(BaseModel):
    """One token: whose it is, its hash, and until when it is accepted; ``added`` is for the
    operator reading the file."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    user: Identifier
    admin: bool = False
    #: Reads every budget's money (``Principal.finance``); absent in older files: false.
    finance: bool = False
    sha256: Sha256Hex
    added: str = ""
    #: A UTC instant (``...Z``), ``"never"``, or None: written before tokens expired (version 1).
    expires: str | None = None

    @field_validator("expires")
    @classmethod
    def _an_instant_or_never(cls, value: str | None) -> str | None:
        if value is None or value == NEVER:
            return value
        try:
            moment = datetime.fromisoformat(value)
        except ValueError:
            raise ValueError(f"'{NEVER}' or a UTC instant like 2027-03-01T10:00:00Z") from None
        if moment.utcoffset() is None:
            raise ValueError("the instant needs its time zone (end it with Z)")
        return value

    @property
    def expires_at(self) -> float | None:
        """Unix seconds, or None when the token never expires (on purpose or by its age)."""
        if self.expires is None or self.expires == NEVER:
            return None
        return datetime.fromisoformat(self.expires).timestamp()


class TokensDocument(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    #: 2 added ``expires``; a version 1 file is read as it is (its tokens have no date).
    version: Literal[1, 2] = 2
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


def table_of(document: TokensDocument) -> TokenTable:
    """The table the API authenticates with, dates included."""
    expires = {r.sha256: r.expires_at for r in document.tokens if r.expires_at is not None}
    return TokenTable(
        {r.sha256: Principal(r.user, r.admin, r.finance) for r in document.tokens}, expires
    )


def load_tokens(path: str | Path) -> TokenTable:
    """The table the API authenticates with (see the module docstring for the format)."""
    return table_of(read_document(path))


def _new_record(
    user: str, admin: bool, expires_in_s: float | None, now: float | None, finance: bool = False
) -> tuple[str, TokenRecord]:
    token = new_token()
    added = time.time() if now is None else now
    try:
        record = TokenRecord(
            user=user,
            admin=admin,
            finance=finance,
            sha256=hash_token(token),
            added=timestamp(added),
            expires=NEVER if expires_in_s is None else timestamp(added + expires_in_s),
        )
    except ValidationError as error:
        raise TokenFileError(f"tokens: user {user!r}: {error.errors()[0]['msg']}") from error
    return token, record


def add_token(
    path: str | Path,
    user: str,
    *,
    admin: bool = False,
    finance: bool = False,
    expires_in_s: float | None = DEFAULT_EXPIRY_S,
    now: float | None = None,
) -> str:
    """Add a fresh token for ``user`` to the file (created if missing), accepted for
    ``expires_in_s`` from ``now`` (None: for ever); returns the token, which is stored nowhere:
    the caller shows it once."""
    path = Path(path)
    document = read_document(path) if path.exists() else TokensDocument()
    token, record = _new_record(user, admin, expires_in_s, now, finance)
    document.tokens.append(record)
    write_document(path, document)
    return token


def renew_token(
    path: str | Path,
    user: str,
    *,
    expires_in_s: float | None = DEFAULT_EXPIRY_S,
    now: float | None = None,
) -> str:
    """Replace every token of ``user`` with one fresh token (their old ones stop working when
    the API next reads the file, within a second); returns it. The new token is an admin's if
    the old ones were: a user holding both kinds is refused, since which one was meant cannot
    be told (remove them and add anew)."""
    path = Path(path)
    document = read_document(path)
    old = [r for r in document.tokens if r.user == user]
    if not old:
        raise TokenFileError(f"tokens: {user} holds no token in {path} (add one instead)")
    kinds = {(r.admin, r.finance) for r in old}
    if len(kinds) > 1:
        raise TokenFileError(
            f"tokens: {user} holds tokens of several kinds (admin, finance, user) in {path}: "
            "renewing cannot tell which one to issue; remove them and add the one meant"
        )
    admin, finance = kinds.pop()
    token, record = _new_record(user, admin, expires_in_s, now, finance)
    kept = [r for r in document.tokens if r.user != user]
    write_document(path, TokensDocument(tokens=[*kept, record]))
    return token


def remove_tokens(path: str | Path, user: str) -> int:
    """Drop every token of ``user``; how many there were."""
    document = read_document(path)
    kept = [r for r in document.tokens if r.user != user]
    removed = len(document.tokens) - len(kept)
    if removed:
        write_document(Path(path), TokensDocument(tokens=kept))
    return removed


def undated(document: TokensDocument) -> list[TokenRecord]:
    """The tokens written before tokens expired (version 1): accepted for ever until renewed."""
    return [r for r in document.tokens if r.expires is None]


#: What identifies one version of the file: a rename (every write of ``fairshare tokens``)
#: changes the inode even within the clock's resolution; a hand edit changes mtime or size.
_Stamp = tuple[int, int, int] | None


def _stamp(path: Path) -> _Stamp:
    try:
        status = path.stat()
    except OSError:
        return None
    return (status.st_ino, status.st_mtime_ns, status.st_size)


class TokensFile:
    """The tokens file as the API serves it: read at start (an invalid file stops the start),
    then re-read when it changes, looked at no more than once per ``check_every_s``, so that a
    token added, renewed or removed takes effect within a second without a restart.

    A version that cannot be read (a hand edit half done, the file deleted) is logged as an
    error and the last good table is kept: refusing everyone, admins included, would be worse
    than the tokens of the last good file a little longer. One lock makes the look and the
    read one step, so concurrent requests read the file once."""

    def __init__(
        self,
        path: str | Path,
        *,
        check_every_s: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.path = Path(path)
        self._every = check_every_s
        self._clock = clock
        self._lock = threading.Lock()
        self._stamp = _stamp(self.path)
        document = read_document(self.path)
        self._table = table_of(document)
        self._checked = clock()
        self._warn_undated(document)

    def current(self) -> TokenTable:
        """The table of the file's latest readable version."""
        if self._clock() - self._checked < self._every:
            return self._table
        with self._lock:
            now = self._clock()
            if now - self._checked < self._every:  # another request just looked
                return self._table
            self._checked = now
            stamp = _stamp(self.path)
            if stamp != self._stamp:
                self._stamp = stamp  # a bad version is reported once, not every second
                self._reload()
        return self._table

    def _reload(self) -> None:
        try:
            document = read_document(self.path)
        except TokenFileError as error:
            log.error("tokens file not re-read, keeping the last good one: %s", error)
            return
        self._table = table_of(document)
        log.info("tokens file re-read", extra={"path": str(self.path), "tokens": len(self._table)})
        self._warn_undated(document)

    def _warn_undated(self, document: TokensDocument) -> None:
        if old := undated(document):
            users = ", ".join(sorted({r.user for r in old}))
            log.warning(
                "%d token(s) in %s never expire: written before tokens expired (users: %s); "
                "renew them with `fairshare tokens renew USER`",
                len(old),
                self.path,
                users,
            )


def _not_finance(document: TokensDocument) -> dict[str, Any]:
    """The ``finance`` keys to leave out of the written file: those that are false."""
    return {"tokens": {i: {"finance"} for i, r in enumerate(document.tokens) if not r.finance}}


def write_document(path: Path, document: TokensDocument) -> None:
    """Replace the file atomically (temporary file in the same folder, fsync, rename),
    readable and writable by its owner only: the API re-reading it sees the old version or
    the new one, never half of one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    # mkstemp creates the file with mode 0600, before anything is written to it
    handle, temporary = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(handle, "w") as out:
            # always the current version: a version 1 file changed now may hold dated tokens;
            # "finance" only where true, so that an API from before the role reads the file
            current = document.model_copy(update={"version": 2})
            text = current.model_dump_json(indent=2, exclude=_not_finance(current))
            out.write(text + "\n")
            out.flush()
            os.fsync(out.fileno())
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
