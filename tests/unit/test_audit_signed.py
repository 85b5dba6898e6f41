"""Both audits on a signed log: a simulated history signed as the services sign it audits
clean; one record stated by the wrong signer fails each audit, named, and changes nothing
else either audit finds."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from events.envelope import Envelope
from events.models import GpuHeartbeat, NodeAlive, NodeRegistered, PlaceCommand
from events.signing import Signer
from projections.trust import STATED_BY
from services.audit.decisions import audit_decisions
from services.audit.replay import replay
from tests.signing import KEYS, fixed_signer, registration
from tests.unit.test_audit_decisions import simulated_log

ROLE_KEYS = {"api": KEYS.api, "scheduler": KEYS.scheduler, "charging": KEYS.charging}


def signed(log: list[Envelope[Any]]) -> tuple[list[Envelope[Any]], dict[str, Signer]]:
    """The log as its services would have signed it, its keys registered first (an agent's
    key per cluster the log names)."""
    clusters = sorted(
        {e.data.cluster for e in log if isinstance(e.data, NodeRegistered | GpuHeartbeat)}
    )
    agents = {cluster: fixed_signer(40 + i) for i, cluster in enumerate(clusters)}
    first = log[0].time - timedelta(hours=1)
    keys = [registration(KEYS.admin, "admin", None, first)]
    keys += [registration(signer, role, None, first) for role, signer in ROLE_KEYS.items()]
    keys += [registration(s, "agent", c, first) for c, s in agents.items()]
    (only,) = clusters
    out = []
    for envelope in log:
        roles = STATED_BY[type(envelope.data)]
        # the API's facts an agent may state too (native work) are the API's here
        agent = (
            "agent" in roles
            and "api" not in roles
            and not ("scheduler" in roles and envelope.type.endswith(".lost.v1"))
        )
        signer = agents[only] if agent else ROLE_KEYS[sorted(roles - {"admin", "agent"})[0]]
        out.append(signer.sign(envelope))
    return keys + out, agents


def test_a_signed_log_audits_clean_and_a_wrongly_signed_record_fails_both_audits() -> None:
    log, _ = signed(simulated_log(0, 40, gpus=16))
    assert not [e for e in log if isinstance(e.data, NodeAlive)]  # the simulator's log
    clean = audit_decisions(log)
    assert clean.ok, clean.problems[:3]
    assert replay(log).identical

    index = next(i for i, e in enumerate(log) if isinstance(e.data, PlaceCommand))
    command = log[index]
    stated_by_api = KEYS.api.sign(command.model_copy(update={"signer": None, "signature": None}))
    tampered = [*log[:index], stated_by_api, *log[index + 1 :]]
    audit = audit_decisions(tampered)
    signers = [p for p in audit.problems if p.rule == "signer"]
    assert len(signers) == 1
    assert signers[0].line == index + 1
    assert "api may not state it (scheduler may)" in signers[0].message
    result = replay(tampered)
    assert result.not_believed == 1
    assert result.differences[0].startswith("not believed (not-its-fact)")
