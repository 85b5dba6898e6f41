"""``--run-as``: which unix user a submitter's commands run as on the local agent.

Without it the local agent runs every command as its own user; with it, each submitter must be
mapped to a unix user, and a run whose submitter has none fails instead of falling back to the
agent's identity (falling back would hand the agent's privileges to exactly the people the
mapping was meant to confine).

Syntax: ``SUBMITTER=USER`` pairs, comma-separated (``--run-as ana=ana,bo=robotics``), or one
pair per line in a file (``--run-as-file``; blank lines and ``#`` comments are ignored). USER
is a unix user name or a numeric uid. Every mapping is resolved against the user database when
the agent starts, so a typo stops the agent rather than failing runs one by one later.

Root is never a target: a user named ``root``, any user with uid 0, and any user whose primary
or supplementary groups include gid 0 are refused, and the agent does not start with such a
mapping. A process of uid 0 escapes every other limit, so a mapping to it would make the whole
mapping pointless.
"""

from __future__ import annotations

import os
import pwd
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from services.agents.adapter import RunRequest

#: Environment variables a run as another user keeps from the agent's environment. Everything
#: else (tokens, Kafka credentials, the agent's HOME) belongs to the agent, not to the user.
KEPT_ENVIRONMENT = ("PATH", "LANG", "LANGUAGE", "TZ")

_FORBIDDEN_IN_SUBMITTER = set("=,#") | {chr(c) for c in range(0x21)} | {"\x7f"}


class RunAsError(ValueError):
    """A ``--run-as`` mapping the agent refuses to start with."""


@dataclass(frozen=True)
class UnixIdentity:
    """A unix user resolved once, at start: runs use these numbers, not the name again."""

    name: str
    uid: int
    gid: int
    #: Every group of the user (the primary one included), for ``extra_groups``.
    groups: tuple[int, ...]
    home: str
    shell: str

    def environment(self, agent_env: Mapping[str, str]) -> dict[str, str]:
        """The base environment of a run as this user: the few neutral variables of the agent
        (:data:`KEPT_ENVIRONMENT` and ``LC_*``) and this user's identity."""
        kept = {
            key: value
            for key, value in agent_env.items()
            if key in KEPT_ENVIRONMENT or key.startswith("LC_")
        }
        kept.setdefault("PATH", "/usr/local/bin:/usr/bin:/bin")
        return {
            **kept,
            "HOME": self.home,
            "USER": self.name,
            "LOGNAME": self.name,
            "SHELL": self.shell,
        }


def parse_pairs(text: str) -> list[tuple[str, str]]:
    """``ana=ana,bo=robotics`` as ``[("ana", "ana"), ("bo", "robotics")]``."""
    pairs = []
    for item in text.split(","):
        if item.strip():
            pairs.append(_pair(item, "--run-as"))
    return pairs


def read_pairs(path: Path) -> list[tuple[str, str]]:
    """The pairs of a ``--run-as-file``: ``SUBMITTER=USER`` per line, ``#`` comments."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise RunAsError(f"--run-as-file {str(path)!r}: {error}") from error
    pairs = []
    for number, line in enumerate(text.splitlines(), start=1):
        content = line.split("#", 1)[0]
        if content.strip():
            pairs.append(_pair(content, f"{path}:{number}"))
    return pairs


def _pair(item: str, where: str) -> tuple[str, str]:
    submitter, sep, user = item.partition("=")
    submitter, user = submitter.strip(), user.strip()
    if not sep or not submitter or not user:
        raise RunAsError(f"{where}: {item.strip()!r} is not SUBMITTER=USER")
    if _FORBIDDEN_IN_SUBMITTER.intersection(submitter):
        raise RunAsError(f"{where}: submitter {submitter!r} has a space, '=', ',' or '#'")
    return submitter, user


Lookup = Callable[[str], pwd.struct_passwd]
UidLookup = Callable[[int], pwd.struct_passwd]
GroupList = Callable[[str, int], list[int]]


def resolve_user(
    user: str,
    *,
    by_name: Lookup = pwd.getpwnam,
    by_uid: UidLookup = pwd.getpwuid,
    group_list: GroupList = os.getgrouplist,
) -> UnixIdentity:
    """The identity of ``user`` (a name or a numeric uid); :class:`RunAsError` if it does not
    exist or is root in any way (uid 0, gid 0 among its groups)."""
    if user == "root":
        raise RunAsError("root: commands never run as root")
    try:
        entry = by_uid(int(user)) if user.isdigit() else by_name(user)
    except (KeyError, OverflowError, ValueError) as error:
        raise RunAsError(f"{user!r}: no such unix user") from error
    if entry.pw_uid == 0:
        raise RunAsError(f"{user!r} has uid 0: commands never run as root")
    groups = tuple(dict.fromkeys([entry.pw_gid, *group_list(entry.pw_name, entry.pw_gid)]))
    if 0 in groups:
        raise RunAsError(f"{user!r} is in group 0 (root): commands never run with it")
    return UnixIdentity(
        name=entry.pw_name,
        uid=entry.pw_uid,
        gid=entry.pw_gid,
        groups=groups,
        home=entry.pw_dir,
        shell=entry.pw_shell,
    )


class RunAs:
    """A resolved ``--run-as`` mapping: each submitter's unix identity, nobody else's."""

    def __init__(self, identities: Mapping[str, UnixIdentity]) -> None:
        for submitter, identity in identities.items():
            if identity.uid == 0 or 0 in (identity.gid, *identity.groups):
                raise RunAsError(f"{submitter!r}: commands never run as root")
        self._identities = dict(identities)

    @classmethod
    def resolve(
        cls,
        pairs: Iterable[tuple[str, str]],
        *,
        by_name: Lookup = pwd.getpwnam,
        by_uid: UidLookup = pwd.getpwuid,
        group_list: GroupList = os.getgrouplist,
    ) -> RunAs:
        """Resolve every pair now; refuse a duplicate submitter (which one would win is not
        something to guess) and every root target."""
        identities: dict[str, UnixIdentity] = {}
        for submitter, user in pairs:
            if submitter in identities:
                raise RunAsError(f"submitter {submitter!r} is mapped twice")
            try:
                identities[submitter] = resolve_user(
                    user, by_name=by_name, by_uid=by_uid, group_list=group_list
                )
            except RunAsError as error:
                raise RunAsError(f"--run-as {submitter}={user}: {error}") from error
        if not identities:
            raise RunAsError("--run-as: no SUBMITTER=USER given")
        return cls(identities)

    @property
    def submitters(self) -> dict[str, str]:
        """Submitter -> unix user name, for the start-up banner."""
        return {s: i.name for s, i in sorted(self._identities.items())}

    def identity_for(self, submitter: str) -> UnixIdentity | None:
        """The submitter's identity, or None: the run must then be refused, never run as the
        agent."""
        return self._identities.get(submitter) if submitter else None


def submitter_of(run: RunRequest) -> str:
    """Who submitted the run, as the log says; "" when the request does not carry it (then a
    ``run_as`` mapping refuses the run rather than guess)."""
    value = run.submitter
    return value if isinstance(value, str) else ""
