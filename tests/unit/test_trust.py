"""The one judgement of whether a record may be believed (projections/trust.py): signatures
that any change breaks, keys that speak for one signer, a cluster's agent that speaks only for
its own nodes and runs, revocation by event time, and the rule for unsigned history."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from events.envelope import Envelope
from events.models import (
    ALL_EVENT_MODELS,
    BudgetCreated,
    GpuHeartbeat,
    GpuReading,
    LedgerCharge,
    NodeAlive,
    NodeGpus,
    NodeRegistered,
    Placement,
    WorkloadFinished,
    WorkloadPlaced,
    WorkloadStarted,
    charge_id,
)
from events.serde import (
    decode_binary,
    decode_structured,
    encode_binary,
    encode_structured,
)
from projections.trust import (
    BAD_SIGNATURE,
    NOT_ITS_FACT,
    REPLAYED,
    REVOKED,
    STATED_BY,
    UNJUDGED,
    UNKNOWN_KEY,
    UNSIGNED,
    KeyBook,
    NodesAndRuns,
    Trust,
    judge,
)
from tests.factories import sample_events, submitted
from tests.signing import KEYS, fact, mutated, registration, registrations, revocation

T0 = 1_800_000_000.0
CLUSTERS = ("cluster-a", "cluster-b")
SIGNER_OF_ROLE = {
    "admin": KEYS.admin,
    "api": KEYS.api,
    "scheduler": KEYS.scheduler,
    "charging": KEYS.charging,
    "agent": KEYS.agent_a,
}


def trusted() -> Trust:
    """A trust that has read every key of tests.signing, registered at T0 - 60."""
    trust = Trust(keep_refusals=None)
    for envelope in registrations(T0 - 60):
        assert trust.judge(envelope) is None
    return trust


def signed_samples() -> list[Envelope[Any]]:
    """One sample of every judged type, signed by a key that may state it (agents: cluster
    A's, which the samples name), after the keys were registered."""
    out = []
    for envelope in sample_events():
        if isinstance(envelope.data, UNJUDGED) or envelope.type.startswith("fairshare.signing"):
            continue
        roles = STATED_BY[type(envelope.data)]
        # the API's facts that an agent may also state (native work) by the API: the samples
        # are not native work
        role = (
            "api"
            if "api" in roles
            else "agent"
            if "agent" in roles
            else sorted(roles - {"admin"} or roles)[0]
        )
        out.append(SIGNER_OF_ROLE[role].sign(envelope))
    return out


SAMPLES = signed_samples()


def heartbeat(node: str, cluster: str) -> GpuHeartbeat:
    reading = GpuReading(index=0, utilisation_pct=0.0, memory_used_bytes=0)
    return GpuHeartbeat(node=node, cluster=cluster, sequence=1, gpus=(reading,))


def test_every_fact_names_who_may_state_it() -> None:
    judged = [model for model in ALL_EVENT_MODELS if model not in UNJUDGED]
    assert sorted(m.__name__ for m in judged) == sorted(m.__name__ for m in STATED_BY)


@pytest.mark.parametrize("envelope", SAMPLES, ids=lambda e: e.type)
def test_a_signed_fact_is_believed_after_either_trip_through_the_log(
    envelope: Envelope[Any],
) -> None:
    record = encode_binary(envelope)
    from_kafka = decode_binary(record.value, record.headers)
    from_file = decode_structured(encode_structured(envelope))
    assert from_kafka == from_file == envelope
    for read in (from_kafka, from_file):
        assert trusted().judge(read) is None


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.filter_too_much])
@given(which=st.integers(0, len(SAMPLES) - 1), leaf=st.integers(0, 10_000), pick=st.integers())
def test_any_change_to_a_signed_record_is_refused(which: int, leaf: int, pick: int) -> None:
    """Every field, the signer and the signature included: the one a forger has to change."""
    verdict = trusted().judge(mutated(SAMPLES[which], leaf, pick))
    assert verdict is not None
    assert verdict.kind in (BAD_SIGNATURE, UNKNOWN_KEY)


def test_a_record_signed_with_another_key_under_the_apis_id_is_refused() -> None:
    data = submitted("wl-1")
    forged = KEYS.stranger.sign(fact(data, T0)).model_copy(update={"signer": KEYS.api.key_id})
    verdict = trusted().judge(forged)
    assert verdict is not None
    assert verdict.kind == BAD_SIGNATURE
    assert "api" in verdict.reason


def test_a_key_nobody_registered_speaks_for_no_one() -> None:
    verdict = trusted().judge(fact(submitted("wl-1"), T0, KEYS.stranger))
    assert verdict is not None
    assert verdict.kind == UNKNOWN_KEY


