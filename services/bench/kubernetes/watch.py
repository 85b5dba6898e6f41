"""The benchmark's clock on the pods: one watch of the load's pods, started before the load,
each event timed by this machine's clock as it arrives.

Why a watch and arrival times rather than the pods' own timestamps: ``creationTimestamp`` and
the ``PodScheduled`` condition's ``lastTransitionTime`` are whole seconds, too coarse for a
thousand pods made in a few seconds; a watch sees every change, in the API server's order,
within milliseconds of it being stored. Creation and binding are both timed the same way (the
first event showing the pod; the first showing its ``spec.nodeName``), so the delay of the
watch itself is in both and cancels out of their rates. ``creationTimestamp`` is kept too, as
a cross-check of the creation rate with the API server's own clock.

The stream is read raw (one JSON object a line, parsed with orjson), not through the client's
models: turning thousands of events into model objects would cost this process more CPU than
the agent it measures has, on a machine of two cores.
"""

from __future__ import annotations

import contextlib
import threading
import time
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import orjson
from kubernetes.client import CoreV1Api
from kubernetes.client.exceptions import ApiException
from kubernetes.watch.watch import iter_resp_lines

from services.bench.kubernetes.objects import JOB_NAME_LABEL

#: Seconds a watch request lasts before it is resumed from the last version seen.
WATCH_S = 30


@dataclass
class PodTimes:
    """One pod of the load, as the watch saw it (epoch seconds, this machine's clock)."""

    job: str
    #: Arrival of the first event showing the pod.
    seen_at: float
    #: Its ``creationTimestamp`` (whole seconds, the API server's clock).
    created: float | None
    #: Arrival of the first event showing it bound (``spec.nodeName`` set), and the node.
    bound_at: float | None = None
    node: str | None = None


class PodWatch:
    """Watches the pods of ``selector`` in ``namespace`` in a thread of its own from
    :meth:`start` to :meth:`stop`; :attr:`pods` holds what it saw, by pod name."""

    def __init__(self, core: CoreV1Api, namespace: str, selector: str) -> None:
        self.core = core
        self.namespace = namespace
        self.selector = selector
        self.pods: dict[str, PodTimes] = {}
        self.lock = threading.Lock()
        #: Events read, watch requests made, and the last failure (resumed after it).
        self.events = 0
        self.requests = 0
        self.failure = ""
        self._stop = threading.Event()
        self._response: Any = None
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        """List (what exists now, and the version to watch from), then watch in a thread."""
        version = self._list()
        self._thread = threading.Thread(
            target=self._run, args=(version,), name="bench-pod-watch", daemon=True
        )
        self._thread.start()

    def counts(self) -> tuple[int, int]:
        """Pods seen, pods seen bound."""
        with self.lock:
            return len(self.pods), sum(1 for p in self.pods.values() if p.bound_at is not None)

    def snapshot(self) -> dict[str, PodTimes]:
        with self.lock:
            return dict(self.pods)

    def stop(self) -> None:
        self._stop.set()
        response = self._response
        if response is not None:
            with contextlib.suppress(Exception):  # already closed by the thread
                response.close()
        if self._thread is not None:
            self._thread.join(timeout=WATCH_S + 15)

    # -- the thread ------------------------------------------------------------------------
    def _list(self) -> str:
        response: Any = self.core.list_namespaced_pod(
            self.namespace,
            label_selector=self.selector,
            _preload_content=False,
            _request_timeout=(5, 30),
        )
        now = time.time()
        body = orjson.loads(response.data)
        for item in body.get("items") or []:
            self._note(item, now)
        return str(body["metadata"]["resourceVersion"])

    def _run(self, version: str) -> None:
        while not self._stop.is_set():
            try:
                version = self._follow(version)
            except ApiException as error:
                self.failure = f"{error.status} {error.reason}"
                if error.status == 410:
                    version = self._relist()
                    continue
            except Exception as error:  # a connection reset, or closed by stop()
                if self._stop.is_set():
                    return
                self.failure = f"{type(error).__name__}: {error}"
            if self._stop.wait(0.2):
                return

    def _relist(self) -> str:
        """The version is gone (410): list again. Pods seen first here are timed at the list,
        later than they were made: said as the failure, which the result carries."""
        while not self._stop.is_set():
            try:
                return self._list()
            except Exception as error:
                self.failure = f"relist: {error}"
                self._stop.wait(1.0)
        return ""

    def _follow(self, version: str) -> str:
        self.requests += 1
        response: Any = self.core.list_namespaced_pod(
            self.namespace,
            label_selector=self.selector,
            watch=True,
            resource_version=version,
            allow_watch_bookmarks=True,
            timeout_seconds=WATCH_S,
            _preload_content=False,
            _request_timeout=(5, WATCH_S + 10),
        )
        self._response = response
        try:
            for line in iter_resp_lines(response):  # type: ignore[no-untyped-call]
                now = time.time()
                if not line:
                    continue
                event = orjson.loads(line)
                kind, item = event.get("type"), event.get("object") or {}
                if kind == "ERROR":
                    raise ApiException(status=item.get("code") or 500, reason=item.get("message"))
                version = item.get("metadata", {}).get("resourceVersion") or version
                if kind in ("ADDED", "MODIFIED"):
                    self._note(item, now)
                self.events += 1
                if self._stop.is_set():
                    break
        finally:
            self._response = None
            response.release_conn()
        return version

    def _note(self, item: dict[str, Any], now: float) -> None:
        meta = item.get("metadata") or {}
        name = meta.get("name")
        if not name:
            return
        node = (item.get("spec") or {}).get("nodeName")
        with self.lock:
            seen = self.pods.get(name)
            if seen is None:
                seen = PodTimes(
                    job=(meta.get("labels") or {}).get(JOB_NAME_LABEL, ""),
                    seen_at=now,
                    created=_epoch(meta.get("creationTimestamp")),
                )
                self.pods[name] = seen
            if node and seen.bound_at is None:
                seen.bound_at, seen.node = now, node


def _epoch(stamp: str | None) -> float | None:
    """``2025-01-02T03:04:05Z`` as epoch seconds."""
    if not stamp:
        return None
    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()
