"""What every broker launcher hands back, and the checks they share.

Fairshare talks to its event log through the Kafka protocol only, so the rest of the
project must not care *which* broker is behind a bootstrap address: a real Apache
Kafka, the embedded noida-db, a container or a cluster someone else runs. Each
launcher in this package therefore returns the same small `BrokerHandle`, and each one
declares itself ready only after the same *real* Metadata round trip
(`wait_until_ready`), because an open TCP port is not proof that a broker can serve
requests (a KRaft broker listens well before it has joined its quorum).
"""

from __future__ import annotations

import json
import logging
import socket
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient

from services.bus.connection import client_config, security_settings

__all__ = [
    "PORTS_FILE",
    "BrokerHandle",
    "BrokerStartError",
    "free_port",
    "read_ports",
    "tail_text",
    "wait_until_ready",
    "write_ports",
]

_log = logging.getLogger(__name__)

#: Name of the file, inside a broker's data directory, that remembers its ports. A
#: restart on the same data directory must come back on the same address, or clients
#: and stored configuration that captured the old bootstrap would silently break.
PORTS_FILE = "ports.json"


class BrokerStartError(RuntimeError):
    """A broker could not be made available.

    One exception type for every launcher (missing tool, failed download, early exit,
    readiness timeout), so that callers such as the CLI or a pytest fixture can report
    "no broker" uniformly instead of catching a zoo of subprocess/OS errors.
    """


@dataclass(frozen=True)
class BrokerHandle:
    """A running (or borrowed) Kafka-protocol broker.

    Frozen so a handle can be shared between fixtures and threads without anyone
    re-pointing it; ``stop`` is a plain callable rather than a method so each launcher
    can close over exactly the resources it owns (a process, a data dir, nothing).
    ``stop`` is idempotent for every launcher in this package. The handle is also a
    context manager, so ``with start_broker(...) as broker:`` cannot leak a broker.
    """

    kind: str
    bootstrap: str
    description: str
    stop: Callable[[], None] = field(repr=False, compare=False)
    #: Why a broker this handle started is no longer running, or None while it runs (or when
    #: it is not ours to watch). A supervisor polls it; a restart is the launcher called
    #: again on the same data dir.
    exited: Callable[[], str | None] = field(default=lambda: None, repr=False, compare=False)
    #: The broker's process id when it is one local process (tests kill it with -9).
    pid: int | None = field(default=None, compare=False)
    #: Start again, on the same data and ports, whatever of this broker died; returns what
    #: was started once it serves (raises `BrokerStartError` if it does not). None where the
    #: broker is not ours to start (an external Kafka). A supervisor calls it when
    #: ``exited`` says why the broker is down.
    revive: Callable[[], str] | None = field(default=None, repr=False, compare=False)
    #: The admin's client settings of a secured broker Fairshare started (SASL_SSL, SCRAM),
    #: empty for a plain one: what whoever started it sets up the services' principals with.
    identity: Mapping[str, str] = field(default_factory=dict, repr=False, compare=False)
    #: Where a secured broker keeps its CA, certificate, secrets and client files.
    security_dir: Path | None = field(default=None, compare=False)

    def __enter__(self) -> BrokerHandle:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


