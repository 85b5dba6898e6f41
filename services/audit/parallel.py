"""``fairshare audit replay --events FILE --workers N``: the charge audit of an export split by
workload between N processes, merged into the result one process gives.

Charges are per workload and hour (``projections.ledger``), so each process folds the facts
of its own workloads (``services.audit.split``) with the replay's own fold
(:func:`services.audit.replay.fold_log`), and the parent merges what the folds leave: the
counts, the bad lines and the records not believed in the order of the file, and the charge
matchers (:meth:`ChargeMatcher.merged`), whose differences are then listed as one matcher
lists them. Decoding, the heaviest part of an audit, is split with the workloads; each
process still reads every line's bytes, to route it.

What is judged is judged as a reader of the whole log judges it. The keys and the nodes'
registrations are read by every process before the first record (``AuditTrust.of_log``), as
in one process. Whose a node is also follows from the first believed heartbeat or sign of
life naming it (spec 7.6): every process judges those of a node it does not know yet, its own
or not, so that each knows whose a node is from the same line on as a single reader. A record
re-stated under the id of another with other content (spec 7.7) is found only among the
records of one process: the parent compares what every process was told under each id, and
where two processes were told two contents, or where a line's bytes routed it otherwise than
its record does, it audits the file again in one process, which is the reference; the result
says so (:attr:`ParallelReplay.fell_back`).
"""

from __future__ import annotations

import heapq
import multiprocessing
import os
import time
from collections.abc import Iterator, Mapping
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from events.envelope import Envelope
from events.lean import structured_decoder
from events.ndjson import BadLine
from events.serde import EventDecodeError, decode_structured
from projections.trust import Refusal
from services.audit.replay import ChargeMatcher, Folded, ReplayResult, fold_log, replay, report
from services.audit.sources import EventFile
from services.audit.split import Route, Splitter
from services.audit.trust import AuditTrust
from services.runtime.gc_pause import gc_paused

#: How worker processes start. Fork copies the parent, which has imported the models and built
#: their validators already; spawn and forkserver start a fresh interpreter that imports them
#: again (about a second of CPU each). Everything a worker is given is picklable, so every
#: method works (the tests run spawn); fork is taken where the platform has it.
START_METHOD = "fork" if "fork" in multiprocessing.get_all_start_methods() else "spawn"


def usable_cores() -> int:
    """The cores this process may run on: more workers than that cannot go faster."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on every platform
        return os.cpu_count() or 1


@dataclass
class ParallelReplay:
    result: ReplayResult
    workers: int
    #: Why the split audit was not taken and the file was audited in one process (None: it was).
    fell_back: str | None = None
    #: The CPU seconds each share took: on as many idle cores, the wall time is about the
    #: longest, plus starting the processes and merging.
    share_cpu_s: list[float] = field(default_factory=list)


@dataclass
class ShareOutcome:
    """What one process hands back: its fold's leftovers, and what the parent needs to merge
    the judgements (see the module docstring)."""

    folded: Folded
    #: Refusals made before the first record (key facts not believed): every share's are the same.
    opening: list[Refusal]
    #: Each refusal of a record this share counts, with its line.
    named: list[tuple[int, Refusal]]
    #: The digest of every signed record believed here, by day and id (``Trust.stated``).
    stated: Mapping[int, Mapping[str, bytes]]
    #: The first line whose bytes routed it otherwise than its decoded record (None: none).
    misrouted: int | None
    cpu_s: float


class Share:
    """One process's share of an export file, as the fold reads it: the lines routed to it,
    decoded, plus the witnesses of nodes it does not know yet (judged and not counted here).
    Iterating it notes, for each record this share counts, the refusal its judgement named,
    if any: the fold judges each record before it asks for the next."""

    def __init__(
        self, path: Path, index: int, splitter: Splitter, trust: AuditTrust, strict: bool
    ) -> None:
        self.path = path
        self.index = index
        self.splitter = splitter
        self.trust = trust
        self.strict = strict
        #: Records folded here that another share counts.
        self.others = 0
        self.named: list[tuple[int, Refusal]] = []
        self.misrouted: int | None = None
        self._known_nodes: set[bytes] = set()

    def __iter__(self) -> Iterator[Envelope[Any] | BadLine]:
        decode = structured_decoder() if not self.strict else partial(decode_structured)
        route_line, route_of = self.splitter.route_line, self.splitter.route_of
        index, me = self.index, 1 << self.index
        refusals = self.trust.refusals
        judged = len(refusals)
        with self.path.open("rb") as handle:
            for number, line in enumerate(handle, start=1):
                read = route_line(line)
                if (
                    read is not None
                    and not read.members & me
                    and (read.witnessed is None or not self._unknown(read))
                ):
                    continue  # another share's: the usual case, kept short
                stripped = line.strip()
                if not stripped:
                    continue
                try:
                    envelope = decode(stripped)
                except EventDecodeError as error:
                    if (0 if read is None else read.primary) == index:
                        yield BadLine(number, str(error))
                    continue
                route = route_of(envelope)
                if read is not None and read != route and self.misrouted is None:
                    self.misrouted = number
                if not route.members & me and not self._unknown(route):
                    continue
                counted = route.primary == index and bool(route.members & me)
                if not counted:
                    self.others += 1
                yield envelope
                if len(refusals) > judged:
                    judged = len(refusals)
                    if counted:
                        self.named.append((number, refusals[-1]))

    def _unknown(self, route: Route) -> bool:
        """Whether ``route`` is a witness of a node this share does not know yet."""
        node = route.witnessed
        if node is None or node in self._known_nodes:
            return False
        if self.trust.knows_node(node.decode()):
            self._known_nodes.add(node)
            return False
        return True


def audit_share(path: str, index: int, shares: int, strict: bool, log_order: bool) -> ShareOutcome:
    """One process's part (module-level, its arguments plain, as a spawned process needs)."""
    started = time.process_time()
    file = EventFile(Path(path), strict)
    trust = AuditTrust.of_log(file)
    opening = list(trust.refusals)
    share = Share(Path(path), index, Splitter(shares), trust, strict)
    with gc_paused():
        folded = fold_log(share, keep_recomputed=False, trust=trust, log_order=log_order)
    folded.events -= share.others
    folded.matcher.forget_pairs()
    return ShareOutcome(
        folded,
        opening,
        share.named,
        trust.trust.stated,
        share.misrouted,
        time.process_time() - started,
    )


