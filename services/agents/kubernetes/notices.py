"""Where Kubernetes users look: Events on their Jobs and pods, and annotations on them.

An Event's name is derived from what it says (the object, the decision and the attempt), so a
restarted agent that says it again is refused by the API server (409) instead of saying it
twice. Annotations are merge patches of the object's metadata only.

They are sent by a thread of their own, in order, so that telling users never holds up the
agent's round (a burst of placements is bound first, told as fast as the API server takes it).
They are best effort: one the API server refuses is logged, not retried (the next decision, or
the next refresh of the why-pending, says it again).
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import queue
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, cast

from kubernetes.client import BatchV1Api, CoreV1Api
from kubernetes.client.exceptions import ApiException

from services.agents.kubernetes.api_errors import why

log = logging.getLogger(__name__)

#: The component Events name as their source (``kubectl describe``'s "From" column).
COMPONENT = "fairshare"
#: Notices waiting to be sent at most (more are dropped, and logged).
_QUEUED = 10_000
#: Event names remembered as said (a restart forgets them; the API server's 409 remembers).
_REMEMBERED = 20_000


def _event_name(ref: ObjectRef, reason: str, key: str) -> str:
    digest = hashlib.sha256(f"{ref.uid}\0{reason}\0{key}".encode()).hexdigest()[:16]
    return f"{ref.name[:200]}.fs{digest}"


@dataclass(frozen=True)
class ObjectRef:
    """The object an Event is about: a Job (``batch/v1``) or a pod."""

    kind: str
    namespace: str
    name: str
    uid: str

    @property
    def api_version(self) -> str:
        return "batch/v1" if self.kind == "Job" else "v1"


class Notices:
    def __init__(self, core: CoreV1Api, batch: BatchV1Api, instance: str) -> None:
        self.core = core
        self.batch = batch
        self.instance = instance
        #: Events created by this incarnation.
        self.posted = 0
        self._queue: queue.Queue[Callable[[], object] | None] = queue.Queue(maxsize=_QUEUED)
        self._said: dict[str, None] = {}
        self._sender = threading.Thread(target=self._send, name="k8s-notices", daemon=True)
        self._sender.start()

    def _send(self) -> None:
        while (task := self._queue.get()) is not None:
            try:
                task()
            except Exception as error:
                log.warning("could not tell Kubernetes users", extra={"why": str(error)})

    def _later(self, task: Callable[[], object]) -> bool:
        try:
            self._queue.put_nowait(task)
        except queue.Full:
            log.warning("too many notices queued; one dropped")
            return False
        return True

    def close(self) -> None:
        with contextlib.suppress(queue.Full):
            self._queue.put_nowait(None)

    def event(
        self, ref: ObjectRef, reason: str, message: str, *, key: str, warning: bool = False
    ) -> bool:
        """Say ``message`` on ``ref`` once per ``key`` (sent by the notices' thread)."""
        name = _event_name(ref, reason, key)
        if name in self._said:
            return True
        self._said[name] = None
        if len(self._said) > _REMEMBERED:
            for old in list(self._said)[: _REMEMBERED // 2]:
                del self._said[old]
        return self._later(lambda: self._post(ref, name, reason, message, warning))

    def _post(self, ref: ObjectRef, name: str, reason: str, message: str, warning: bool) -> bool:
        now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        body = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": name, "namespace": ref.namespace},
            "involvedObject": {
                "apiVersion": ref.api_version,
                "kind": ref.kind,
                "name": ref.name,
                "namespace": ref.namespace,
                "uid": ref.uid,
            },
            "reason": reason,
            "message": message[:1000],
            "type": "Warning" if warning else "Normal",
            "source": {"component": COMPONENT},
            "reportingComponent": COMPONENT,
            "reportingInstance": self.instance[:128],
            "firstTimestamp": now,
            "lastTimestamp": now,
            "count": 1,
        }
        try:
            # the client takes a plain manifest as it takes its models (it serialises both)
            self.core.create_namespaced_event(
                ref.namespace, cast("Any", body), _request_timeout=(5, 15)
            )
        except ApiException as error:
            if error.status == 409:
                return True
            log.warning("could not post an Event", extra={"object": ref.name, "why": why(error)})
            return False
        except Exception as error:
            log.warning("could not post an Event", extra={"object": ref.name, "why": str(error)})
            return False
        self.posted += 1
        return True

    def annotate(self, ref: ObjectRef, annotations: Mapping[str, str | None]) -> bool:
        """Set (None: remove) annotations of ``ref`` (sent by the notices' thread)."""
        values = dict(annotations)
        return self._later(lambda: self._patch(ref, values))

    def _patch(self, ref: ObjectRef, annotations: dict[str, str | None]) -> bool:
        body = {"metadata": {"annotations": annotations}}
        try:
            if ref.kind == "Job":
                self.batch.patch_namespaced_job(
                    ref.name, ref.namespace, body, _request_timeout=(5, 15)
                )
            else:
                self.core.patch_namespaced_pod(
                    ref.name, ref.namespace, body, _request_timeout=(5, 15)
                )
        except ApiException as error:
            if error.status != 404:
                log.warning("could not annotate", extra={"object": ref.name, "why": why(error)})
            return False
        except Exception as error:
            log.warning("could not annotate", extra={"object": ref.name, "why": str(error)})
            return False
        return True
