"""Who may do what on a secured Kafka: one SCRAM principal per role, and the ACLs that give
each role the topics its service reads and writes, nothing more (docs/security.md).

Why per role: the log is the record, so whoever can write a topic can forge what it holds. With
one principal per service, a stolen password of the projector (which only reads) forges
nothing, an agent's cannot place work (only the scheduler writes commands), the API's cannot
forge a charge (only charging writes the ledger), and no service can create, delete or
reconfigure a topic or change an ACL: only ``admin``, the broker's super user, can.

The table below follows what each service's code reads and writes (the constants it is
checked against in ``tests/unit/test_kafka_security.py``). ACLs are per topic: a principal
that may write a topic may write any event type there (docs/security.md says what remains).

Consumer groups: every reader here assigns its partitions and commits nothing, under a
throw-away group whose name starts with one of :data:`HELPER_GROUPS`; a consumer that names a
group asks for its coordinator, which a broker refuses without READ on that group. The
projector and the charging shards join real groups of their own, which only they may use.
"""

from __future__ import annotations

import json
import secrets
import time
from collections.abc import Iterable, Mapping
from concurrent.futures import Future
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient

# where confluent-kafka defines them (its package re-exports them without saying so)
from confluent_kafka.admin._acl import AclBinding, AclOperation, AclPermissionType
from confluent_kafka.admin._resource import ResourcePatternType, ResourceType
from confluent_kafka.admin._scram import (
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialAlteration,
    UserScramCredentialUpsertion,
)

from events.topics import TopicKind, Topics
from services.bus.admin import ensure_compacted_topic, ensure_topics
from services.bus.checkpoints import chunk_topic, manifest_topic
from services.bus.connection import client_config, write_private, write_properties
from services.bus.lease import lease_topic

#: The super user: creates topics, principals and ACLs; the only one that may.
ADMIN = "admin"
SCRAM_MECHANISM = "SCRAM-SHA-512"
#: PBKDF2 rounds of each stored SCRAM credential (Kafka's minimum is 4096).
SCRAM_ITERATIONS = 8192
#: The group-name prefixes of the readers that assign partitions themselves
#: (``services.bus.export``, ``follower``, ``checkpoints``; ``lease`` for the scheduler).
HELPER_GROUPS = (
    "fairshare-reader-",
    "fairshare-ends-",
    "fairshare-follower-",
    "fairshare-checkpoints-",
)
#: The projector's group (``services.projector.sql_projector.PROJECTOR_NAME``).
PROJECTOR_GROUP = "fairshare-read-models"


class Role(StrEnum):
    API = "api"
    SCHEDULER = "scheduler"
    AGENT = "agent"
    CHARGING = "charging"
    PROJECTOR = "projector"
    AUDIT = "audit"