def replay_file(
    path: Path,
    workers: int,
    strict: bool = False,
    log_order: bool = False,
    start_method: str = START_METHOD,
) -> ParallelReplay:
    """The audit of an export file by ``workers`` processes (this one and ``workers - 1``
    started); with one, the single-process replay itself."""
    if workers <= 1:
        return ParallelReplay(_reference(path, strict, log_order), 1)
    path_text, rest = str(path), (workers, strict, log_order)
    context = multiprocessing.get_context(start_method)
    with ProcessPoolExecutor(max_workers=workers - 1, mp_context=context) as pool:
        started = [pool.submit(audit_share, path_text, index, *rest) for index in range(1, workers)]
        outcomes = [audit_share(path_text, 0, *rest)]
        outcomes += [future.result() for future in started]
    merged = merge(outcomes)
    cpu_s = [o.cpu_s for o in outcomes]
    if isinstance(merged, str):
        reference = _reference(path, strict, log_order)
        return ParallelReplay(reference, workers, fell_back=merged, share_cpu_s=cpu_s)
    return ParallelReplay(merged, workers, share_cpu_s=cpu_s)


def _reference(path: Path, strict: bool, log_order: bool) -> ReplayResult:
    return replay(EventFile(path, strict), log_order=log_order)


def merge(outcomes: list[ShareOutcome]) -> ReplayResult | str:
    """The result of the whole log from its shares' (in share order), or why it cannot be
    had from them (see the module docstring)."""
    misrouted = [o.misrouted for o in outcomes if o.misrouted is not None]
    if misrouted:
        return f"line {min(misrouted)} is routed otherwise by its bytes than by its record"
    restated = _restated_across(o.stated for o in outcomes)
    if restated is not None:
        return f"event {restated} is stated with other content in two shares"
    named: list[Refusal] = []
    seen: set[tuple[str, str | None, str]] = set()
    for _line, refusal in heapq.merge(*(o.named for o in outcomes), key=lambda p: p[0]):
        # a record not believed is named once (AuditTrust.judge), wherever it lies
        key = (refusal.event_id, refusal.signer, refusal.reason)
        if key not in seen:
            seen.add(key)
            named.append(refusal)
    folded = Folded(
        events=sum(o.folded.events for o in outcomes),
        bad_lines=list(heapq.merge(*(o.folded.bad_lines for o in outcomes), key=lambda b: b.line)),
        matcher=ChargeMatcher.merged([o.folded.matcher for o in outcomes]),
        recomputed=[],
    )
    return report(folded, outcomes[0].opening + named)


def _restated_across(stated: Iterator[Mapping[int, Mapping[str, bytes]]]) -> str | None:
    """An event id that two shares were told with different content, if any."""
    first: dict[int, dict[str, bytes]] = {}
    for share in stated:
        for day, ids in share.items():
            known = first.setdefault(day, {})
            for event_id, digest in ids.items():
                if known.setdefault(event_id, digest) != digest:
                    return event_id
    return None
