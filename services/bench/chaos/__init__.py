"""``fairshare bench chaos`` (``bench.py``): the stack under ``kill -9`` (``faults.py``) while
submissions go through the API (``load.py``), then the log checked (``checks.py``)."""
