"""The simulated family: nodes with GPUs that "run" each workload for its spec's duration
(:mod:`~services.agents.simulated.adapter`). Driven by the generic loop."""

from services.agents.simulated.adapter import SimulatedAdapter, simulated_nodes

__all__ = ["SimulatedAdapter", "simulated_nodes"]
