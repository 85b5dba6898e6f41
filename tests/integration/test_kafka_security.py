"""A secured Apache Kafka refuses every principal what its role must not do (issue 28).

One secured broker (TLS, SCRAM-SHA-512, StandardAuthorizer) for the module, set up the way
``fairshare up --kafka-security sasl_ssl`` sets it up: every service principal created and
granted by the admin (``services.bus.principals``). Each test acts as one principal through the
services' own clients, with ``$FAIRSHARE_KAFKA_CONFIG`` naming its client settings as
``--kafka-config`` does for a service. The session's broker is used when it is secured itself
(``--broker-security sasl_ssl``); otherwise this module starts its own.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import pytest
from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    KafkaError,
    KafkaException,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, NewTopic

# where confluent-kafka defines them (as in services.bus.principals)
from confluent_kafka.admin._acl import AclBinding, AclOperation, AclPermissionType
from confluent_kafka.admin._resource import ResourcePatternType, ResourceType

from events import TopicKind, Topics, new_event
from events.models import PlaceCommand
from services.brokers import BrokerHandle, BrokerStartError, start_broker
from services.bus.admin import TopicSetupError, ensure_topics
from services.bus.checkpoints import KafkaCheckpoints
from services.bus.connection import KAFKA_CONFIG_ENV, client_config, read_properties
from services.bus.export import read_to_end
from services.bus.follower import LogFollower
from services.bus.kafka import KafkaEventPublisher, producer_config
from services.bus.lease import KafkaLeaseLog, lease_topic
from services.bus.port import PublishError
from services.bus.principals import (
    ADMIN,
    READS,
    WRITES,
    Role,
    checkpoint_topics,
    set_up_principals,
)
from services.scheduler.host import INPUTS
from tests.factories import DECISION, PLACEMENT, submitted

pytestmark = [pytest.mark.broker]

CLUSTER = "demo"
NOW = datetime.now(UTC)
#: Each role's principal in this module's deployment.
PRINCIPALS = {role: (f"agent-{CLUSTER}" if role is Role.AGENT else role.value) for role in Role}


@dataclass
class Secured:
    broker: BrokerHandle
    topics: Topics
    files: dict[str, Path]

    def identity(self, principal: str) -> dict[str, str]:
        return read_properties(self.files[principal])

    def topic_names(self) -> list[str]:
        """The deployment's topics, the lease's and every service's checkpoint topics."""
        owned = [
            topic
            for role, principal in PRINCIPALS.items()
            for topic in checkpoint_topics(principal, role, self.topics)[1]
        ]
        return [*self.topics.all_names(), lease_topic(self.topics), *owned]


@pytest.fixture(scope="module")
def secured(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Secured]:
    session: BrokerHandle | None = None
    if request.config.getoption("--broker-security") == "sasl_ssl":
        session = request.getfixturevalue("broker")
    broker = session
    if broker is None:
        try:
            broker = start_broker(
                "apache-kafka", tmp_path_factory.mktemp("secured-kafka"), security="sasl_ssl"
            )
        except BrokerStartError as error:
            if request.config.getoption("--broker") == "apache-kafka":
                pytest.fail(f"a secured Apache Kafka did not start: {error}")
            pytest.skip(f"no Apache Kafka to secure: {error}")
    assert broker.security_dir is not None
    topics = Topics(prefix=f"s{uuid.uuid4().hex[:10]}.")
    files = set_up_principals(
        broker.bootstrap,
        broker.identity,
        topics,
        [CLUSTER],
        tmp_path_factory.mktemp("principals"),
    )
    files[ADMIN] = broker.security_dir / "clients" / f"{ADMIN}.properties"
    # a record on every topic, so that a read either gets it or is refused
    producer = Producer(client_config(broker.bootstrap, identity=broker.identity))
    secured = Secured(broker, topics, files)
    for name in secured.topic_names():
        producer.produce(name, key=b"k", value=b"v", partition=0)
    assert producer.flush(30) == 0
    try:
        yield secured
    finally:
        if session is None:
            broker.stop()