def free_port() -> int:
    """Return a TCP port on 127.0.0.1 that is free right now.

    The kernel picks it (bind to port 0), which avoids fixed ports that collide
    between parallel test sessions. There is an unavoidable window between closing
    this socket and the broker binding the port; launchers surface a bind failure
    as a `BrokerStartError` with the broker's own message.
    """
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def wait_until_ready(
    bootstrap: str,
    timeout_s: float,
    *,
    abort_check: Callable[[], str | None] | None = None,
    min_brokers: int = 1,
    identity: Mapping[str, str] | None = None,
) -> None:
    """Block until a broker at ``bootstrap`` answers a Metadata request listing at least
    ``min_brokers`` brokers (a cluster is ready when all its nodes have registered).

    A Metadata round trip that lists at least one broker is the cheapest request
    that proves the broker is serving the Kafka protocol, not just accepting TCP.
    Each attempt uses a fresh, quiet AdminClient with short timeouts so the loop
    reacts quickly once the broker is up and does not flood stderr while it is not.

    ``abort_check`` lets a launcher stop waiting early: it is called between attempts
    and returns an error message (for example "the java process exited") or None.
    ``identity``: the settings the probe connects with (default: this process's, see
    `services.bus.connection`); a secured broker answers only a principal it knows, so the
    probe also proves the credentials work. Raises `BrokerStartError` on timeout or abort.
    """
    deadline = time.monotonic() + timeout_s
    last_error = "no attempt made"
    while True:
        if abort_check is not None:
            reason = abort_check()
            if reason is not None:
                raise BrokerStartError(reason)
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise BrokerStartError(
                f"no Kafka broker answered a Metadata request at {bootstrap} "
                f"within {timeout_s:.0f} s (last error: {last_error})" + _security_hint(identity)
            )
        attempt_s = max(0.2, min(2.0, remaining))
        try:
            admin = AdminClient(_probe_config(bootstrap, attempt_s, identity))
            metadata: Any = admin.list_topics(timeout=attempt_s)
        except KafkaException as exc:
            last_error = str(exc.args[0]) if exc.args else repr(exc)
        except ValueError as exc:
            # librdkafka rejects a malformed bootstrap string this way; retrying
            # cannot help, so fail now with the reason.
            raise BrokerStartError(f"invalid bootstrap {bootstrap!r}: {exc}") from exc
        else:
            if len(metadata.brokers) >= min_brokers:
                return
            last_error = f"Metadata response listed {len(metadata.brokers)} broker(s) so far"
        time.sleep(min(0.25, max(0.0, deadline - time.monotonic())))


def _security_hint(identity: Mapping[str, str] | None) -> str:
    """What to try when a plain-text probe got no answer: the Kafka that ``fairshare up`` and
    ``broker run`` start is secured by default, and a plain client's handshake on its TLS
    listener fails the same way a missing broker does."""
    settings = identity if identity is not None else security_settings()
    if settings.get("security.protocol", "PLAINTEXT").upper() != "PLAINTEXT":
        return ""
    return (
        "; if that Kafka is secured (the one `fairshare up` or `broker run` starts is, by "
        "default), pass --kafka-config <data dir>/broker/security/clients/admin.properties "
        "(or audit.properties)"
    )


def _probe_config(
    bootstrap: str, attempt_s: float, identity: Mapping[str, str] | None = None
) -> dict[str, Any]:
    """librdkafka settings for one readiness probe.

    ``log_level`` 0 silences the "Connection refused" lines librdkafka would
    otherwise print on every attempt while the broker is still starting.
    """
    timeout_ms = max(100, int(attempt_s * 1000))
    return client_config(bootstrap, identity=identity) | {
        "socket.timeout.ms": timeout_ms,
        "socket.connection.setup.timeout.ms": timeout_ms,
        "reconnect.backoff.ms": 50,
        "reconnect.backoff.max.ms": 250,
        "log_level": 0,
        "log.connection.close": False,
    }


def read_ports(data_dir: Path) -> dict[str, int]:
    """Ports remembered in ``data_dir`` by an earlier start, or {} if none.

    An unreadable file is treated as absent (with a warning) rather than fatal: the
    worst case is a fresh port, which is what a first start would get anyway.
    """
    path = data_dir / PORTS_FILE
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as exc:
        _log.warning("ignoring unreadable %s: %s", path, exc)
        return {}
    if not isinstance(raw, dict):
        _log.warning("ignoring %s: not a JSON object", path)
        return {}
    return {str(k): v for k, v in raw.items() if isinstance(v, int) and 0 < v < 65536}


def write_ports(data_dir: Path, ports: dict[str, int]) -> None:
    """Remember ``ports`` in ``data_dir`` (atomically, so a crash leaves old or new)."""
    path = data_dir / PORTS_FILE
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(ports, sort_keys=True) + "\n", encoding="utf-8")
    tmp.replace(path)


def tail_text(text: str, lines: int = 40) -> str:
    """The last ``lines`` lines of ``text``, for error messages that must stay readable."""
    kept = text.rstrip().splitlines()[-lines:]
    return "\n".join(kept)
