"""Cluster agents: one per cluster, consuming that cluster's commands (see docs/agents.md).

The shared parts are here: the adapter interface (:mod:`~services.agents.adapter`), the
reconcile loop that drives any adapter (:mod:`~services.agents.agent`, :class:`ClusterAgent`),
what a loop over a cluster shared with work around Fairshare adds
(:mod:`~services.agents.shared_cluster`), the agent host over the bus port
(:mod:`~services.agents.host`) and its process on Kafka (:mod:`~services.agents.serve`). Each
family of clusters is a folder of its own, its adapter in ``adapter.py``:

* ``simulated/``: workloads "run" for their spec's duration;
* ``local/``: commands really run on this machine, GPU readings from NVML;
* ``slurm/``: each run a batch job (and a loop of its own: ``agent.py``);
* ``kubernetes/``: each run a pod per node (and a loop of its own: ``agent.py``).
"""

from services.agents.adapter import ClusterAdapter, GpuSample, NodeSpec, RunEnded, RunRequest
from services.agents.agent import (
    AGENT_TOPICS,
    CATCH_UP_TOPICS,
    AgentSettings,
    ClusterAgent,
    Run,
    fact_id,
)
from services.agents.host import AgentLoop, host_agent, run_agent
from services.agents.local import LocalAdapter, open_nvml
from services.agents.serve import read_history, run_on_kafka, serve_agent
from services.agents.simulated import SimulatedAdapter, simulated_nodes

__all__ = [
    "AGENT_TOPICS",
    "CATCH_UP_TOPICS",
    "AgentLoop",
    "AgentSettings",
    "ClusterAdapter",
    "ClusterAgent",
    "GpuSample",
    "LocalAdapter",
    "NodeSpec",
    "Run",
    "RunEnded",
    "RunRequest",
    "SimulatedAdapter",
    "fact_id",
    "host_agent",
    "open_nvml",
    "read_history",
    "run_agent",
    "run_on_kafka",
    "serve_agent",
    "simulated_nodes",
]