@pytest.fixture
def act_as(secured: Secured, monkeypatch: pytest.MonkeyPatch) -> ActAs:
    return ActAs(secured, monkeypatch)


class ActAs:
    """Make a principal this process's identity, as ``--kafka-config`` does for a service."""

    def __init__(self, secured: Secured, monkeypatch: pytest.MonkeyPatch) -> None:
        self.secured, self.monkeypatch = secured, monkeypatch

    def __call__(self, principal: str) -> None:
        self.monkeypatch.setenv(KAFKA_CONFIG_ENV, str(self.secured.files[principal]))


def _place(workload_id: str) -> PlaceCommand:
    return PlaceCommand(
        command_id=f"cmd-{workload_id}",
        cluster=CLUSTER,
        pool=CLUSTER,
        workload_id=workload_id,
        attempt=1,
        budget="lab/vision",
        placement=PLACEMENT,
        allocated=False,
        min_runtime_s=0,
        decision=DECISION,
    )


def _writes(secured: Secured, principal: str) -> dict[str, str]:
    """Topic -> "ok" or the error, for one record produced to every topic by ``principal``
    with the services' producer settings (idempotent, acks=all)."""
    results: dict[str, str] = {}
    producer = Producer(
        producer_config(secured.broker.bootstrap) | secured.identity(principal) | {"log_level": 0}
    )

    def delivered(error: object, message: object) -> None:
        topic = message.topic()  # type: ignore[attr-defined]
        results[topic] = "ok" if error is None else error.name()  # type: ignore[attr-defined]

    for name in secured.topic_names():
        producer.produce(name, key=b"k", value=b"v", on_delivery=delivered)
    try:
        assert producer.flush(30) == 0
    except KafkaException as error:
        # a principal that may write no topic at all gets no producer id: nothing is written
        return {name: error.args[0].name() for name in secured.topic_names()}
    return results


def _reads(secured: Secured, principal: str, timeout_s: float = 20) -> dict[str, str]:
    """Topic -> "ok" (its first record came) or the error the broker answered with."""
    consumer = Consumer(
        client_config(
            secured.broker.bootstrap,
            {"group.id": f"fairshare-reader-{uuid.uuid4().hex}", "enable.auto.commit": False},
            identity=secured.identity(principal),
        )
    )
    names = secured.topic_names()
    consumer.assign([TopicPartition(name, 0, OFFSET_BEGINNING) for name in names])
    results: dict[str, str] = {}
    deadline = time.monotonic() + timeout_s
    try:
        while len(results) < len(names) and time.monotonic() < deadline:
            for message in consumer.consume(100, 0.5):
                error = message.error()
                topic = message.topic()
                if topic is not None:
                    results.setdefault(topic, "ok" if error is None else error.name())
    finally:
        consumer.close()
    return results


def _allowed(secured: Secured, role: Role, written: bool) -> set[str]:
    """The topics ``role`` may write (``written``) or read."""
    kinds = (WRITES if written else READS)[role]
    names = {secured.topics.name(kind) for kind in kinds}
    names |= set(checkpoint_topics(PRINCIPALS[role], role, secured.topics)[int(written)])
    if role is Role.SCHEDULER:
        names.add(lease_topic(secured.topics))
    return names


@pytest.mark.parametrize("role", list(Role))
def test_each_principal_writes_only_the_topics_of_its_role(secured: Secured, role: Role) -> None:
    results = _writes(secured, PRINCIPALS[role])
    allowed = _allowed(secured, role, written=True)
    assert {topic for topic, outcome in results.items() if outcome == "ok"} == allowed
    refused = {results[topic] for topic in set(results) - allowed}
    assert refused <= {"TOPIC_AUTHORIZATION_FAILED", "CLUSTER_AUTHORIZATION_FAILED"}


