"""``fairshare bench latency`` (``bench.py``): submit to placed and started on Apache Kafka, with
its load and its broker round-trip baseline (``load.py``)."""
