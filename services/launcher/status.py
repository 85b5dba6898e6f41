"""The periodic status lines of ``fairshare up``: the workloads, read through the API with the
CLI client so they show what a user would see, and the services as the supervisor sees them."""

from __future__ import annotations

from collections.abc import Iterable

from services.launcher.children import Child


def status_line(api_url: str) -> str:
    """Counts by status, from the API (what a user would see)."""
    from services.client.api import ApiError, FairshareClient

    with FairshareClient(api_url, "admin-token", timeout_s=5) as client:
        try:
            items = client.workloads().workloads
        except ApiError as error:
            return f"API not answering ({error})"
    counts: dict[str, int] = {}
    for item in items:
        counts[item.status] = counts.get(item.status, 0) + 1
    return ", ".join(f"{status} {n}" for status, n in sorted(counts.items())) or "no workloads yet"


def services_line(children: Iterable[Child], now: float) -> str:
    """Which services run, and for each one that was restarted how often and why it last
    died: ``6 of 6 up; scheduler restarted 2x (last: killed by SIGKILL: <log line>)``."""
    children = list(children)
    up = sum(1 for c in children if c.restart_at is None and c.process is not None)
    parts = [f"{up} of {len(children)} up"]
    for child in children:
        if child.restart_at is not None:
            parts.append(
                f"{child.name} down, restart in {max(0.0, child.restart_at - now):.0f} s "
                f"({child.last_exit})"
            )
        elif child.restarts:
            parts.append(f"{child.name} restarted {child.restarts}x (last: {child.last_exit})")
    return "; ".join(parts)
