"""The live state judges every fact before folding it (scheduler, API view, agents, decision
audit): a forgery changes nothing, not even which ids count as seen; a fact signed by a key
not read yet waits for it like any early fact."""

from __future__ import annotations

import pickle

from events.models import BudgetCreated, NodeRegistered
from projections.live_state import LiveState
from tests.factories import submitted
from tests.signing import KEYS, fact, registration, registrations

T0 = 1_800_000_000.0
SUBMISSION_ID = "11111111-2222-3333-4444-555555555555"


def signed_lab(state: LiveState) -> None:
    for envelope in registrations(T0 - 60):
        assert state.apply(envelope)
    assert state.apply(fact(BudgetCreated(budget="lab", created_by="admin"), T0, KEYS.api))


def test_a_forgery_is_not_folded_and_does_not_shadow_the_genuine_fact() -> None:
    state = LiveState()
    signed_lab(state)
    forged = fact(submitted("wl-1", budget="lab"), T0 + 1, KEYS.stranger, event_id=SUBMISSION_ID)
    assert not state.apply(forged)
    assert "wl-1" not in state.cluster.workloads
    assert state.waiting == [forged]  # its key might yet be registered
    genuine = fact(submitted("wl-1", budget="lab"), T0 + 1, KEYS.api, event_id=SUBMISSION_ID)
    assert state.apply(genuine)
    assert "wl-1" in state.cluster.workloads
    assert state.reject_held_before(state.hold_mark() + 1) == 1  # the forgery, held for its key
    assert state.waiting == []
    assert state.trust.refused == {"unknown-key": 1}


def test_an_unsigned_fact_is_refused_once_its_signer_signs() -> None:
    state = LiveState()
    signed_lab(state)
    assert not state.apply(fact(submitted("wl-1", budget="lab"), T0 + 1))
    assert state.trust.refused == {"unsigned": 1}
    assert state.rejected[-1].reason.startswith("not believed (unsigned)")


def test_a_fact_signed_by_a_key_not_read_yet_waits_for_its_registration() -> None:
    state = LiveState()
    assert state.apply(registration(KEYS.admin, "admin", None, T0 - 60))
    node = NodeRegistered(node="n1", cluster="cluster-a", pool="p", gpus=1, gpu_type="x")
    early = fact(node, T0, KEYS.agent_a)
    assert not state.apply(early)
    assert state.waiting == [early]
    assert state.apply(registration(KEYS.agent_a, "agent", "cluster-a", T0 - 1))
    assert "n1" in state.cluster.nodes
    assert state.waiting == []
    assert not state.apply(early)  # now a redelivery
    assert state.trust.refused == {}


def test_a_key_that_never_comes_gets_the_fact_refused_once_the_log_was_read() -> None:
    state = LiveState()
    assert state.apply(registration(KEYS.admin, "admin", None, T0 - 60))
    node = NodeRegistered(node="n1", cluster="cluster-a", pool="p", gpus=1, gpu_type="x")
    assert not state.apply(fact(node, T0, KEYS.stranger))
    mark = state.hold_mark() + 1
    assert state.reject_held_before(mark) == 1
    assert state.trust.refused == {"unknown-key": 1}
    assert "n1" not in state.cluster.nodes


def test_a_checkpoint_keeps_the_keys() -> None:
    state = LiveState()
    signed_lab(state)
    restored = pickle.loads(pickle.dumps(state))
    assert restored.trust.book == state.trust.book
    assert restored.apply(fact(submitted("wl-1", budget="lab"), T0 + 1, KEYS.api))
    assert not restored.apply(fact(submitted("wl-2", budget="lab"), T0 + 1, KEYS.agent_a))


def test_a_checkpoint_from_before_signed_facts_still_restores() -> None:
    state = LiveState()
    assert state.apply(fact(BudgetCreated(budget="lab", created_by="admin"), T0))
    old = state.__getstate__()
    del old["trust"], old["_unvouched"]
    restored = LiveState.__new__(LiveState)
    restored.__setstate__(old)
    assert restored.apply(fact(submitted("wl-1", budget="lab"), T0 + 1))