_ALL = frozenset(TopicKind)
_K = TopicKind
#: The signing keys of signed facts (docs/signed-facts.md): every reader checks signatures
#: against them, only the admin registers a key (no role writes them).
_KEYS = frozenset({TopicKind.KEYS})
#: Topic kinds each role reads and writes (the folds' inputs and the events each publishes).
READS: dict[Role, frozenset[TopicKind]] = {
    # its view folds every topic but the dead letters (services.api.view.VIEW_KINDS)
    Role.API: _ALL - {_K.DEADLETTER},
    # services.scheduler.host.INPUTS
    Role.SCHEDULER: _KEYS
    | {_K.BUDGETS, _K.CLUSTER, _K.WORKLOADS, _K.COMMANDS, _K.USAGE, _K.HEARTBEATS, _K.LIVENESS},
    # services.agents.agent.CATCH_UP_TOPICS
    Role.AGENT: _KEYS
    | {_K.BUDGETS, _K.CLUSTER, _K.COMMANDS, _K.WORKLOADS, _K.USAGE, _K.HEARTBEATS, _K.LIVENESS},
    # its inputs and its own ledger; the dead letters, so each is published once
    Role.CHARGING: _KEYS | {_K.WORKLOADS, _K.HEARTBEATS, _K.LEDGER, _K.DEADLETTER},
    # services.projector.host.PROJECTED, and the dead letters (as charging)
    Role.PROJECTOR: _KEYS
    | {_K.WORKLOADS, _K.COMMANDS, _K.CLUSTER, _K.BUDGETS, _K.LEDGER, _K.DEADLETTER},
    Role.AUDIT: _ALL,
}
WRITES: dict[Role, frozenset[TopicKind]] = {
    # submissions, cancellations, arrays; cordons; budgets, members, prices
    Role.API: frozenset({_K.WORKLOADS, _K.CLUSTER, _K.BUDGETS}),
    # place/preempt commands and settings; requeues and losses; drains, nodes down and up
    Role.SCHEDULER: frozenset({_K.COMMANDS, _K.WORKLOADS, _K.CLUSTER}),
    # starts, ends, preemptions; native work's submissions and cancellations; nodes
    # registered; heartbeats and liveness signals
    Role.AGENT: frozenset({_K.WORKLOADS, _K.CLUSTER, _K.HEARTBEATS, _K.LIVENESS}),
    # charges and period seals; usage snapshots; records it could not read
    Role.CHARGING: frozenset({_K.LEDGER, _K.USAGE, _K.DEADLETTER}),
    # a record it cannot read must be kept (dead-lettered) before it commits past it
    Role.PROJECTOR: frozenset({_K.DEADLETTER}),
    Role.AUDIT: frozenset(),
}
#: Roles whose folds keep checkpoints on the log, each in topics of its own principal
#: (``services.bus.checkpoints``); audit reads charging's, where a period's audit starts.
CHECKPOINTS_WRITTEN = frozenset({Role.API, Role.SCHEDULER, Role.AGENT, Role.CHARGING})


def principal_name(role: Role, cluster: str | None = None) -> str:
    """The SCRAM user of ``role``; an agent's names its cluster (``agent-demo``), so each
    cluster's agent has a password of its own and one can be revoked alone."""
    if role is Role.AGENT:
        if not cluster:
            raise ValueError("an agent principal names its cluster")
        return f"agent-{cluster}"
    return role.value


def principals(clusters: Iterable[str]) -> dict[str, Role]:
    """Every service principal of a deployment whose agents run ``clusters``."""
    names: dict[str, Role] = {principal_name(r): r for r in Role if r is not Role.AGENT}
    names.update({principal_name(Role.AGENT, cluster): Role.AGENT for cluster in clusters})
    return names


@dataclass(frozen=True)
class _Pattern:
    resource: ResourceType
    name: str
    pattern: ResourcePatternType


def _topic(name: str) -> _Pattern:
    return _Pattern(ResourceType.TOPIC, name, ResourcePatternType.LITERAL)


def _group(name: str, prefixed: bool = True) -> _Pattern:
    kind = ResourcePatternType.PREFIXED if prefixed else ResourcePatternType.LITERAL
    return _Pattern(ResourceType.GROUP, name, kind)


def checkpoint_topics(principal: str, role: Role, topics: Topics) -> tuple[list[str], list[str]]:
    """(read, written) checkpoint topics of ``principal``: its own, where its role keeps
    checkpoints (the owner is the principal: ``agent-<cluster>`` for each cluster's agent);
    charging's for audit."""

    def both(owner: str) -> list[str]:
        return [manifest_topic(topics, owner), chunk_topic(topics, owner)]

    if role in CHECKPOINTS_WRITTEN:
        return both(principal), both(principal)
    if role is Role.AUDIT:
        return both(principal_name(Role.CHARGING)), []
    return [], []


