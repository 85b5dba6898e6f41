"""Topic families and their deployment-specific names.

Code refers to a *kind* of topic (``TopicKind.WORKLOADS``); the actual Kafka topic name adds a
per-deployment prefix so that several deployments (or test runs) can share one cluster.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from enum import StrEnum


class TopicKind(StrEnum):
    WORKLOADS = "workloads"
    COMMANDS = "commands"
    HEARTBEATS = "heartbeats"
    LIVENESS = "liveness"
    CLUSTER = "cluster"
    BUDGETS = "budgets"
    USAGE = "usage"
    LEDGER = "ledger"
    DEADLETTER = "deadletter"
    #: Who may sign what: the registrations and revocations of signing keys (docs/signed-facts.md).
    KEYS = "keys"


#: Topics kept for a while only (time-based retention), never part of the durable log: the
#: agents' 10-s liveness signals. Nothing a charge or an audited decision depends on reads
#: them (docs/design.md, "What the log keeps").
TRANSIENT_KINDS: frozenset[TopicKind] = frozenset({TopicKind.LIVENESS})

_PREFIX_RE = re.compile(r"^[A-Za-z0-9._-]*$")


@dataclass(frozen=True)
class Topics:
    """Maps topic kinds to concrete names: ``<prefix><kind>``, with optional per-kind overrides."""

    prefix: str = "fairshare."
    overrides: dict[TopicKind, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not _PREFIX_RE.match(self.prefix):
            raise ValueError(
                f"topic prefix {self.prefix!r} may only contain letters, digits, '.', '_' and '-'"
            )

    def name(self, kind: TopicKind) -> str:
        return self.overrides.get(kind, f"{self.prefix}{kind.value}")

    def kind_of(self, topic_name: str) -> TopicKind | None:
        for kind in TopicKind:
            if self.name(kind) == topic_name:
                return kind
        return None

    def all_names(self) -> list[str]:
        return [self.name(kind) for kind in TopicKind]

    def durable_names(self) -> list[str]:
        """The topics kept forever: what an export or an audit reads (the transient ones
        would only be ignored by the folds they feed)."""
        return [self.name(kind) for kind in TopicKind if kind not in TRANSIENT_KINDS]