@pytest.mark.parametrize(
    ("signer", "data"),
    [
        (KEYS.api, heartbeat("n-a", "cluster-a")),
        (KEYS.agent_a, submitted("wl-1")),
        (KEYS.scheduler, BudgetCreated(budget="lab", created_by="x")),
        (
            KEYS.api,
            LedgerCharge(
                charge_id=charge_id("wl-1", 1, int(T0) // 3600),
                workload_id="wl-1",
                budget="lab/vision",
                pool="a100",
                bucket_start=datetime.fromtimestamp(int(T0) // 3600 * 3600, UTC),
                kind="allocated",
                debit_account="budget:lab/vision",
                credit_account="capacity:a100",
                gpu_seconds=60,
                amount=60,
            ),
        ),
    ],
    ids=["api-heartbeat", "agent-submission", "scheduler-budget", "api-charge"],
)
def test_a_role_states_only_its_own_facts(signer: Any, data: Any) -> None:
    verdict = trusted().judge(fact(data, T0, signer))
    assert verdict is not None
    assert verdict.kind == NOT_ITS_FACT


@settings(max_examples=60, deadline=None)
@given(
    kind=st.sampled_from(["registered", "heartbeat", "alive", "started", "finished"]),
    registered_first=st.booleans(),
)
def test_a_cluster_a_key_cannot_state_cluster_b_facts(kind: str, registered_first: bool) -> None:
    """Whether the reader already knows node n-b is B's or has only the record's word."""
    trust = trusted()
    if registered_first:
        node = NodeRegistered(node="n-b", cluster="cluster-b", pool="p", gpus=1, gpu_type="x")
        assert trust.judge(fact(node, T0, KEYS.agent_b)) is None
    on_b = Placement(nodes=(NodeGpus(node="n-b", gpus=(0,)),))
    placed = WorkloadPlaced(
        workload_id="wl-1", attempt=1, pool="p", placement=on_b, allocated=True, command_id="c"
    )
    assert trust.judge(fact(placed, T0, KEYS.scheduler)) is None
    reading = GpuReading(index=0, utilisation_pct=0.0, memory_used_bytes=0)
    b_fact = {
        "registered": NodeRegistered(
            node="n-b", cluster="cluster-b", pool="p", gpus=1, gpu_type="x"
        ),
        "heartbeat": heartbeat("n-b", "cluster-b"),
        "alive": NodeAlive(node="n-b", cluster="cluster-b", sequence=2, gpus=(reading,)),
        "started": WorkloadStarted(
            workload_id="wl-1", attempt=1, pool="p", placement=on_b, allocated=True
        ),
        "finished": WorkloadFinished(workload_id="wl-1", attempt=1, outcome="succeeded"),
    }[kind]
    if kind in ("started", "finished") and not registered_first:
        return  # the reader cannot know whose n-b is: the agent's word stands (documented)
    verdict = trust.judge(fact(b_fact, T0 + 1, KEYS.agent_a))
    assert verdict is not None
    assert verdict.kind == NOT_ITS_FACT, verdict
    assert trust.judge(fact(b_fact, T0 + 1, KEYS.agent_b)) is None


def test_an_agent_cannot_claim_a_node_of_another_cluster_as_its_own() -> None:
    trust = trusted()
    node = NodeRegistered(node="n-b", cluster="cluster-b", pool="p", gpus=1, gpu_type="x")
    assert trust.judge(fact(node, T0, KEYS.agent_b)) is None
    verdict = trust.judge(fact(heartbeat("n-b", "cluster-a"), T0 + 1, KEYS.agent_a))
    assert verdict is not None
    assert verdict.kind == NOT_ITS_FACT
    assert "cluster cluster-b's" in verdict.reason


@settings(max_examples=100, deadline=None)
@given(offset_ms=st.integers(-5_000, 5_000))
def test_a_revoked_key_is_believed_before_its_revocation_and_never_after(offset_ms: int) -> None:
    trust = trusted()
    revoked_at = T0 + 100
    assert trust.judge(revocation(KEYS.api, revoked_at)) is None
    verdict = trust.judge(fact(submitted("wl-1"), revoked_at + offset_ms / 1000, KEYS.api))
    if offset_ms < 0:
        assert verdict is None
    else:
        assert verdict is not None
        assert verdict.kind == REVOKED


def test_rotation_keeps_what_the_old_key_signed_and_believes_the_new_one() -> None:
    trust = trusted()
    new_api = KEYS.stranger
    assert trust.judge(registration(new_api, "api", None, T0 + 50)) is None
    assert trust.judge(revocation(KEYS.api, T0 + 60)) is None
    assert trust.judge(fact(submitted("old"), T0 + 59, KEYS.api)) is None
    assert trust.judge(fact(submitted("new"), T0 + 61, new_api)) is None
    late = trust.judge(fact(submitted("late"), T0 + 61, KEYS.api))
    assert late is not None
    assert late.kind == REVOKED


def test_unsigned_history_stays_readable_until_signing_is_required() -> None:
    book = KeyBook()
    owners = NodesAndRuns()
    unsigned = fact(submitted("wl-1"), T0)
    assert judge(unsigned, book, owners) is None  # no key at all: an old log
    since = datetime.fromtimestamp(T0 + 10, UTC)
    trust = Trust()
    for envelope in registrations(T0, required_from=since):
        assert trust.judge(envelope) is None
    assert trust.judge(unsigned) is None  # before required_from
    verdict = trust.judge(fact(submitted("wl-2"), T0 + 10))
    assert verdict is not None
    assert verdict.kind == UNSIGNED
    assert "api signs since" in verdict.reason


def test_an_admin_key_alone_does_not_oblige_the_api_to_sign() -> None:
    trust = Trust()
    assert trust.judge(registration(KEYS.admin, "admin", None, T0)) is None
    assert trust.judge(fact(submitted("wl-1"), T0 + 1)) is None


def test_an_agents_unsigned_facts_are_required_per_cluster() -> None:
    trust = Trust()
    assert trust.judge(registration(KEYS.admin, "admin", None, T0)) is None
    assert trust.judge(registration(KEYS.agent_a, "agent", "cluster-a", T0)) is None
    refused = trust.judge(fact(heartbeat("n-a", "cluster-a"), T0 + 1))
    assert refused is not None
    assert refused.kind == UNSIGNED
    assert trust.judge(fact(heartbeat("n-b", "cluster-b"), T0 + 1)) is None


def test_a_replayed_id_with_other_content_is_refused_and_the_same_content_is_not() -> None:
    trust = trusted()
    first = fact(submitted("wl-1"), T0, KEYS.api, event_id="0" * 8 + "-0000-0000-0000-" + "0" * 12)
    assert trust.judge(first) is None
    assert trust.judge(first) is None  # a redelivery
    other = fact(submitted("wl-1", gpus=8), T0, KEYS.api, event_id=first.id)
    verdict = trust.judge(other)
    assert verdict is not None
    assert verdict.kind == REPLAYED


def test_key_facts_are_the_admins_and_the_first_admin_anchors_the_log() -> None:
    trust = Trust()
    rogue = registration(KEYS.stranger, "api", None, T0, by=KEYS.stranger)
    refused = trust.judge(rogue)
    assert refused is not None
    assert refused.kind == UNKNOWN_KEY
    assert trust.judge(registration(KEYS.admin, "admin", None, T0)) is None
    second_anchor = registration(KEYS.stranger, "admin", None, T0 + 1, by=KEYS.stranger)
    assert trust.judge(second_anchor) is not None
    by_api = registration(KEYS.agent_a, "agent", "cluster-a", T0 + 1, by=KEYS.api)
    assert trust.judge(by_api) is not None  # the API is not registered, nor an admin
    assert trust.judge(registration(KEYS.api, "api", None, T0 + 2)) is None
    not_admin = trust.judge(registration(KEYS.agent_a, "agent", "cluster-a", T0 + 3, by=KEYS.api))
    assert not_admin is not None
    assert not_admin.kind == NOT_ITS_FACT
    again = registration(KEYS.api, "scheduler", None, T0 + 4)
    taken = trust.judge(again)
    assert taken is not None
    assert "registered already" in taken.reason


def test_learning_keys_apart_orders_them_by_event_time() -> None:
    shuffled = [revocation(KEYS.api, T0 + 5), *reversed(registrations(T0))]
    trust = Trust()
    assert trust.learn_keys(shuffled) == []
    api = trust.book.key(KEYS.api.key_id)
    assert api is not None
    assert api.revoked_at == T0 + 5


def test_the_event_time_is_compared_to_the_microsecond() -> None:
    trust = trusted()
    revoked = datetime.fromtimestamp(T0 + 100, UTC)
    assert trust.judge(revocation(KEYS.api, revoked)) is None
    just_before = revoked - timedelta(microseconds=1)
    assert trust.judge(fact(submitted("wl-1"), just_before, KEYS.api)) is None
