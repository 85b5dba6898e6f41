"""Event log files: one CloudEvents envelope per line (structured mode), as exported for
auditors and written by the simulator.

Reading never stops at a bad line: it yields an :class:`BadLine` with the line number and the
reason instead, so an auditor sees every problem and loses no good event.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import IO, Any

from events.envelope import Envelope
from events.lean import structured_decoder
from events.registry import EventRegistry
from events.serde import EventDecodeError, decode_structured, encode_structured


@dataclass(frozen=True)
class BadLine:
    line: int
    reason: str


class EventLogWriter:
    def __init__(self, path: Path) -> None:
        self.path = path
        self._handle: IO[bytes] = path.open("wb")
        self.count = 0

    def write(self, envelope: Envelope[Any]) -> None:
        self._handle.write(encode_structured(envelope) + b"\n")
        self.count += 1

    def close(self) -> None:
        self._handle.close()

    def __enter__(self) -> EventLogWriter:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()


def write_events(path: Path, envelopes: Iterable[Envelope[Any]]) -> int:
    with EventLogWriter(path) as writer:
        for envelope in envelopes:
            writer.write(envelope)
        return writer.count


def read_events(
    path: Path, registry: EventRegistry | None = None, *, lean: bool = False
) -> Iterator[Envelope[Any] | BadLine]:
    """Every event of the file, strictly decoded; ``lean`` decodes the hot types without
    their cross-field rules (:mod:`events.lean`: only for a file that holds the log)."""
    decode = structured_decoder(registry) if lean else partial(decode_structured, registry=registry)
    with path.open("rb") as handle:
        for number, line in enumerate(handle, start=1):
            stripped = line.strip()
            if not stripped:
                continue
            try:
                yield decode(stripped)
            except EventDecodeError as error:
                yield BadLine(number, str(error))
