"""Prometheus metrics of every service (docs/operations.md, "Metrics").

What is shared lives here: the conventions and the metrics of every service (:mod:`.common`),
how far each reader is behind the log (:mod:`.lag`), and ``/metrics`` for the services without
an HTTP server of their own (:mod:`.endpoint`; the API serves it on its own app). Each service
defines its own metrics beside its code. The exposition itself is prometheus_client's: its text
format, escaping and histogram maths are kept upstream, not written here.

This package imports nothing of ours, so that any service or adapter can use it without a cycle
between packages; the pure core (events, projections, the scheduling core) never imports
prometheus_client at all (the import-linter contracts in pyproject.toml).
"""