@pytest.mark.parametrize("role", list(Role))
def test_each_principal_reads_only_the_topics_of_its_role(secured: Secured, role: Role) -> None:
    results = _reads(secured, PRINCIPALS[role])
    allowed = _allowed(secured, role, written=False)
    assert set(results) == set(secured.topic_names()), "every topic answered"
    assert {topic for topic, outcome in results.items() if outcome == "ok"} == allowed
    assert {results[t] for t in set(results) - allowed} <= {"TOPIC_AUTHORIZATION_FAILED"}


def test_the_projector_cannot_publish_a_fact(secured: Secured, act_as: ActAs) -> None:
    act_as(PRINCIPALS[Role.PROJECTOR])
    publisher = KafkaEventPublisher(secured.broker.bootstrap, secured.topics)
    try:
        publisher.publish(new_event(submitted("forged"), source="projector", time=NOW))
        with pytest.raises(PublishError, match="TOPIC_AUTHORIZATION_FAILED"):
            publisher.flush()
    finally:
        publisher.close()


def test_an_agent_cannot_place_work(secured: Secured, act_as: ActAs) -> None:
    """Only the scheduler writes commands: an agent's stolen password places nothing."""
    act_as(PRINCIPALS[Role.AGENT])
    command = _place("w-forged")
    publisher = KafkaEventPublisher(secured.broker.bootstrap, secured.topics)
    try:
        publisher.publish(new_event(command, source="agent", time=NOW))
        with pytest.raises(PublishError, match="TOPIC_AUTHORIZATION_FAILED"):
            publisher.flush()
    finally:
        publisher.close()


@pytest.mark.parametrize("role", list(Role))
def test_only_the_admin_creates_or_deletes_topics_or_changes_acls(
    secured: Secured, role: Role
) -> None:
    client = AdminClient(
        client_config(secured.broker.bootstrap, identity=secured.identity(PRINCIPALS[role]))
    )
    victim = secured.topics.name(TopicKind.LEDGER)
    new = f"{secured.topics.prefix}forged"
    grant = AclBinding(
        ResourceType.TOPIC,
        victim,
        ResourcePatternType.LITERAL,
        f"User:{PRINCIPALS[role]}",
        "*",
        AclOperation.WRITE,
        AclPermissionType.ALLOW,
    )
    attempts = {
        "create": client.create_topics([NewTopic(new, 1, 1)])[new],
        "delete": client.delete_topics([victim])[victim],
        "grant": client.create_acls([grant])[grant],
    }
    for what, future in attempts.items():
        with pytest.raises(KafkaException) as refused:
            future.result(timeout=30)
        assert "AUTHORIZATION_FAILED" in refused.value.args[0].name(), what
    assert (
        victim
        in AdminClient(client_config(secured.broker.bootstrap, identity=secured.identity(ADMIN)))
        .list_topics(timeout=10)
        .topics
    )


def test_no_service_can_replace_another_services_checkpoint(
    secured: Secured, act_as: ActAs
) -> None:
    """Charging's checkpoint is where it resumes and where a period's audit starts: the API
    (or a scheduler, an agent) may not write one."""
    act_as(PRINCIPALS[Role.CHARGING])
    KafkaCheckpoints(secured.broker.bootstrap, secured.topics, "charging").save(b"true fold")
    act_as(PRINCIPALS[Role.API])
    with pytest.raises(RuntimeError, match="TOPIC_AUTHORIZATION_FAILED"):
        KafkaCheckpoints(secured.broker.bootstrap, secured.topics, "charging").save(b"forged")
    act_as(PRINCIPALS[Role.AUDIT])
    store = KafkaCheckpoints(secured.broker.bootstrap, secured.topics, "charging")
    assert store.load() == b"true fold"


def test_a_service_finds_every_topic_and_creates_none(secured: Secured, act_as: ActAs) -> None:
    """What every service does when it starts (``ensure_topics``) works under its principal;
    a deployment the admin has not set up (a prefix of its own) is refused, not created."""
    act_as(PRINCIPALS[Role.API])
    assert set(ensure_topics(secured.broker.bootstrap, secured.topics)) == set(
        secured.topics.all_names()
    )
    with pytest.raises(TopicSetupError, match="AUTHORIZATION"):
        ensure_topics(secured.broker.bootstrap, Topics(prefix=f"u{uuid.uuid4().hex[:8]}."))


