"""core/v1 Events, aggregated by name: the one Event writer of the webhook and the bridge.

The Event name is derived from the involved object's UID, the reason and the message, so the
same occurrence reported again (a reconcile retried, a later flush of the webhook's counts,
another replica, a restarted process) bumps ``count`` on one Event instead of creating another:
the aggregation client-go's recorder does in memory (kubernetes/client-go
``tools/record/events_cache.go``), done here by name so it survives a restart. Best effort: a
failed write is logged and dropped, never raised.
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
from typing import Any, Literal

from kontinue.kube import api, errors, interface, resources
from kontinue.models import base

Obj = dict[str, Any]
EventType = Literal["Normal", "Warning"]
MAX_MESSAGE = 1024


@dataclasses.dataclass(frozen=True)
class Involved:
    api_version: str
    kind: str
    name: str
    namespace: str
    uid: str

    @classmethod
    def of(cls, obj: Obj) -> Involved:
        meta = obj.get("metadata", {})
        return cls(
            api_version=obj.get("apiVersion", ""),
            kind=obj.get("kind", ""),
            name=meta.get("name", ""),
            namespace=meta.get("namespace", ""),
            uid=meta.get("uid", ""),
        )


@dataclasses.dataclass(frozen=True)
class Reporter:
    """Who writes the Event: ``source.component`` and ``reportingComponent``/``Instance``."""

    component: str
    controller: str
    instance: str


def event_name(involved: Involved, reason: str, message: str) -> str:
    digest = hashlib.sha256(f"{involved.uid}/{reason}/{message}".encode()).hexdigest()[:12]
    return f"{involved.name[:200]}.{digest}"


def build_event(
    involved: Involved,
    *,
    reason: str,
    message: str,
    type_: EventType,
    reporter: Reporter,
    count: int = 1,
) -> Obj:
    """Pure: the core/v1 Event for ``count`` occurrences."""
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
        "message": message[:MAX_MESSAGE],
        "type": type_,
        "source": {"component": reporter.component},
        "reportingComponent": reporter.controller,
        "reportingInstance": reporter.instance,
        "firstTimestamp": stamp,
        "lastTimestamp": stamp,
        "count": count,
    }


async def write(kube: interface.Client, event: Obj, *, logger: logging.Logger) -> None:
    """Create ``event``; if its name exists, add its ``count`` to the stored one."""
    meta = event["metadata"]
    try:
        await kube.create(resources.EVENTS, event)
    except errors.Conflict:
        try:
            current = await kube.get(resources.EVENTS, meta["name"], namespace=meta["namespace"])
            await kube.patch(
                resources.EVENTS,
                meta["name"],
                {
                    "count": int(current.get("count") or 1) + int(event["count"]),
                    "lastTimestamp": event["lastTimestamp"],
                },
                content_type=api.MERGE_PATCH,
                namespace=meta["namespace"],
            )
        except errors.ApiError as exc:
            logger.warning("could not update event %s: %s", meta["name"], exc)
    except errors.ApiError as exc:
        logger.warning("could not record %s on %s: %s", event["reason"], meta["name"], exc)
