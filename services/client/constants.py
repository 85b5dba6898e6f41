"""What the client's commands need before they talk to the API, importing nothing but
``typing``: the default address of the API, and the statuses ``list --status`` offers.

Typer reads a command's option types and defaults when ``fairshare`` starts, so these cannot
come from :mod:`services.api.models` (pydantic and the events, a fifth of a second) without
every command paying for them. :data:`WorkloadStatus` repeats the API's own; a unit test
(``tests/unit/test_cli_import_budget.py``) keeps the two equal.
"""

from __future__ import annotations

from typing import Literal

#: Where the API listens unless ``--api`` or ``FAIRSHARE_API`` says otherwise.
DEFAULT_API = "http://127.0.0.1:8000"

#: Every status a workload can have (:data:`services.api.models.WorkloadStatus`).
WorkloadStatus = Literal[
    "pending", "placed", "running", "succeeded", "failed", "cancelled", "preempted", "lost"
]
