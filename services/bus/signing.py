"""Signing what a service publishes, and the key files it signs with.

A service states facts under one key: the API its own, the scheduler its own, charging its
own, each cluster's agent its cluster's (``projections.trust`` says who may state what). The
key is a file, named by ``$FAIRSHARE_SIGNING_KEY``, read once per process; every publisher a
service opens is wrapped by :func:`signed`, so no code that builds an event knows about keys,
and a service without the variable publishes unsigned records, as before signed facts (what
readers make of those: docs/signed-facts.md, "Old logs").

The environment rather than a parameter threaded through every constructor, for the reason
``services.bus.connection`` gives for the Kafka identity: publishers are opened in many places,
long after the command line was read. Tests that run several services in one process pass a
:class:`~events.signing.Signer` to :class:`SigningPublisher` directly.

Key files hold an unencrypted PKCS #8 key (a service must read it unattended), so they are
created with mode 0600 and refused when group or others may read them, as ssh refuses a
private key.
"""

from __future__ import annotations

import os
import stat
import threading
from pathlib import Path
from typing import Any

from events.envelope import Envelope
from events.signing import Signer
from services.bus.port import EventPublisher

#: The private key file this process signs its records with (unset: it does not sign).
SIGNING_KEY_ENV = "FAIRSHARE_SIGNING_KEY"

_signers: dict[str, Signer] = {}


class SigningKeyError(ValueError):
    """The key file cannot be used: the service must not start, rather than publish unsigned
    facts that every reader refuses."""


class SigningPublisher:
    """A publisher whose every record is signed with ``signer`` on its way out.

    What a thread publishes between two flushes is one batch, signed with one signature
    (``events.signing``, "Batches"): a scheduling pass, an agent's round, a batch of charges.
    The records are therefore handed to the inner publisher at :meth:`flush`, which the port
    already requires before anything counts as published; errors of handing them over are
    raised there too. Each thread has its own batch (the API's requests publish side by side,
    and each flush answers for its own thread's records)."""

    def __init__(self, inner: EventPublisher, signer: Signer) -> None:
        self.inner = inner
        self.signer = signer
        self._pending = threading.local()

    def publish(self, envelope: Envelope[Any]) -> None:
        self._batch().append(envelope)

    def flush(self, timeout_s: float = 30.0) -> None:
        self._hand_over()
        self.inner.flush(timeout_s)

    def close(self) -> None:
        try:
            self._hand_over()
        finally:
            self.inner.close()

    def _batch(self) -> list[Envelope[Any]]:
        batch: list[Envelope[Any]] | None = getattr(self._pending, "batch", None)
        if batch is None:
            batch = self._pending.batch = []
        return batch

    def _hand_over(self) -> None:
        batch = self._batch()
        if not batch:
            return
        envelopes = list(batch)
        batch.clear()  # handed over or failed: the caller publishes again after an error
        for envelope in self.signer.sign_batch(envelopes):
            self.inner.publish(envelope)

    def __getattr__(self, name: str) -> Any:
        """What else the wrapped publisher offers (``publish_raw`` in tests, counters)."""
        return getattr(self.inner, name)


def write_key(path: Path, signer: Signer) -> None:
    """Write ``signer``'s private key to a new file only its owner can read (never over an
    existing file: a key in use must not be replaced under a running service)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(descriptor, "wb") as handle:
        handle.write(signer.pem())


def load_key(path: Path) -> Signer:
    """The signer of a key file written by :func:`write_key` (or ``fairshare keys create``)."""
    try:
        mode = path.stat().st_mode
        if mode & (stat.S_IRWXG | stat.S_IRWXO):
            raise SigningKeyError(
                f"{path}: a private key readable by others is no secret (chmod 600 {path})"
            )
        return Signer.from_pem(path.read_bytes())
    except OSError as error:
        raise SigningKeyError(f"cannot read signing key {path}: {error}") from error
    except ValueError as error:
        if isinstance(error, SigningKeyError):
            raise
        raise SigningKeyError(f"{path}: not an Ed25519 private key ({error})") from error


def process_signer() -> Signer | None:
    """The signer ``$FAIRSHARE_SIGNING_KEY`` names (None: this process does not sign)."""
    path = os.environ.get(SIGNING_KEY_ENV, "").strip()
    if not path:
        return None
    signer = _signers.get(path)
    if signer is None:
        signer = _signers[path] = load_key(Path(path))
    return signer


def signed(publisher: EventPublisher, signer: Signer | None = None) -> EventPublisher:
    """``publisher`` signing with ``signer``, else with this process's key, else as it is."""
    signer = signer or process_signer()
    return publisher if signer is None else SigningPublisher(publisher, signer)
