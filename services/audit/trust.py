"""What an audit believes: the judgement every reader makes (``projections.trust``), over a
whole log whose key facts are known before the first record is judged.

A live reader meets a key's registration before the records it signs (the keys topic is
merged by event time with the rest, or read apart before them). A log read for an audit has
no such order: an export lists topic after topic, the keys topic last. So the audit reads the
key facts and the nodes' registrations first (:meth:`AuditTrust.of_log`: an export file is
searched for them without decoding the rest), and then judges each record as it replays it;
with every key known, a record is judged as a reader of the whole log judges it, by its event
time against its key's registration and revocation. Every record not believed is named once,
with the reason, and never folded: ``fairshare audit replay`` and ``fairshare audit
decisions`` list them as differences, so a forged, unsigned, replayed or wrongly signed fact
fails the audit even where it would have changed no charge.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from events.envelope import Envelope
from events.models import NodeRegistered
from projections.trust import KEY_FACTS, Distrust, Owners, Refusal, Trust

#: What vouches for other records: the keys, and whose each node is.
VOUCHING = (*KEY_FACTS, NodeRegistered)


class AuditTrust:
    def __init__(self, vouching: Iterable[Envelope[Any]] = ()) -> None:
        """``vouching``: every key fact and node registration of the log (more is ignored)."""
        self.trust = Trust(keep_refusals=None)
        found = [e for e in vouching if isinstance(e.data, VOUCHING)]
        self._refused_keys = {
            (refusal.event_id, refusal.signer): Distrust(refusal.kind, refusal.reason)
            for refusal in self.trust.learn_keys(found)
        }
        registrations = [e for e in found if isinstance(e.data, NodeRegistered)]
        for envelope in sorted(registrations, key=lambda e: e.time):
            self.trust.judge(envelope)  # learns whose the node is if it is believed
        #: Each record not believed, once (a node's registration is judged twice).
        self._named: set[tuple[str, str | None, str]] = set()

    @classmethod
    def of_log(cls, log: Iterable[Any]) -> AuditTrust:
        """From a log that can be read twice: a list, or an export that finds its own vouching
        records (``vouching()``, services.audit.sources.EventFile); another iterable is read
        once only, so its keys are learned as they come (correct for a log in event-time
        order, such as the simulator's)."""
        finder = getattr(log, "vouching", None)
        if callable(finder):
            return cls(finder())
        if isinstance(log, list | tuple):
            return cls(e for e in log if isinstance(e, Envelope))
        return cls()

    def believes(self, envelope: Envelope[Any]) -> bool:
        return self.judge(envelope) is None

    def judge(self, envelope: Envelope[Any]) -> Distrust | None:
        """The verdict on ``envelope``; a refusal is recorded once."""
        if isinstance(envelope.data, KEY_FACTS) and self._learned(envelope):
            return self._refused_keys.get((envelope.id, envelope.signer))
        verdict = self.trust.judge(envelope)
        if (
            verdict is not None
            and (envelope.id, envelope.signer, verdict.reason) not in self._named
        ):
            self._named.add((envelope.id, envelope.signer, verdict.reason))
            self.trust.refuse(envelope, verdict)
        return verdict

    def knows_node(self, node: str) -> bool:
        """Whether the records judged so far told whose ``node`` is (its registration, or a
        believed witness of it: ``projections.trust.NODE_WITNESSES``)."""
        return self.trust.owners.node_cluster(node) is not None

    def _learned(self, envelope: Envelope[Any]) -> bool:
        key = self.trust.book.key(envelope.subject)
        return key is not None or (envelope.id, envelope.signer) in self._refused_keys

    @property
    def refusals(self) -> list[Refusal]:
        return self.trust.refusals


class Verdicts(Trust):
    """Verdicts already reached, handed to the live states a decision audit folds, so that
    each record's signature is verified once per audit, not once per fold of it (the replay
    folds again from the start where a pass does not check out). Keyed by the very envelope
    objects of the audit's log, which every fold of it is given."""

    knows_every_key = True

    def __init__(self, verdicts: dict[int, Distrust]) -> None:
        super().__init__()
        self._verdicts = verdicts

    def judge(self, envelope: Envelope[Any], owners: Owners | None = None) -> Distrust | None:
        return self._verdicts.get(id(envelope))


def describe(refusal: Refusal) -> str:
    """One line of an audit report (the reason names the fact, the key and the rule)."""
    return f"not believed ({refusal.kind}): {refusal.reason} [event {refusal.event_id}]"
