"""Whether a workload's spec can run where it may be placed: checked by the API at submit, so
a spec a pool's cluster cannot run is refused with the reason (422) instead of failing when
placed. The rules are the executors' own (the functions their agents build runs with)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from services.agents.kubernetes_pods import spec_problems as pod_spec_problems


def spec_problems(executor: str, spec: Mapping[str, Any]) -> list[str]:
    """Why ``spec`` cannot run on nodes of ``executor`` (empty: it can, or the executor
    checks nothing ahead)."""
    if executor == "kubernetes":
        return pod_spec_problems(spec)
    return []
