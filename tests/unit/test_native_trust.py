"""Native work and the trust rule (projections/trust.py): a cluster's agent states the
submission of its own cluster's native work, and its cancellation, and nothing else of a
workload; the API states submissions, native or not, as before."""

from __future__ import annotations

from typing import Any

import pytest

from events.envelope import Envelope
from events.models import WorkloadCancelled, WorkloadSubmitted
from events.native_work import NATIVE_KEY
from events.signing import Signer
from projections.live_state import LiveState
from projections.trust import NOT_ITS_FACT, Trust
from tests.factories import submitted
from tests.signing import KEYS, fact, registrations

T0 = 1_800_000_000.0


def native(workload_id: str, cluster: str) -> WorkloadSubmitted:
    origin = {
        "cluster": cluster,
        "kind": "Job",
        "namespace": "team",
        "name": "train",
        "uid": f"uid-{workload_id}",
        "gpus_per_pod": 1,
    }
    return submitted(
        workload_id,
        submitter=f"k8s:{cluster}/team",
        spec={"name": "team/train", NATIVE_KEY: origin},
    )


def cancelled(workload_id: str) -> WorkloadCancelled:
    return WorkloadCancelled(workload_id=workload_id, cancelled_by="k8s:cluster-a/team")


def trusted() -> Trust:
    """A trust that has read every key of tests.signing (agents of cluster-a and cluster-b),
    registered at T0 - 60."""
    trust = Trust(keep_refusals=None)
    for envelope in registrations(T0 - 60):
        assert trust.judge(envelope) is None
    return trust


def live_state() -> LiveState:
    """A live state that has read every key, and three workloads: cluster-a's native work,
    cluster-b's, and one submitted through the API."""
    state = LiveState()
    for envelope in registrations(T0 - 60):
        assert state.apply(envelope)
    for envelope in (
        fact(native("native-a", "cluster-a"), T0, KEYS.agent_a),
        fact(native("native-b", "cluster-b"), T0, KEYS.agent_b),
        fact(submitted("by-api"), T0, KEYS.api),
    ):
        assert state.apply(envelope), state.rejected
    assert state.native_cluster_of("native-a") == "cluster-a"
    assert state.native_cluster_of("native-b") == "cluster-b"
    assert state.native_cluster_of("by-api") == ""
    assert state.native_cluster_of("unknown") is None
    return state


# -- submissions -------------------------------------------------------------------------


def test_an_agent_states_its_own_clusters_native_work() -> None:
    assert trusted().judge(fact(native("wl-1", "cluster-a"), T0, KEYS.agent_a)) is None
    assert trusted().judge(fact(native("wl-1", "cluster-b"), T0, KEYS.agent_b)) is None


def test_an_agent_may_not_state_another_clusters_native_work() -> None:
    verdict = trusted().judge(fact(native("wl-1", "cluster-a"), T0, KEYS.agent_b))
    assert verdict is not None
    assert verdict.kind == NOT_ITS_FACT
    assert "cluster-a" in verdict.reason


@pytest.mark.parametrize(
    "spec",
    [
        {},
        {"name": "x"},
        {NATIVE_KEY: "cluster-a"},
        {NATIVE_KEY: {"kind": "Job"}},
        {NATIVE_KEY: {"cluster": ""}},
        {NATIVE_KEY: {"cluster": ["cluster-a"]}},
    ],
    ids=["empty", "named", "not-a-mapping", "no-cluster", "empty-cluster", "not-a-string"],
)
def test_an_agent_may_not_state_a_submission_that_is_not_native_work(
    spec: dict[str, Any],
) -> None:
    verdict = trusted().judge(fact(submitted("wl-1", spec=spec), T0, KEYS.agent_a))
    assert verdict is not None
    assert verdict.kind == NOT_ITS_FACT


def test_the_api_states_work_submitted_through_it() -> None:
    assert trusted().judge(fact(submitted("wl-1"), T0, KEYS.api)) is None


@pytest.mark.parametrize("signer", [KEYS.api, KEYS.admin, KEYS.scheduler, KEYS.charging])
def test_other_services_state_no_native_submission(signer: Signer) -> None:
    verdict = trusted().judge(fact(native("wl-1", "cluster-a"), T0, signer))
    assert verdict is not None
    assert verdict.kind == NOT_ITS_FACT


def test_the_live_state_folds_only_the_native_work_an_agent_may_state() -> None:
    state = live_state()
    assert not state.apply(fact(native("forged", "cluster-a"), T0 + 1, KEYS.agent_b))
    assert not state.apply(fact(submitted("plain"), T0 + 1, KEYS.agent_a))
    assert "forged" not in state.cluster.workloads
    assert "plain" not in state.cluster.workloads
    assert state.trust.refused == {NOT_ITS_FACT: 2}


# -- cancellations ---------------------------------------------------------------------------


def judged(state: LiveState, envelope: Envelope[Any]) -> str | None:
    """The kind of the refusal of ``envelope`` by ``state``'s trust (None: believed)."""
    verdict = state.trust.judge(envelope, state)
    return None if verdict is None else verdict.kind


@pytest.mark.parametrize(
    ("workload_id", "signer", "refused"),
    [
        ("native-a", KEYS.agent_a, None),
        ("native-b", KEYS.agent_a, NOT_ITS_FACT),
        ("by-api", KEYS.agent_a, NOT_ITS_FACT),
        ("unknown", KEYS.agent_a, None),
        ("native-b", KEYS.agent_b, None),
        ("native-a", KEYS.agent_b, NOT_ITS_FACT),
        ("native-a", KEYS.api, None),
        ("by-api", KEYS.api, None),
    ],
)
def test_an_agent_cancels_only_its_own_clusters_native_work(
    workload_id: str, signer: Signer, refused: str | None
) -> None:
    """Unknown workloads are taken on the record's word."""
    state = live_state()
    assert judged(state, fact(cancelled(workload_id), T0 + 1, signer)) == refused


def test_a_refused_cancellation_says_whose_work_it_is() -> None:
    state = live_state()
    verdict = state.trust.judge(fact(cancelled("native-b"), T0 + 1, KEYS.agent_a), state)
    assert verdict is not None
    assert "cluster-b" in verdict.reason
    through_api = state.trust.judge(fact(cancelled("by-api"), T0 + 1, KEYS.agent_a), state)
    assert through_api is not None
    assert "API" in through_api.reason


def test_the_live_state_cancels_what_an_agent_may_cancel_and_nothing_else() -> None:
    state = live_state()
    assert not state.apply(fact(cancelled("native-b"), T0 + 1, KEYS.agent_a))
    assert not state.apply(fact(cancelled("by-api"), T0 + 1, KEYS.agent_a))
    assert state.trust.refused == {NOT_ITS_FACT: 2}
    assert state.apply(fact(cancelled("native-a"), T0 + 1, KEYS.agent_a))
    assert state.cluster.workloads["native-a"].status == "cancelled"
    assert state.cluster.workloads["native-b"].status != "cancelled"
    assert state.cluster.workloads["by-api"].status != "cancelled"


def test_a_reader_that_does_not_follow_submissions_takes_a_cancellation_on_its_word() -> None:
    """Trust's own owners (charging, the projector) know no workload's origin."""
    trust = trusted()
    assert trust.judge(fact(native("native-b", "cluster-b"), T0, KEYS.agent_b)) is None
    assert trust.judge(fact(cancelled("native-b"), T0 + 1, KEYS.agent_a)) is None
