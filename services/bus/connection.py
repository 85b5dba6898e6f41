"""How every Kafka client of Fairshare reaches its broker: the bootstrap address and, for a
secured Kafka, who it is and how it checks the broker (docs/security.md).

One function, :func:`client_config`, builds the settings every client starts from (the
producers, the consumers, the one-shot readers, the admin clients, the readiness probe), so a
secured Kafka needs no change anywhere else: the settings come from a librdkafka properties
file (``security.protocol``, ``sasl.mechanism``, ``sasl.username``, ``sasl.password``,
``ssl.ca.location``, ...), named by ``--kafka-config FILE`` or ``$FAIRSHARE_KAFKA_CONFIG``.
The file is the process's identity on the log: one principal per service (``fairshare up``
writes one file per principal, see :mod:`services.bus.principals`), so the broker's ACLs decide
what each service may read and write.

A file rather than options: the password never appears in a command line (which any local user
can read in ``ps``), and any setting librdkafka knows (mTLS keys, OAuth) works without code here.
The environment variable rather than a parameter threaded through every constructor: the
clients are built in many places, often long after the command line was read, and a child a
service starts (the faust worker's aiokafka) reads the same identity.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

#: The properties file of this process's Kafka clients (set by ``--kafka-config``).
KAFKA_CONFIG_ENV = "FAIRSHARE_KAFKA_CONFIG"

#: Settings a properties file may not change: the code sets them per client, and a file that
#: named them would silently repoint every client at once.
_RESERVED = frozenset({"bootstrap.servers", "group.id", "group.instance.id", "client.id"})

_cache: dict[str, tuple[float, dict[str, str]]] = {}


class KafkaConfigError(ValueError):
    """The connection settings cannot be read: the service must not start without them."""


def read_properties(path: Path) -> dict[str, str]:
    """A Java/librdkafka ``.properties`` file: ``key=value`` (or ``key: value``) lines, ``#``
    and ``!`` comments, blank lines ignored. Values are taken literally (no escapes): that is
    what ``kafka-console-producer --command-config`` and librdkafka's examples use."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as error:
        raise KafkaConfigError(f"cannot read Kafka settings {path}: {error}") from error
    settings: dict[str, str] = {}
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line[0] in "#!":
            continue
        cut = min((i for i in (line.find("="), line.find(":")) if i > 0), default=-1)
        if cut < 0:
            raise KafkaConfigError(f"{path}:{number}: not a key=value line")
        key, value = line[:cut].strip(), line[cut + 1 :].strip()
        if key in _RESERVED:
            raise KafkaConfigError(
                f"{path}:{number}: {key} is set by Fairshare itself (use --kafka for the "
                "bootstrap servers)"
            )
        settings[key] = value
    return settings


def write_private(path: Path, data: bytes | str) -> Path:
    """Write a file readable by its owner only (a password, a private key): created 0600
    under a temporary name and renamed, so no reader ever sees half of it and there is no
    moment when others may read it."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.unlink(missing_ok=True)
    descriptor = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(descriptor, "wb") as handle:
        handle.write(data.encode() if isinstance(data, str) else data)
    tmp.replace(path)
    return path


def write_properties(path: Path, settings: Mapping[str, str]) -> Path:
    """``settings`` as a properties file :func:`read_properties` reads, owner-only (it may
    hold a password)."""
    lines = ["# Kafka client settings (librdkafka), written by fairshare"]
    lines += [f"{key}={value}" for key, value in settings.items()]
    return write_private(path, "\n".join(lines) + "\n")


def configured_file() -> Path | None:
    """The properties file this process's clients use, or None (a plain Kafka)."""
    named = os.environ.get(KAFKA_CONFIG_ENV, "").strip()
    return Path(named) if named else None


def use_config_file(path: Path | None) -> None:
    """Make ``path`` this process's connection settings (and its children's): read it now, so
    a missing or bad file stops the command before it touches the log. None leaves them."""
    if path is None:
        return
    resolved = path.expanduser().resolve()
    read_properties(resolved)
    os.environ[KAFKA_CONFIG_ENV] = str(resolved)


def security_settings() -> dict[str, str]:
    """The settings of :func:`configured_file` (none without one). Read again when the file
    changes, so a long-lived test session or a rotated password is picked up by new clients."""
    path = configured_file()
    if path is None:
        return {}
    key = str(path)
    try:
        stamp = path.stat().st_mtime
    except OSError as error:
        raise KafkaConfigError(f"cannot read Kafka settings {path}: {error}") from error
    cached = _cache.get(key)
    if cached is None or cached[0] != stamp:
        cached = (stamp, read_properties(path))
        _cache[key] = cached
    return dict(cached[1])


def client_config(
    bootstrap: str,
    own: Mapping[str, Any] | None = None,
    *,
    identity: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """The settings a Kafka client of Fairshare starts from: who it is (``identity``, default:
    :func:`security_settings`), then the client's own settings (``own``: group, timeouts,
    callbacks), and ``bootstrap``."""
    who = security_settings() if identity is None else dict(identity)
    return {**_QUIET, **who, **(own or {}), "bootstrap.servers": bootstrap}


class LibrdkafkaLog:
    """librdkafka's own lines as records of the ``fairshare.kafka.client`` logger, not raw
    lines on stderr: ``fairshare up`` showed its user "SASL SCRAM-SHA-512 mechanism handshake
    failed" and "Coordinator load in progress: retrying" while its brokers settled. Its errors
    and warnings are what it retries by itself (a fatal one reaches the client's ``error_cb``,
    :mod:`services.bus.fatal`, and ends the service), so they are logged at info: a service's
    log file keeps them, an interactive command at its default level does not print them."""

    def __init__(self) -> None:
        self.logger = logging.getLogger("fairshare.kafka.client")

    def log(self, level: int, message: str, *args: object, **_kwargs: object) -> None:
        demoted = logging.ERROR if level >= logging.CRITICAL else min(level, logging.INFO)
        self.logger.log(demoted, message, *args)


#: librdkafka logs at "info" by default: every admin client that ends said "Purging 1 unserved
#: events from background queue". Notices and worse go to :class:`LibrdkafkaLog`.
_QUIET = {"log_level": 5, "logger": LibrdkafkaLog()}
