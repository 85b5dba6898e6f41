"""Where an audit reads from: an exported file, or the live log on Kafka; and the charges
stored in the SQL read models, to compare with."""

from __future__ import annotations

import mmap
from collections.abc import Iterable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from sqlalchemy import create_engine, select

from events import Topics
from events.envelope import Envelope
from events.lean import binary_decoder
from events.models import LedgerCharge
from events.ndjson import BadLine, read_events
from events.positions import Delivery
from events.serde import EventDecodeError, decode_structured, peek_type
from services.audit.replay import ReplayResult
from services.audit.trust import VOUCHING, AuditTrust, describe
from services.bus.records import RawRecord, Rejected, check, source_position
from services.read_models.tables import ledger_entries


class EventFile:
    """An export file, read as often as it is iterated; its key facts and node registrations
    can be found apart (:meth:`vouching`), so an audit knows every key before it judges the
    first record (``services.audit.trust``)."""

    def __init__(self, path: Path, strict: bool = True) -> None:
        self.path = path
        self.strict = strict

    def __iter__(self) -> Iterator[Envelope[Any] | BadLine]:
        return read_events(self.path, lean=not self.strict)

    def vouching(self) -> Iterator[Envelope[Any]]:
        """The lines whose type is a key fact or a node registration, decoded strictly, in
        the file's order; the others are not decoded, nor even split into lines: the file's
        bytes are searched for those types' names (every process of a split audit reads them
        before its first record, so this pass should cost a scan of bytes, not of lines)."""
        wanted = {model.event_type for model in VOUCHING}
        names = [b'"type":"' + event_type.encode() + b'"' for event_type in sorted(wanted)]
        for line in _lines_naming(self.path, names):
            if peek_type(line) in wanted:  # its type, not a value further on
                try:
                    yield decode_structured(line.strip())
                except EventDecodeError:
                    continue  # a bad line: the replay reports it where it lies


def _lines_naming(path: Path, needles: list[bytes]) -> Iterator[bytes]:
    """Each line of ``path`` that holds one of ``needles``, once, in the file's order."""
    with path.open("rb") as handle:
        try:
            data = mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ)
        except ValueError:  # an empty file cannot be mapped
            return
        with data:
            starts: set[int] = set()
            for needle in needles:
                at = data.find(needle)
                while at >= 0:
                    starts.add(data.rfind(b"\n", 0, at) + 1)
                    at = data.find(needle, at + len(needle))
            for start in sorted(starts):
                end = data.find(b"\n", start)
                yield data[start : len(data) if end < 0 else end + 1]


def log_from_file(path: Path, strict: bool = True) -> EventFile:
    """An export holds only records that passed the strict check on their way out of the log
    (``services.bus.export``), so the replay may decode it leanly (``strict=False``,
    :mod:`events.lean`)."""
    return EventFile(path, strict)


def log_from_kafka(
    bootstrap: str, topics: Topics | None = None
) -> Iterator[Envelope[Any] | BadLine]:
    """The durable log up to its current end, decoded strictly: the live topics may hold
    records a consumer dead-lettered, which must be bad lines here exactly as there (see
    :func:`log_from_records`). The liveness topic is left out: no charge depends on a signal
    of life (the durable heartbeats confirm occupancy), and it is most of the log's bytes."""
    from services.bus.export import read_to_end

    topics = topics or Topics()
    return log_from_records(read_to_end(bootstrap, topics.durable_names()), topics)


def deliveries_from_kafka(bootstrap: str, topics: Topics) -> tuple[list[Delivery], int]:
    """Every record of every event topic up to the end offsets seen now, with its position
    (what a live decision audit cuts passes by), and how many records are no valid event there
    (their consumers dead-letter them; they are no facts)."""
    from services.bus.export import read_to_end

    deliveries: list[Delivery] = []
    invalid = 0
    for record in read_to_end(bootstrap, topics.all_names(), timeout_s=30):
        checked = check(record, topics)
        if isinstance(checked, Rejected):
            invalid += 1
        else:
            deliveries.append(checked)
    return deliveries, invalid


def log_from_records(
    records: Iterable[RawRecord], topics: Topics, strict: bool = True
) -> Iterator[Envelope[Any] | BadLine]:
    """Records that fail the check every consumer applies (:func:`services.bus.records.check`:
    they do not decode, lie on another topic or under another key; their consumers dead-letter
    them) are reported as bad lines numbered by their position in the read, never replayed as
    facts: a copy of a charge or a run under another key would be counted twice.

    ``strict=False`` decodes heartbeats and charges leanly (:mod:`events.lean`), for records
    known to have passed the strict check already: what the lean decode skips are cross-field
    rules that cannot change a recomputed charge, nor hide a recorded one that breaks them (it
    is compared field by field), and any record the lean schema refuses is checked strictly.
    The live topics are not such records (a poison record that breaks only a cross-field rule
    was dead-lettered by the consumers), so :func:`log_from_kafka` reads them strictly."""
    decode = None if strict else binary_decoder()
    for number, record in enumerate(records, start=1):
        checked = check(record, topics, decode=decode)
        if isinstance(checked, Rejected):
            yield BadLine(number, f"{source_position(record.position)}: {checked.reason}")
        else:
            yield checked.envelope


def stored_charges(database_url: str) -> list[LedgerCharge]:
    """The ledger as the read models hold it, as charge models (for entry-by-entry compare)."""
    engine = create_engine(database_url)
    try:
        with engine.connect() as connection:
            rows = connection.execute(select(ledger_entries).order_by(ledger_entries.c.charge_id))
            return [
                LedgerCharge(
                    charge_id=row.charge_id,
                    workload_id=row.workload_id,
                    budget=row.budget,
                    pool=row.pool,
                    bucket_start=datetime.fromtimestamp(row.bucket_start, UTC),
                    kind=row.kind,
                    debit_account=row.debit_account,
                    credit_account=row.credit_account,
                    gpu_seconds=row.gpu_seconds,
                    amount=row.amount,
                    corrects=row.corrects,
                )
                for row in rows
            ]
    finally:
        engine.dispose()


def audit_log(
    log: Iterable[Envelope[Any] | BadLine],
    database_url: str | None = None,
    log_order: bool = False,
) -> ReplayResult:
    """``fairshare audit replay``: every charge recomputed from the facts and compared with the
    charges recorded in the log, or with those stored in the read models at ``database_url``
    (the projector's copy: in any order, since it stores by id)."""
    from services.audit.replay import compare, replay

    trust = AuditTrust.of_log(log)
    result = replay(log, keep_recomputed=bool(database_url), trust=trust, log_order=log_order)
    if database_url:
        stored = stored_charges(database_url)
        result.recorded_count = len(stored)
        result.differences = [describe(r) for r in trust.refusals] + compare(
            stored, result.recomputed, check_order=False
        )
    return result
