"""``fairshare bench audit`` (``bench.py``: audit replay throughput) and ``fairshare bench
audit-decisions`` (``decisions.py``: the decision audit against the simulation it audits)."""
