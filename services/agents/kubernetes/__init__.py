"""The Kubernetes family: Fairshare decides, Kubernetes executes.

* :mod:`~services.agents.kubernetes.adapter`: each run one pod per node of its placement,
  created and deleted through the API server, what happens to them read from watches;
* :mod:`~services.agents.kubernetes.agent`: the loop over it, with what a shared cluster adds
  (cordons both ways, new nodes, pods around Fairshare, strays);
* :mod:`~services.agents.kubernetes.pods`: pure: a run as pods, and pods and nodes read back.
"""

from services.agents.kubernetes.adapter import KubernetesAdapter, KubernetesError
from services.agents.kubernetes.agent import KubernetesAgent

__all__ = ["KubernetesAdapter", "KubernetesAgent", "KubernetesError"]