def test_no_principal_reaches_the_log_without_tls_and_its_password(secured: Secured) -> None:
    """Each way in without TLS and a known password is closed, for the reason expected."""
    api = secured.identity(PRINCIPALS[Role.API])
    attempts = {
        "plain text": ({}, {"_ALL_BROKERS_DOWN", "_TRANSPORT"}),
        "SCRAM without TLS": (
            {**api, "security.protocol": "SASL_PLAINTEXT"},
            {"_ALL_BROKERS_DOWN", "_TRANSPORT"},
        ),
        "a wrong password": ({**api, "sasl.password": "guessed"}, {"_AUTHENTICATION"}),
        # the system's CAs: the broker's certificate is of the cluster's own CA only.
        # librdkafka may first say the connection dropped (_TRANSPORT) and only then why
        # (_SSL, "certificate verify failed"): wait for the reason, not the first word.
        "another CA": ({**api, "ssl.ca.location": "probe"}, {"_SSL", "certificate verify"}),
    }
    for what, (identity, expected) in attempts.items():
        errors: list[str] = []

        def seen(error: KafkaError, into: list[str] = errors) -> None:
            into.append(f"{error.name()}: {error.str()}")

        def explained(errors: list[str] = errors, expected: set[str] = expected) -> bool:
            return any(word in error for error in errors for word in expected)

        own = {"log_level": 0, "error_cb": seen}
        client = AdminClient(client_config(secured.broker.bootstrap, own, identity=identity))
        deadline = time.monotonic() + 20
        while not explained() and time.monotonic() < deadline:
            client.poll(0.2)  # serves the error callback
            try:
                client.list_topics(timeout=0.3)
            except KafkaException:
                continue
            pytest.fail(f"{what}: the broker answered")
        assert explained(), f"{what}: {errors}"


def test_the_services_own_clients_work_under_their_principals(
    secured: Secured, act_as: ActAs
) -> None:
    """A short pass through the log as each service makes it: the API submits, the
    scheduler follows its inputs, holds its lease and checkpoints its fold, the agent reads
    the command, audit reads everything."""
    bootstrap, topics = secured.broker.bootstrap, secured.topics
    act_as(PRINCIPALS[Role.API])
    api = KafkaEventPublisher(bootstrap, topics, client_id="fairshare-api")
    api.publish(new_event(submitted("w-secured"), source="api", time=NOW))
    api.flush()
    api.close()

    act_as(PRINCIPALS[Role.SCHEDULER])
    follower = LogFollower(bootstrap, INPUTS, topics, timeout_s=20)
    seen = [d.envelope.subject for d in follower.catch_up()]
    follower.close()
    assert "w-secured" in seen
    scheduler = KafkaEventPublisher(bootstrap, topics, client_id="scheduler")
    scheduler.publish(new_event(_place("w-secured"), source="scheduler", time=NOW))
    scheduler.flush()
    scheduler.close()
    lease = KafkaLeaseLog(bootstrap, topics, record_timeout_s=10)
    appended: list[bool] = []
    lease.append(b"scheduler", b"epoch-1", lambda: appended.append(True))
    deadline = time.monotonic() + 20
    while not appended and time.monotonic() < deadline:
        lease.read()
        time.sleep(0.1)
    lease.close()
    assert appended
    store = KafkaCheckpoints(bootstrap, topics, "scheduler")
    store.save(b"fold")
    assert KafkaCheckpoints(bootstrap, topics, "scheduler").load() == b"fold"

    act_as(PRINCIPALS[Role.AGENT])
    follower = LogFollower(bootstrap, (TopicKind.COMMANDS,), topics)
    commands = [d.envelope.data for d in follower.catch_up()]
    follower.close()
    assert "w-secured" in [c.workload_id for c in commands if isinstance(c, PlaceCommand)]

    act_as(PRINCIPALS[Role.AUDIT])
    assert sum(1 for _ in read_to_end(bootstrap, topics.all_names())) >= len(topics.all_names())
