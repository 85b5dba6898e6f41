"""``/metrics`` for a service without an HTTP server of its own (scheduler, charging, projector,
agents): prometheus_client's server on a thread of its own, on ``--metrics-port``. The options
live in ``services.runtime.cli_options``, so a command module declares them without loading
prometheus_client.

Off unless asked for (port 0): a service run by hand binds nothing it was not told to. ``fairshare
up`` gives each of its children a free port and writes them down for Prometheus
(``<data-dir>/prometheus/targets.json``). A port that cannot be bound is logged loudly and the
service runs on without metrics: scheduling matters more than being watched, and Prometheus
shows the target down (``up == 0``), which is what an operator alerts on.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping

from prometheus_client import start_http_server

from services.metrics import lag as _lag  # noqa: F401 (registers the lag of every reader)
from services.metrics.common import SERVICE_RESTARTS

log = logging.getLogger(__name__)

#: Set by ``fairshare up`` in each child's environment: how often it restarted that child.
RESTARTS_ENV = "FAIRSHARE_SERVICE_RESTARTS"


#: The count this process was started with, once read.
_restarts: int | None = None


def restarts_from(environ: Mapping[str, str]) -> int:
    """The restart count the supervisor passed down (none, or not a count: 0)."""
    text = environ.get(RESTARTS_ENV, "0")
    try:
        return max(0, int(text))
    except ValueError:
        log.warning("ignoring %s=%r: not a count", RESTARTS_ENV, text)
        return 0


def count_restarts() -> int:
    """Start the restarts counter at the count the supervisor passed down, once per process.
    A counter that a new process starts higher than its predecessor ended is still monotonic
    to Prometheus, so ``increase()`` over it counts restarts."""
    global _restarts
    if _restarts is None:
        _restarts = restarts_from(os.environ)
        SERVICE_RESTARTS.inc(_restarts)
    return _restarts


def serve_metrics(port: int, host: str = "127.0.0.1") -> bool:
    """Serve ``/metrics`` on ``host:port`` from a daemon thread (port 0: nothing); whether it
    serves."""
    count_restarts()
    if not port:
        return False
    try:
        start_http_server(port, addr=host)
    except OSError as error:
        log.error(
            "metrics port unavailable; running without metrics",
            extra={"host": host, "port": port, "error": str(error)},
        )
        return False
    log.info("serving metrics", extra={"url": f"http://{host}:{port}/metrics"})
    return True
