"""Which share of a log each record belongs to, when a charge audit splits the log by workload
between processes (``services.audit.parallel``).

A charge depends only on its own workload's facts (its submission, its runs' starts and ends,
the heartbeats naming its runs): the ledger fold keeps its state per workload and run. So
each share takes the records about its own workloads: a workload's facts and recorded charges
go to the share its id hashes to, a heartbeat to the shares of the workloads its GPUs name.
Two kinds of record go to every share, because every share's fold or judgement reads them:
an array's submission (its elements may be any share's workloads) and a node's registration
(whose node it is decides whether an agent may speak of it: spec 7.6). One share, the
record's *primary*, counts the record, names it if it is not believed and reports it if it is
a bad line; the others only fold it.

Each share reads the whole file and decodes only its own lines, so the route of a line is
read from its bytes (:meth:`Splitter.route_line`) without decoding it, and checked against
the route of the decoded record (:meth:`Splitter.route_of`) by every share that decodes it:
every line is decoded by its primary at least, so a line whose bytes say otherwise than its
record (a key written twice, a nested ``subject``, a charge filed under another workload than
its id names) is always found, and the audit is then done in one process instead.
"""

from __future__ import annotations

import zlib
from typing import Any, NamedTuple

from events.envelope import Envelope
from events.models import (
    EventData,
    GpuHeartbeat,
    LedgerCharge,
    NodeRegistered,
    WorkloadArraySubmitted,
)
from events.models.ledger import parse_charge_id
from events.registry import default_registry
from projections.trust import NODE_WITNESSES

#: Records every share reads (see the module docstring).
EVERY_SHARE = (WorkloadArraySubmitted, NodeRegistered)

_TYPE = b'"type":"'
_SUBJECT = b'"subject":"'
_OCCUPANT = b'"occupant":"'
_QUOTE = b'"'
_ESCAPE = b"\\"


class Route(NamedTuple):
    """Where a record goes: the share that counts it (``primary``), the shares that fold it
    (``members``, one bit per share), and, for a fact that may tell whose a node is
    (``projections.trust.NODE_WITNESSES``), the node (``witnessed``), which every share that
    does not know that node yet must judge too."""

    primary: int
    members: int
    witnessed: bytes | None


#: What a record of each current type is routed by: its subject, the runs its GPUs name, or
#: to every share; a charge's record by the workload its id names (its line by its subject,
#: which names the same workload in a charge as charging writes it).
_BY_SUBJECT, _BY_OCCUPANTS, _TO_EVERY_SHARE, _BY_CHARGE_ID = 0, 1, 2, 3


class Splitter:
    """Routes records between ``shares`` shares; every share's splitter routes alike (a
    checksum, not Python's per-process salted ``hash``). Routes are made once and shared:
    reading a line's route is most of what a share does with the lines of the others."""

    def __init__(self, shares: int) -> None:
        if shares < 1:
            raise ValueError(f"shares: at least 1, not {shares}")
        self.shares = shares
        self._everyone = (1 << shares) - 1
        registry = default_registry()
        #: (kind, whether it is a node witness) by model, and by the bytes of its type's name
        self._models: dict[type[EventData], tuple[int, bool]] = {}
        for event_type in registry.types():
            model = registry.model_for(event_type)
            kind = (
                _BY_OCCUPANTS
                if model is GpuHeartbeat
                else _BY_CHARGE_ID
                if model is LedgerCharge
                else _TO_EVERY_SHARE
                if issubclass(model, EVERY_SHARE)
                else _BY_SUBJECT
            )
            self._models[model] = (kind, issubclass(model, NODE_WITNESSES))
        self._kinds = {model.event_type.encode(): kind for model, kind in self._models.items()}
        self._routes: dict[tuple[int, int, bytes | None], Route] = {}

    def share_of(self, key: bytes) -> int:
        return zlib.crc32(key) % self.shares

    def route_line(self, line: bytes) -> Route | None:
        """The route of an export line, read from its bytes as our encoder writes them; None
        where they cannot tell it (a type of no current model, a value written with escapes,
        no subject): every share then decodes the line to route it. Inlined: it runs for every
        line in every share."""
        at = line.find(_TYPE)
        if at < 0:
            return None
        at += len(_TYPE)
        end = line.find(_QUOTE, at)
        found = self._kinds.get(line[at:end])  # escaped, it is no type's name
        if found is None:
            return None
        kind, witness = found
        at = line.find(_SUBJECT)
        if at < 0:
            return None
        at += len(_SUBJECT)
        subject = line[at : line.find(_QUOTE, at)]
        if _ESCAPE in subject:
            return None
        witnessed = subject if witness else None
        if kind == _BY_OCCUPANTS:
            at = line.find(_OCCUPANT)
            if at >= 0:
                at += len(_OCCUPANT)
                occupant = line[at : line.find(_QUOTE, at)]
                if _ESCAPE in occupant:
                    return None
                if line.count(_OCCUPANT) == line.count(_OCCUPANT + occupant + _QUOTE):
                    one = self.share_of(occupant)  # the usual case: the node is one run's
                    return self._route(one, 1 << one, witnessed)
                return self._by_occupants(line, witnessed)
        one = self.share_of(subject)
        return self._route(one, self._everyone if kind == _TO_EVERY_SHARE else 1 << one, witnessed)

    def _by_occupants(self, line: bytes, witnessed: bytes | None) -> Route | None:
        """A heartbeat line's route when its GPUs name several runs."""
        occupants = set()
        at = line.find(_OCCUPANT)
        while at >= 0:
            at += len(_OCCUPANT)
            occupant = line[at : line.find(_QUOTE, at)]
            if _ESCAPE in occupant:
                return None
            occupants.add(occupant)
            at = line.find(_OCCUPANT, at)
        return self._to_workloads(occupants, witnessed)

    def route_of(self, envelope: Envelope[Any]) -> Route:
        """The route of a decoded record: what :meth:`route_line` must have read."""
        data = envelope.data
        kind, witness = self._models[type(data)]
        witnessed = envelope.subject.encode() if witness else None
        if kind == _BY_OCCUPANTS:
            occupants = {gpu.occupant.encode() for gpu in data.gpus if gpu.occupant is not None}
            if occupants:
                return self._to_workloads(occupants, witnessed)
        elif kind == _BY_CHARGE_ID:
            # a recorded charge meets its recomputed twin only in the share that folds the
            # facts of the workload its id names
            parsed = parse_charge_id(data.charge_id)
            one = self.share_of((data.charge_id if parsed is None else parsed[0]).encode())
            return self._route(one, 1 << one, witnessed)
        one = self.share_of(envelope.subject.encode())
        return self._route(one, self._everyone if kind == _TO_EVERY_SHARE else 1 << one, witnessed)

    def _to_workloads(self, workloads: set[bytes], witnessed: bytes | None) -> Route:
        """A heartbeat's route: the shares of the workloads it names; the first counts it."""
        members = 0
        for workload in workloads:
            members |= 1 << self.share_of(workload)
        primary = (members & -members).bit_length() - 1  # the lowest share among them
        return self._route(primary, members, witnessed)

    def _route(self, primary: int, members: int, witnessed: bytes | None) -> Route:
        key = (primary, members, witnessed)
        route = self._routes.get(key)
        if route is None:
            route = self._routes[key] = Route(primary, members, witnessed)
        return route
