"""A checkpoint of a fold: its state and the log positions it covers, as bytes.

The live fold (``LiveState``: the scheduler, the API's view) and charging's
(``ChargingState``) are checkpointed alike; :func:`decode` is told which kind it expects and
rejects any other, so one fold's checkpoint is never restored into another.

A reader that folds the whole log from its first offset on every start takes time and memory
in proportion to history (a fleet's year is billions of records). With a checkpoint it starts
from the state the fold had reached and reads only the tail: the fold is the same function, so
the checkpoint plus the tail is the fold of the whole log (tests/unit/test_checkpoint.py checks
it at every cut).

The bytes are a header and the compressed state:

* ``format`` and ``code``: a checkpoint is restored only by the code that wrote it (``code`` is
  the caller's fingerprint of its fold's source); any other is *rejected* and the fold is
  rebuilt from the log, which is always right, only slower;
* ``sha256`` of the body: a checkpoint damaged on the way is rejected the same way;
* the positions: per (topic, partition), the first offset the state has not folded.

The body is the state pickled, read back by an unpickler that builds only the fold's own types
(events, projections, datetimes, sorted lists): a damaged or hostile body names another class
and is rejected, it cannot run code. The checksum tells a damaged checkpoint from a whole one,
not a forged one from a real one: the checkpoints topic is the writer's alone (issue 28).
"""

from __future__ import annotations

import hashlib
import io
import pickle
import zlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Generic, TypeVar, overload

import orjson

from events.positions import TopicPartition
from projections.live_state import LiveState

S = TypeVar("S")

FORMAT = 1
_MAGIC = b"fairshare-checkpoint\n"
#: Modules whose classes a checkpoint may build (the fold's own types and what they hold).
_ALLOWED_PACKAGES = ("events.", "projections.", "sortedcontainers.")
_ALLOWED_MODULES = frozenset({"datetime", "collections"})
#: Single classes of other modules that the fold's values hold: times decoded from the log
#: carry pydantic's UTC tzinfo.
_ALLOWED_CLASSES = frozenset({("pydantic_core._pydantic_core", "TzInfo")})


class CheckpointRejectedError(ValueError):
    """Not a checkpoint this code may restore; the message says why (the caller logs it and
    folds from the log's start instead)."""


@dataclass(frozen=True)
class Checkpoint(Generic[S]):
    state: S
    #: Per (topic, partition): the first offset the state has not folded.
    positions: dict[TopicPartition, int]
    #: The latest event time the state had folded (epoch seconds), for the logs.
    as_of: float


def encode(state: object, positions: Mapping[TopicPartition, int], code: str) -> bytes:
    """The checkpoint of ``state``, which has folded everything before ``positions``."""
    body = zlib.compress(pickle.dumps(state, protocol=5), 1)
    header = {
        "format": FORMAT,
        "code": code,
        "sha256": hashlib.sha256(body).hexdigest(),
        "as_of": float(getattr(state, "latest_time", 0.0)),
        "positions": [
            [topic, partition, offset] for (topic, partition), offset in sorted(positions.items())
        ],
    }
    return _MAGIC + orjson.dumps(header) + b"\n" + body


@overload
def decode(blob: bytes, code: str) -> Checkpoint[LiveState]: ...


@overload
def decode(blob: bytes, code: str, expect: type[S]) -> Checkpoint[S]: ...


def decode(blob: bytes, code: str, expect: type[Any] = LiveState) -> Checkpoint[Any]:
    """The checkpoint in ``blob``, if this code (``code``) may restore it and it holds an
    ``expect`` (default: the live fold)."""
    if not blob.startswith(_MAGIC):
        raise CheckpointRejectedError("not a Fairshare checkpoint")
    line, _, body = blob[len(_MAGIC) :].partition(b"\n")
    try:
        header = orjson.loads(line)
    except orjson.JSONDecodeError as error:
        raise CheckpointRejectedError(f"unreadable header: {error}") from error
    if header.get("format") != FORMAT:
        raise CheckpointRejectedError(f"format {header.get('format')!r}, this code reads {FORMAT}")
    if header.get("code") != code:
        raise CheckpointRejectedError("written by other code (its fold may differ): rebuilt")
    if hashlib.sha256(body).hexdigest() != header.get("sha256"):
        raise CheckpointRejectedError("its body does not match its checksum (damaged)")
    try:
        state = _FoldTypesOnly(io.BytesIO(zlib.decompress(body))).load()
    except (pickle.UnpicklingError, zlib.error, EOFError, AttributeError, ImportError) as error:
        raise CheckpointRejectedError(f"unreadable body: {error}") from error
    if not isinstance(state, expect):
        raise CheckpointRejectedError(f"holds a {type(state).__name__}, not a {expect.__name__}")
    positions = {(str(t), int(p)): int(o) for t, p, o in header.get("positions", [])}
    return Checkpoint(state, positions, float(header.get("as_of", 0.0)))


class _FoldTypesOnly(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        allowed = module.startswith(_ALLOWED_PACKAGES) or module in _ALLOWED_MODULES
        if allowed or (module, name) in _ALLOWED_CLASSES:
            return super().find_class(module, name)
        raise pickle.UnpicklingError(f"{module}.{name} is not a type of the fold")
