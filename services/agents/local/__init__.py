"""The local family: this machine as a one-node cluster, each workload's command really run
(:mod:`~services.agents.local.adapter`), its GPUs read through NVML
(:mod:`~services.agents.local.nvml`). Driven by the generic loop."""

from services.agents.local.adapter import LocalAdapter
from services.agents.local.nvml import open_nvml

__all__ = ["LocalAdapter", "open_nvml"]
