"""Pick a broker launcher by name, and the embedded broker of ``fairshare up``.

One string (from a CLI flag, an environment variable or a pytest option) chooses
the broker for a whole session, so every entry point dispatches the same way and
reports the same list of valid kinds.
"""

from __future__ import annotations

from pathlib import Path

from .apache_kafka import KafkaUnavailableError, start_apache_kafka, start_kafka_cluster
from .containers import start_testcontainers_kafka
from .external import external_broker
from .handle import BrokerHandle, BrokerStartError
from .noida import start_noida
from .security import kept_security

__all__ = [
    "BROKER_KINDS",
    "DEFAULT_EMBEDDED_SECURITY",
    "EMBEDDED_KINDS",
    "NOT_AUTHENTICATED",
    "NOT_CRASH_SAFE",
    "OPEN",
    "STILL_PLAINTEXT",
    "embedded_security",
    "kind_kept_in",
    "normalize_kind",
    "open_log_warnings",
    "start_broker",
    "start_embedded_broker",
]

#: Every kind `start_broker` accepts, in order of preference for tests.
BROKER_KINDS = ("apache-kafka", "noida", "external", "testcontainers")
#: The kinds ``fairshare up`` can start itself.
EMBEDDED_KINDS = ("apache-kafka", "noida")
#: The banner line printed whenever noida-db holds the log.
NOT_CRASH_SAFE = (
    "noida-db is a demo broker that is NOT crash-safe: a kill -9 can lose events it has "
    "acknowledged"
)
#: The banner line printed whenever noida-db holds the log: it has no authentication.
NOT_AUTHENTICATED = (
    "noida-db has no authentication: any local process that reaches its port can write the "
    "log (facts stay signed, and readers refuse a forged one)"
)
#: The banner line printed when a data dir holds a log from before Fairshare secured its own
#: brokers by default: it is kept as it was (see `services.brokers.security.checked_security`).
STILL_PLAINTEXT = (
    "this data dir's Apache Kafka was made without authentication and stays so: any local "
    "process that reaches its port can write the log; start a new --data-dir for SASL_SSL"
)
#: The banner line printed when plain text was asked for.
OPEN = (
    "Apache Kafka without authentication (asked for): any local process that reaches its "
    "port can write the log"
)
#: The listeners of an Apache Kafka ``fairshare up`` or ``broker run`` starts in a new data
#: dir: every one TLS with SCRAM-SHA-512 and ACLs (`services.brokers.security`).
DEFAULT_EMBEDDED_SECURITY = "sasl_ssl"


def normalize_kind(kind: str) -> str:
    """Underscores and case are forgiven ("apache_kafka"), since the name often comes from
    env vars."""
    return kind.strip().lower().replace("_", "-")


def start_broker(
    kind: str,
    data_dir: Path,
    *,
    brokers: int = 1,
    die_with_parent: bool = False,
    security: str | None = None,
) -> BrokerHandle:
    """Start (or, for "external", borrow) a broker of ``kind``.

    ``data_dir`` is where a local broker keeps its state; "external" and
    "testcontainers" ignore it, since their data lives elsewhere. ``brokers`` above one
    starts a replicated Apache Kafka cluster (the only kind that can be one). With
    ``die_with_parent`` Apache Kafka is stopped with the caller, even one killed with -9.
    ``security`` "sasl_ssl" secures Apache Kafka (`services.brokers.security`); None: what the
    data dir holds.
    """
    normalized = normalize_kind(kind)
    if normalized not in BROKER_KINDS:
        raise BrokerStartError(
            f"unknown broker kind {kind!r}; expected one of: {', '.join(BROKER_KINDS)}"
        )
    if brokers != 1 and normalized != "apache-kafka":
        raise BrokerStartError(f"only apache-kafka runs as a cluster; {kind} has one broker")
    _check_security(normalized, security)
    if normalized == "apache-kafka":
        if brokers == 1:
            return start_apache_kafka(data_dir, die_with_parent=die_with_parent, security=security)
        cluster = start_kafka_cluster(
            data_dir, brokers, die_with_parent=die_with_parent, security=security
        )
        return cluster.handle(stop_at_exit=True)
    if normalized == "noida":
        return start_noida(data_dir)
    if normalized == "external":
        return external_broker()
    return start_testcontainers_kafka()