def role_grants(principal: str, role: Role, topics: Topics) -> list[tuple[_Pattern, AclOperation]]:
    """What ``principal`` of ``role`` may do, as (resource, operation) pairs."""
    grants: list[tuple[_Pattern, AclOperation]] = []
    # DESCRIBE of every topic of the deployment: a service checks at start that they all
    # exist (services.bus.admin.ensure_topics); a topic it could not see, it would try to
    # create, which it may not
    if topics.prefix:
        visible = [_Pattern(ResourceType.TOPIC, topics.prefix, ResourcePatternType.PREFIXED)]
    else:
        visible = [_topic(name) for name in topics.all_names()]
    grants += [(pattern, AclOperation.DESCRIBE) for pattern in visible]
    grants += [(_topic(topics.name(kind)), AclOperation.READ) for kind in sorted(READS[role])]
    grants += [(_topic(topics.name(kind)), AclOperation.WRITE) for kind in sorted(WRITES[role])]
    read, written = checkpoint_topics(principal, role, topics)
    grants += [(_topic(name), AclOperation.READ) for name in read]
    grants += [(_topic(name), AclOperation.WRITE) for name in written]
    grants += [(_group(prefix), AclOperation.READ) for prefix in HELPER_GROUPS]
    if role is Role.SCHEDULER:
        lease = _topic(lease_topic(topics))
        grants += [(lease, AclOperation.READ), (lease, AclOperation.WRITE)]
        grants.append((_group("fairshare-lease-"), AclOperation.READ))
    if role is Role.CHARGING:
        # the shards' group (services.charging.shards), and faust's fresh group per start
        grants.append((_group(f"{topics.prefix}charging", prefixed=False), AclOperation.READ))
        grants.append((_group("fairshare-charging-"), AclOperation.READ))
    if role is Role.PROJECTOR:
        grants.append((_group(PROJECTOR_GROUP, prefixed=False), AclOperation.READ))
    return grants


def acl_bindings(principal: str, role: Role, topics: Topics) -> list[AclBinding]:
    return [
        AclBinding(
            pattern.resource,
            pattern.name,
            pattern.pattern,
            f"User:{principal}",
            "*",
            operation,
            AclPermissionType.ALLOW,
        )
        for pattern, operation in role_grants(principal, role, topics)
    ]


# -- the secrets file --------------------------------------------------------------------------
def load_secrets(path: Path) -> dict[str, str]:
    """``principal -> password`` of a secrets file (none when it does not exist)."""
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}
    if not isinstance(raw, dict) or not all(isinstance(v, str) for v in raw.values()):
        raise ValueError(f"{path}: not a secrets file (a JSON object of passwords)")
    return {str(k): v for k, v in raw.items()}


def passwords_for(path: Path, names: Iterable[str]) -> dict[str, str]:
    """The password of each of ``names``, made up (32 random bytes) for those the file does not
    hold yet and saved with the others: a restart keeps every principal's password."""
    known = load_secrets(path)
    wanted = {name: known.get(name) or secrets.token_urlsafe(32) for name in names}
    if any(name not in known for name in wanted):
        write_private(path, json.dumps({**known, **wanted}, indent=2, sort_keys=True) + "\n")
    return wanted


def identity_of(admin: Mapping[str, str], name: str, password: str) -> dict[str, str]:
    """A principal's client settings: the admin's way to the broker (TLS and its CA), with
    the principal's own SCRAM name and password. The admin's own client certificate or key,
    if it has one (mTLS), is never handed on."""
    tls = admin.get("security.protocol", "").upper() in ("SSL", "SASL_SSL")
    kept = {k: v for k, v in admin.items() if not k.startswith(_ADMINS_OWN)}
    return {
        **kept,
        "security.protocol": "SASL_SSL" if tls else "SASL_PLAINTEXT",
        "sasl.mechanism": SCRAM_MECHANISM,
        "sasl.username": name,
        "sasl.password": password,
    }


#: Settings that identify the admin itself: its password, its certificate and key.
_ADMINS_OWN = ("sasl.", "ssl.key", "ssl.certificate", "ssl.keystore")


# -- provisioning ------------------------------------------------------------------------------
class ProvisionError(RuntimeError):
    pass


