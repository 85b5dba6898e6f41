"""Where checkpoints of a fold live: two compacted topics of the log's own broker per service
that keeps them, so a service started on another machine finds the latest one
(``projections.checkpoint`` makes the bytes).

* ``<prefix><owner>-checkpoint-chunks``: a checkpoint's bytes in chunks of at most
  ``CHUNK_BYTES`` (a broker takes records of about a megabyte), keyed ``<name>/<id>/<n>``;
* ``<prefix><owner>-checkpoints``: one small manifest per checkpoint, keyed by the fold's name
  (the latest one per name survives compaction): its id, size, checksum and where its chunks
  lie.

The owner is the service the fold belongs to (:func:`checkpoint_owner`: ``scheduler``, ``api``,
``agent-<cluster>``, ``charging``): on a secured Kafka each may write only its own topics
(``services.bus.principals``), so no service can put a checkpoint of its making where another
restores from (charging's is where a period's audit starts). Topics of their own rather than
keys of one topic because ACLs are per topic.

A manifest is written only once its chunks are acknowledged, and the chunks of the checkpoint
it replaces are then deleted (tombstones, for compaction): a reader takes the latest manifest,
reads just the chunks it names (by offset, not the whole topic) and checks the checksum. A
manifest whose chunks are gone or damaged reads as no checkpoint (the caller rebuilds from the
log). One partition each; written by the fold's service only.
"""

from __future__ import annotations

import hashlib
import logging
import uuid
from collections.abc import Callable
from dataclasses import dataclass

import orjson
from confluent_kafka import Consumer, KafkaError, Message, Producer, TopicPartition

from events import Topics
from services.bus.admin import ensure_compacted_topic
from services.bus.connection import client_config
from services.bus.export import read_to_end
from services.bus.fatal import FatalLatch
from services.bus.kafka import producer_config

log = logging.getLogger(__name__)

CHUNK_BYTES = 512 * 1024


def checkpoint_owner(name: str) -> str:
    """The service a fold of ``name`` belongs to: an agent's name whole (``agent-<cluster>``:
    each cluster's agent its own), else its first word (``api-view``: ``api``;
    ``charging-period-2026-11``: ``charging``)."""
    return name if name.startswith("agent-") else name.split("-", 1)[0]


def manifest_topic(topics: Topics, owner: str) -> str:
    return f"{topics.prefix}{owner}-checkpoints"


def chunk_topic(topics: Topics, owner: str) -> str:
    return f"{topics.prefix}{owner}-checkpoint-chunks"


@dataclass(frozen=True)
class Manifest:
    name: str
    id: str
    size: int
    sha256: str
    #: (offset, length) of each chunk on the chunks topic's one partition, in order.
    chunks: tuple[tuple[int, int], ...]

    def encode(self) -> bytes:
        return orjson.dumps(
            {
                "name": self.name,
                "id": self.id,
                "size": self.size,
                "sha256": self.sha256,
                "chunks": [list(c) for c in self.chunks],
            }
        )

    @staticmethod
    def decode(value: bytes) -> Manifest | None:
        try:
            raw = orjson.loads(value)
            return Manifest(
                str(raw["name"]),
                str(raw["id"]),
                int(raw["size"]),
                str(raw["sha256"]),
                tuple((int(o), int(n)) for o, n in raw["chunks"]),
            )
        except (orjson.JSONDecodeError, KeyError, TypeError, ValueError):
            return None


