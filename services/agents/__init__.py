"""Cluster agents: one per cluster, consuming that cluster's commands (see docs/agents.md).

:class:`ClusterAgent` is the generic reconcile loop; it drives any :class:`ClusterAdapter`.
Two adapters ship: :class:`SimulatedAdapter` (workloads "run" for their spec's duration) and
:class:`LocalAdapter` (commands really run on this machine, GPU readings from NVML).
"""

from services.agents.adapter import ClusterAdapter, GpuSample, NodeSpec, RunEnded, RunRequest
from services.agents.agent import AGENT_TOPICS, CATCH_UP_TOPICS, ClusterAgent, Run, fact_id
from services.agents.host import read_history, run_on_kafka, serve
from services.agents.local import LocalAdapter, open_nvml
from services.agents.simulated import SimulatedAdapter, simulated_nodes

__all__ = [
    "AGENT_TOPICS",
    "CATCH_UP_TOPICS",
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
    "open_nvml",
    "read_history",
    "run_on_kafka",
    "serve",
    "simulated_nodes",
]
