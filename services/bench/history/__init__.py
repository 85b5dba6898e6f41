"""``fairshare bench history`` (``bench.py``) and ``fairshare bench kills`` (``kills.py``): a
fleet's history generated at the agents' real cadence (``gen.py``, ``facts.py``), the services
started or killed on it and timed until caught up (``measure.py``), and the summary
(``summary.py``)."""
