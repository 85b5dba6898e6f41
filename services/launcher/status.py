"""The periodic status line of ``fairshare up``, read through the API with the CLI client, so
it shows what a user would see."""

from __future__ import annotations


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
