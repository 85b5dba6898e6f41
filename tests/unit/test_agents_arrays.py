"""What the agents give a job array's element: its index and its array in the environment
(``FAIRSHARE_ARRAY_*``, like Slurm's ``SLURM_ARRAY_*``) on every kind of cluster, and its
budget on its start (so a charging shard needs no other partition)."""

from __future__ import annotations

from typing import Any

import pytest

from events.models import WorkloadArraySubmitted, WorkloadStarted
from services.agents.adapter import ArrayTask, RunRequest, run_environment
from services.agents.kubernetes.pods import PodOptions, pod_manifests
from services.agents.local.adapter import _launch
from services.agents.slurm.submit import RESERVED_ENV, SpecError, batch_script, environment
from tests.unit.test_agents import NODE0, POOL, Harness, place

TASK = ArrayTask(array_id="sweep", index=7, count=50, first=0, last=98)
RUN = RunRequest(
    workload_id="sweep_7",
    attempt=2,
    placement=((NODE0, (0,)),),
    spec={"command": ["python", "run.py"], "env": {"SEED": "1"}},
    array=TASK,
)
ARRAY_ENV = {
    "FAIRSHARE_WORKLOAD_ID": "sweep_7",
    "FAIRSHARE_ATTEMPT": "2",
    "FAIRSHARE_ARRAY_ID": "sweep",
    "FAIRSHARE_ARRAY_INDEX": "7",
    "FAIRSHARE_ARRAY_COUNT": "50",
    "FAIRSHARE_ARRAY_MIN": "0",
    "FAIRSHARE_ARRAY_MAX": "98",
}


def test_every_adapter_gives_the_same_variables() -> None:
    assert run_environment(RUN) == ARRAY_ENV
    plain = RunRequest(workload_id="w", attempt=1, placement=((NODE0, (0,)),))
    assert run_environment(plain) == {"FAIRSHARE_WORKLOAD_ID": "w", "FAIRSHARE_ATTEMPT": "1"}


def test_a_local_run_gets_them() -> None:
    _argv, env, _options = _launch(RUN, ["python", "run.py"], None, NODE0)
    assert {k: env[k] for k in ARRAY_ENV} == ARRAY_ENV
    assert (env["SEED"], env["CUDA_VISIBLE_DEVICES"]) == ("1", "0")


def test_a_slurm_job_exports_them_and_a_spec_may_not_set_them() -> None:
    script = batch_script(RUN)
    for name, value in ARRAY_ENV.items():
        assert f"export {name}={value}\n" in script
    assert set(ARRAY_ENV) <= set(RESERVED_ENV)
    with pytest.raises(SpecError, match="set by the agent"):
        environment({"FAIRSHARE_ARRAY_INDEX": "3"})


def test_a_kubernetes_pod_gets_them() -> None:
    [pod] = pod_manifests(RUN, PodOptions(cluster="c1"))
    env: list[dict[str, Any]] = pod["spec"]["containers"][0]["env"]
    given = {item["name"]: item["value"] for item in env}
    assert {k: given[k] for k in ARRAY_ENV} == ARRAY_ENV


def test_the_agent_reads_the_element_from_its_array() -> None:
    h = Harness()
    h.publish(
        WorkloadArraySubmitted(
            array_id="sweep",
            indices="0-98:2",
            budget="lab/a",
            pools=(POOL,),
            gpus=1,
            min_runtime_s=0,
            submitter="bo",
            spec={"duration_s": 100},
        )
    )
    place(h, "sweep_14")
    h.tick()
    request = h.adapter._runs["sweep_14"].request  # type: ignore[attr-defined]
    assert request.array == ArrayTask("sweep", 14, 50, 0, 98)
    [started] = h.facts(WorkloadStarted)
    assert (started.workload_id, started.budget) == ("sweep_14", "lab/a")
