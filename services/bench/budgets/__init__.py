"""``fairshare bench budgets``: ``GET /budgets``' read at two history sizes (``read.py``), or on
a fleet's histories of several lengths with ``--fleet`` (``fleet.py``)."""