def provision(
    bootstrap: str,
    admin: Mapping[str, str],
    topics: Topics,
    passwords: Mapping[str, str],
    roles: Mapping[str, Role],
    *,
    timeout_s: float = 30.0,
) -> None:
    """As ``admin``: create the deployment's topics, upsert each principal's SCRAM credential
    (``passwords``), grant each its role's ACLs (``roles``), then wait until every principal
    sees every topic, so services started next find their rights in force. Idempotent: a
    restart upserts the same passwords and the same bindings."""
    ensure_topics(bootstrap, topics, timeout_s=timeout_s, identity=admin)
    owned = [t for name, role in roles.items() for t in checkpoint_topics(name, role, topics)[1]]
    for topic in (lease_topic(topics), *owned):
        ensure_compacted_topic(bootstrap, topic, timeout_s, identity=admin)
    client = AdminClient(client_config(bootstrap, identity=admin))
    info = ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, SCRAM_ITERATIONS)
    upserts: list[UserScramCredentialAlteration] = [
        UserScramCredentialUpsertion(name, info, passwords[name].encode()) for name in roles
    ]
    if upserts:
        _wait_all(client.alter_user_scram_credentials(upserts, request_timeout=timeout_s))
    bindings = [b for name, role in roles.items() for b in acl_bindings(name, role, topics)]
    if bindings:
        _wait_all(client.create_acls(bindings, request_timeout=timeout_s))
    for name in roles:
        _wait_until_visible(bootstrap, identity_of(admin, name, passwords[name]), topics, timeout_s)


def _wait_all(futures: Mapping[Any, Future[Any]]) -> None:
    for key, future in futures.items():
        try:
            future.result()
        except KafkaException as error:
            raise ProvisionError(f"{key}: {error.args[0].str()}") from error


def _wait_until_visible(
    bootstrap: str, identity: Mapping[str, str], topics: Topics, timeout_s: float
) -> None:
    """Until the principal authenticates and its metadata lists every topic of the deployment
    (credentials and ACLs reach each broker a moment after the controller took them)."""
    wanted = set(topics.all_names())
    quiet = {"log_level": 0, "socket.timeout.ms": 5000}
    deadline = time.monotonic() + timeout_s
    last = "no answer"
    while time.monotonic() < deadline:
        try:
            client = AdminClient(client_config(bootstrap, quiet, identity=identity))
            seen = set(client.list_topics(timeout=5).topics)
        except KafkaException as error:
            last = str(error.args[0])
        else:
            if wanted <= seen:
                return
            last = f"sees {len(wanted & seen)} of {len(wanted)} topics"
        time.sleep(0.2)
    raise ProvisionError(
        f"{identity.get('sasl.username')}: not in force in {timeout_s:g} s ({last})"
    )


def write_identities(
    directory: Path, admin: Mapping[str, str], passwords: Mapping[str, str]
) -> dict[str, Path]:
    """One librdkafka properties file per principal in ``directory`` (0600 each): what
    ``--kafka-config`` of its service names."""
    return {
        name: write_properties(directory / f"{name}.properties", identity_of(admin, name, pw))
        for name, pw in passwords.items()
    }


def set_up_principals(
    bootstrap: str,
    admin: Mapping[str, str],
    topics: Topics,
    clusters: Iterable[str],
    directory: Path,
) -> dict[str, Path]:
    """Every service principal of a deployment, in force on the Kafka at ``bootstrap``: their
    passwords kept in ``directory/secrets.json`` (made on the first call), created and granted
    by ``admin`` (:func:`provision`), and one properties file each in ``directory/clients``;
    returns ``principal -> file``."""
    roles = principals(clusters)
    passwords = passwords_for(directory / "secrets.json", roles)
    try:
        provision(bootstrap, admin, topics, passwords, roles)
    except KafkaException as error:  # the admin could not reach the broker, or was refused
        raise ProvisionError(f"as {admin.get('sasl.username', 'admin')}: {error}") from error
    return write_identities(directory / "clients", admin, passwords)
