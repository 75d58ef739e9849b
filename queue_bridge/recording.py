"""Kubernetes Events on the objects a user looks at (Workload, Job, Pod, Checkpoint).

``kubectl describe job scavenger-0`` should tell the story: ``CheckpointStarted``,
``CheckpointSucceeded`` or ``CheckpointFailed`` with the reason. Events are best effort: a
failure to record one is logged and never fails the reconcile that wanted it.

The Event name is derived from the object's UID, the reason and the message, so the same
occurrence reported twice (a reconcile retried, Kueue's two suspend updates) bumps ``count``
on one Event instead of spamming new ones — the aggregation client-go's recorder does
(tools/record/events_cache.go), done here by name so it survives a bridge restart.
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
from typing import Any, Literal

from kontinue.kube import api, errors, interface, resources
from kontinue.models import base

logger = logging.getLogger("kontinue.bridge.events")

COMPONENT = "kontinue-bridge"


@dataclasses.dataclass(frozen=True)
class Involved:
    api_version: str
    kind: str
    name: str
    namespace: str
    uid: str

    @classmethod
    def of(cls, obj: dict[str, Any]) -> Involved:
        meta = obj.get("metadata", {})
        return cls(
            api_version=obj.get("apiVersion", ""),
            kind=obj.get("kind", ""),
            name=meta.get("name", ""),
            namespace=meta.get("namespace", ""),
            uid=meta.get("uid", ""),
        )


def event_name(involved: Involved, reason: str, message: str) -> str:
    digest = hashlib.sha256(f"{involved.uid}/{reason}/{message}".encode()).hexdigest()[:12]
    return f"{involved.name[:200]}.{digest}"


def build_event(
    involved: Involved,
    *,
    reason: str,
    message: str,
    type_: Literal["Normal", "Warning"],
    instance: str,
) -> dict[str, Any]:
    """Pure: the core/v1 Event for one occurrence."""
    stamp = base.format_time(base.now())
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {
            "name": event_name(involved, reason, message),
            "namespace": involved.namespace or "default",
        },
        "involvedObject": {
            "apiVersion": involved.api_version,
            "kind": involved.kind,
            "name": involved.name,
            "namespace": involved.namespace,
            "uid": involved.uid,
        },
        "reason": reason,
        "message": message[:1024],
        "type": type_,
        "source": {"component": COMPONENT},
        "reportingComponent": "kontinue.dev/bridge",
        "reportingInstance": instance,
        "firstTimestamp": stamp,
        "lastTimestamp": stamp,
        "count": 1,
    }


class Recorder:
    def __init__(self, kube: interface.Client, *, instance: str) -> None:
        self.kube = kube
        self.instance = instance

    async def record(
        self,
        obj: dict[str, Any],
        *,
        reason: str,
        message: str,
        type_: Literal["Normal", "Warning"] = "Normal",
    ) -> None:
        event = build_event(
            Involved.of(obj), reason=reason, message=message, type_=type_, instance=self.instance
        )
        meta = event["metadata"]
        try:
            await self.kube.create(resources.EVENTS, event)
        except errors.Conflict:
            try:
                current = await self.kube.get(
                    resources.EVENTS, meta["name"], namespace=meta["namespace"]
                )
                await self.kube.patch(
                    resources.EVENTS,
                    meta["name"],
                    {
                        "count": int(current.get("count") or 1) + 1,
                        "lastTimestamp": event["lastTimestamp"],
                    },
                    content_type=api.MERGE_PATCH,
                    namespace=meta["namespace"],
                )
            except errors.ApiError as exc:
                logger.warning("could not update event %s: %s", meta["name"], exc)
        except errors.ApiError as exc:
            logger.warning("could not record %s on %s: %s", reason, meta["name"], exc)
