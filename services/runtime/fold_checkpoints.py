"""A service's checkpoints of its fold: restore one at start, save one now and then.

The bytes are :mod:`projections.checkpoint`'s, the store is the log's broker
(:class:`services.bus.checkpoints.KafkaCheckpoints`). A checkpoint is restored only by the code
that wrote it (:func:`fold_code`: a digest of the fold's source, ``events`` and
``projections``), so an upgrade rebuilds once from the log; a damaged, missing or foreign one is
ignored with a warning, and the service folds from the log's start as it always could. A
failed save is a warning too: the next one is due soon, and the log is still the truth.
"""

from __future__ import annotations

import hashlib
import logging
import time
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager, nullcontext
from functools import cache
from pathlib import Path
from typing import Generic, Protocol, TypeVar

from events.positions import TopicPartition
from projections.checkpoint import Checkpoint, CheckpointRejectedError, decode, encode
from projections.live_state import LiveState

S = TypeVar("S")

log = logging.getLogger(__name__)


class CheckpointStore(Protocol):
    def load(self) -> bytes | None: ...

    def save(self, blob: bytes) -> object: ...


@cache
def fold_code() -> str:
    """A digest of the source of the fold (the ``events`` and ``projections`` packages): the
    state a checkpoint holds is what this code folded, and only this code may read it back."""
    digest = hashlib.sha256()
    root = Path(__file__).resolve().parents[2]
    for package in ("events", "projections"):
        for path in sorted((root / package).rglob("*.py")):
            digest.update(path.relative_to(root).as_posix().encode())
            digest.update(path.read_bytes())
    return digest.hexdigest()


class StateCheckpoints(Generic[S]):
    """Checkpoints of one fold whose state is an ``S`` (a checkpoint holding another kind of
    state is rejected like a damaged one)."""

    def __init__(
        self,
        store: CheckpointStore,
        every_s: float = 300.0,
        *,
        name: str = "fold",
        clock: Callable[[], float] = time.monotonic,
        expect: type[S],
    ) -> None:
        self.store, self.every_s, self.name, self.clock = store, every_s, name, clock
        self.expect = expect
        self._saved_at = clock()
        self.saved = 0

    def restore(self) -> Checkpoint[S] | None:
        """The latest checkpoint this code may restore, or None (and why, in the log)."""
        started = self.clock()
        try:
            blob = self.store.load()
        except Exception as error:  # the store is an optimisation: the log is still there
            log.warning("checkpoint not read", extra={"fold": self.name, "reason": str(error)})
            return None
        if blob is None:
            log.info("no checkpoint: folding from the log's start", extra={"fold": self.name})
            return None
        try:
            checkpoint: Checkpoint[S] = decode(blob, fold_code(), self.expect)
        except CheckpointRejectedError as error:
            log.warning("checkpoint ignored", extra={"fold": self.name, "reason": str(error)})
            return None
        log.info(
            "restored from a checkpoint",
            extra={
                "fold": self.name,
                "bytes": len(blob),
                "events": getattr(checkpoint.state, "events", None),
                "as_of": checkpoint.as_of,
                "seconds": round(self.clock() - started, 3),
            },
        )
        return checkpoint

    def due(self) -> bool:
        return self.clock() - self._saved_at >= self.every_s

    def due_now(self) -> None:
        """The next save is due at once: a fold that has just read a long history from its
        first offset saves it now, not an interval later (a crash meanwhile would read it
        all again)."""
        self._saved_at = float("-inf")

    def save(
        self,
        state: S,
        positions: Mapping[TopicPartition, int],
        lock: AbstractContextManager[object] | None = None,
    ) -> bool:
        """Checkpoint ``state``, which has folded everything before ``positions``; ``lock``
        is held while the state is read (not while the bytes are stored: readers wait only
        for the encoding)."""
        self._saved_at = self.clock()
        try:
            with lock or nullcontext():
                blob = encode(state, positions, fold_code())
            self.store.save(blob)
        except Exception as error:  # the next one is due soon; the log is still the truth
            log.warning("checkpoint not saved", extra={"fold": self.name, "reason": str(error)})
            return False
        self.saved += 1
        log.info(
            "checkpoint saved",
            extra={
                "fold": self.name,
                "bytes": len(blob),
                "events": getattr(state, "events", None),
                "seconds": round(self.clock() - self._saved_at, 3),
            },
        )
        return True


class FoldCheckpoints(StateCheckpoints[LiveState]):
    """Checkpoints of the live fold (the scheduler's, the API view's)."""

    def __init__(
        self,
        store: CheckpointStore,
        every_s: float = 300.0,
        *,
        name: str = "fold",
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        super().__init__(store, every_s, name=name, clock=clock, expect=LiveState)