class KafkaCheckpoints:
    """The checkpoints of one fold (``name``: ``scheduler``, ``api-view``, ...)."""

    def __init__(self, bootstrap: str, topics: Topics, name: str, timeout_s: float = 30.0) -> None:
        self.bootstrap, self.name, self.timeout_s = bootstrap, name, timeout_s
        owner = checkpoint_owner(name)
        self.manifests, self.chunks = manifest_topic(topics, owner), chunk_topic(topics, owner)
        for topic in (self.manifests, self.chunks):
            ensure_compacted_topic(bootstrap, topic, timeout_s)
        self._previous: Manifest | None = None

    def load(self) -> bytes | None:
        """The latest checkpoint's bytes, whole and as written; None if there is none."""
        manifest = self._latest_manifest()
        if manifest is None:
            return None
        blob = self._read_chunks(manifest)
        if blob is None or len(blob) != manifest.size:
            log.warning("checkpoint chunks missing; ignored", extra={"checkpoint": manifest.id})
            return None
        if hashlib.sha256(blob).hexdigest() != manifest.sha256:
            log.warning("checkpoint chunks damaged; ignored", extra={"checkpoint": manifest.id})
            return None
        self._previous = manifest
        return blob

    def save(self, blob: bytes) -> Manifest:
        """Write ``blob`` as the latest checkpoint; then delete the one it replaces."""
        checkpoint_id = uuid.uuid4().hex
        producer = Producer(producer_config(self.bootstrap, f"fairshare-checkpoints-{self.name}"))
        offsets: dict[int, tuple[int, int]] = {}
        failures: list[str] = []

        def delivered_as(index: int, size: int) -> Callable[[KafkaError | None, Message], None]:
            def delivered(error: KafkaError | None, message: Message) -> None:
                if error is not None:
                    failures.append(str(error))
                else:
                    offsets[index] = (int(message.offset() or 0), size)

            return delivered

        pieces = [blob[i : i + CHUNK_BYTES] for i in range(0, len(blob), CHUNK_BYTES)] or [b""]
        for index, piece in enumerate(pieces):
            producer.produce(
                self.chunks,
                key=f"{self.name}/{checkpoint_id}/{index}".encode(),
                value=piece,
                on_delivery=delivered_as(index, len(piece)),
            )
        producer.flush(self.timeout_s)
        if failures or len(offsets) != len(pieces):
            raise RuntimeError(f"checkpoint chunks not acknowledged: {failures[:1]}")
        manifest = Manifest(
            self.name,
            checkpoint_id,
            len(blob),
            hashlib.sha256(blob).hexdigest(),
            tuple(offsets[i] for i in range(len(pieces))),
        )
        producer.produce(self.manifests, key=self.name.encode(), value=manifest.encode())
        if producer.flush(self.timeout_s):
            raise RuntimeError("checkpoint manifest not acknowledged")
        previous, self._previous = self._previous, manifest
        if previous is not None and previous.id != checkpoint_id:
            for index in range(len(previous.chunks)):
                key = f"{self.name}/{previous.id}/{index}".encode()
                producer.produce(self.chunks, key=key, value=None)
            producer.flush(self.timeout_s)
        return manifest

    def _latest_manifest(self) -> Manifest | None:
        latest: Manifest | None = None
        for record in read_to_end(self.bootstrap, [self.manifests], timeout_s=self.timeout_s):
            if record.key == self.name.encode() and record.value:
                latest = Manifest.decode(record.value) or latest
        return latest

    def _read_chunks(self, manifest: Manifest) -> bytes | None:
        if not manifest.chunks:
            return b""
        fatal = FatalLatch("checkpoints")
        consumer = Consumer(
            client_config(self.bootstrap)
            | {
                "group.id": f"fairshare-checkpoints-{uuid.uuid4().hex}",
                "enable.auto.commit": False,
                "error_cb": fatal.on_error,
            }
        )
        try:
            wanted = {offset: index for index, (offset, _) in enumerate(manifest.chunks)}
            consumer.assign([TopicPartition(self.chunks, 0, manifest.chunks[0][0])])
            pieces: dict[int, bytes] = {}
            last = manifest.chunks[-1][0]
            while len(pieces) < len(wanted):
                # the first as soon as it comes, then whatever else is fetched already (a
                # consume of N waits for N or its whole timeout)
                messages = fatal.consume(consumer, 1, self.timeout_s)
                if not messages:
                    return None  # compacted away, or the broker stopped answering
                messages += fatal.consume(consumer, 100, 0)
                for message in messages:
                    offset = int(message.offset() or 0)
                    if offset in wanted and message.value() is not None:
                        pieces[wanted[offset]] = bytes(message.value() or b"")
                    if offset >= last and len(pieces) < len(wanted):
                        return None  # a chunk it names is gone
            return b"".join(pieces[i] for i in range(len(wanted)))
        finally:
            consumer.close()
