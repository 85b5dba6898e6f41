"""Where Kubernetes users look: Events on their Jobs and pods, and annotations on them.

An Event's name is derived from what it says (the object, the decision and the attempt), so a
restarted agent that says it again is refused by the API server (409) instead of saying it
twice. Annotations are merge patches of the object's metadata only.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, cast

from kubernetes.client import BatchV1Api, CoreV1Api
from kubernetes.client.exceptions import ApiException

from services.agents.kubernetes.api_errors import why

log = logging.getLogger(__name__)

#: The component Events name as their source (``kubectl describe``'s "From" column).
COMPONENT = "fairshare"


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

    def event(
        self, ref: ObjectRef, reason: str, message: str, *, key: str, warning: bool = False
    ) -> bool:
        """Say ``message`` on ``ref`` once per ``key``; whether it is (now or already) said."""
        digest = hashlib.sha256(f"{ref.uid}\0{reason}\0{key}".encode()).hexdigest()[:16]
        now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        body = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": f"{ref.name[:200]}.fs{digest}", "namespace": ref.namespace},
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
        """Set (None: remove) annotations of ``ref``; whether it was done."""
        body = {"metadata": {"annotations": dict(annotations)}}
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