def _check_security(kind: str, security: str | None) -> None:
    """Only an Apache Kafka that Fairshare starts is secured by it; an external one is
    secured by whoever runs it (``--kafka-config`` says how to reach it)."""
    if security not in (None, "plaintext") and kind != "apache-kafka":
        raise BrokerStartError(
            f"only apache-kafka can be started secured ({security}), not {kind}: noida-db "
            "has no authentication, and an external Kafka is secured by whoever runs it"
        )


def kind_kept_in(data_dir: Path) -> str | None:
    """The broker whose log ``data_dir`` already holds: "apache-kafka", "noida" or None.

    A data dir keeps its broker: switching would start an empty log next to the old one,
    and the old events would look lost.
    """
    if (data_dir / "kraft-logs").is_dir():
        return "apache-kafka"
    if (data_dir / "kafka.json").is_file():
        return "noida"
    return None


def embedded_security(data_dir: Path, wanted: str | None) -> str:
    """The security of the Apache Kafka a launcher starts in ``data_dir``: ``wanted``, else
    what the data dir holds, else `DEFAULT_EMBEDDED_SECURITY` (a new log is never open)."""
    return wanted or kept_security(data_dir) or DEFAULT_EMBEDDED_SECURITY


def open_log_warnings(wanted: str | None, resolved: str) -> list[str]:
    """What a launcher says of an Apache Kafka it starts as `embedded_security` resolved it:
    nothing when secured; in plain text, whether that was asked for or kept from the data dir."""
    if resolved != "plaintext":
        return []
    return [STILL_PLAINTEXT if wanted is None else OPEN]


def start_embedded_broker(
    data_dir: Path, kind: str | None = None, security: str | None = None
) -> tuple[BrokerHandle, list[str]]:
    """The broker ``fairshare up`` starts in ``data_dir``, and the banner lines to print.

    Without ``kind``: the broker the data dir already holds, else Apache Kafka (crash-safe),
    else, only when Kafka cannot run here at all (no Java 17+, no jars), noida-db with a
    banner saying it is neither crash-safe nor authenticated. A Kafka that fails to *start*
    is an error, not a reason to fall back. Apache Kafka is stopped with its parent, even one
    killed with -9. ``security``: see `embedded_security` (secured unless the data dir holds
    a plain log or "plaintext" is asked for); a log secured on request never falls back to
    noida-db.
    """
    wanted = normalize_kind(kind) if kind else None
    if wanted is not None and wanted not in EMBEDDED_KINDS:
        raise BrokerStartError(f"--broker: one of {', '.join(EMBEDDED_KINDS)}, not {kind!r}")
    kept = kind_kept_in(data_dir)
    if wanted is not None and kept is not None and kept != wanted:
        raise BrokerStartError(
            f"{data_dir} holds a {kept} log; use another --data-dir for {wanted}"
        )
    chosen = wanted or kept
    asked_secured = security not in (None, "plaintext")
    if asked_secured:
        _check_security(chosen or "apache-kafka", security)
    if chosen == "noida":
        return start_noida(data_dir), [NOT_CRASH_SAFE, NOT_AUTHENTICATED]
    resolved = embedded_security(data_dir, security)
    banner = open_log_warnings(security, resolved)
    try:
        return start_apache_kafka(data_dir, die_with_parent=True, security=resolved), banner
    except KafkaUnavailableError as error:
        if chosen == "apache-kafka" or asked_secured:
            raise
        reason = f"Apache Kafka cannot run here ({error}); falling back to noida-db"
        return start_noida(data_dir), [reason, NOT_CRASH_SAFE, NOT_AUTHENTICATED]
