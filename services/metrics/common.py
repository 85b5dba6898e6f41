"""The metrics every service reports, and the conventions every metric of Fairshare follows.

Each service defines its own metrics beside its code (``services/<service>/metrics.py``), so a
process exports only what it does: a charging process shows no scheduler histogram stuck at
zero. The registry refuses a name defined twice, and tests/unit/test_metrics.py keeps the table
of docs/operations.md equal to what the services export.

Conventions (what ``promtool check metrics`` checks, and what an operator's queries expect):
base units in the name (``_seconds``, ``_records``), ``_total`` on counters only, and labels
whose values come from a bounded set: pools and budgets (the organisation's, not the
workloads'), decision reasons, topic names, route templates and status codes. Never a workload
id, a user or a raw path: each value of a label is a series Prometheus keeps.
"""

from __future__ import annotations

from prometheus_client import Counter, disable_created_metrics

# The ``_created`` series of every counter and histogram would double what is scraped and
# stored for a start time nobody queries (process_start_time_seconds says it per process).
disable_created_metrics()  # type: ignore[no-untyped-call]

SERVICE_RESTARTS = Counter(
    "fairshare_service_restarts",
    "Times this service's supervisor (fairshare up) started it again after it died; the "
    "process reports the count it was started with",
)
DEAD_LETTERS = Counter(
    "fairshare_dead_letters",
    "Records this process dead-lettered (not valid events where they were read)",
    ["consumer", "topic"],
)
