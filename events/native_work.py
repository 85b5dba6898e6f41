"""Work a cluster's own users sent there, not through Fairshare's API: a Kubernetes Job applied
with ``schedulerName: fairshare``, say. Its cluster's agent states its submission and, when
its user deletes it, its cancellation: the only facts of a workload an agent states for its
users, and only for work of its own cluster (``projections.trust``).

Such a submission carries, in its spec, where it came from (:data:`NATIVE_KEY`): the cluster,
the kind of object and its namespace, name and uid. The cluster there is what the trust rule
checks against the signing agent's; the rest is what the agent acts on (which pods to bind,
which Job to suspend) and what a reader shows.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

#: The spec key of a native workload's origin.
NATIVE_KEY = "native"


def native_origin(spec: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The origin a native workload's spec states (None: it was submitted through the API)."""
    origin = spec.get(NATIVE_KEY)
    return origin if isinstance(origin, Mapping) else None


def native_cluster(spec: Mapping[str, Any]) -> str | None:
    """The cluster whose users sent the workload (None: not native work)."""
    origin = native_origin(spec)
    cluster = origin.get("cluster") if origin is not None else None
    return cluster if isinstance(cluster, str) and cluster else None
