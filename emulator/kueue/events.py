"""Events as Kueue's recorder writes them (core/v1 Event, one per call; no aggregation).

Kueue uses client-go's ``events.EventRecorder``; the emulator writes the equivalent ``v1.Event``
(involvedObject, reason, message, type, reportingComponent) so ``kubectl get events`` style
readers and our tests see the same reasons and messages in the same order.
"""

from __future__ import annotations

import datetime
import itertools
from typing import Any

from emulator.apiserver import server
from kontinue.kube import resources

Object = dict[str, Any]
_counter = itertools.count()


async def record(
    client: server.Client,
    obj: Object,
    *,
    reason: str,
    message: str,
    component: str,
    type_: str = "Normal",
) -> Object:
    meta = obj["metadata"]
    stamp = datetime.datetime.now(datetime.UTC)
    event: Object = {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {
            "name": f"{meta['name']}.{int(stamp.timestamp() * 1e9):x}{next(_counter):x}",
            "namespace": meta.get("namespace") or "default",
        },
        "involvedObject": {
            "apiVersion": obj.get("apiVersion"),
            "kind": obj.get("kind"),
            "name": meta["name"],
            "namespace": meta.get("namespace", ""),
            "uid": meta.get("uid"),
            "resourceVersion": meta.get("resourceVersion"),
        },
        "reason": reason,
        "message": message[:1024],  # api.TruncateEventMessage
        "type": type_,
        "source": {"component": component},
        "reportingComponent": component,
        "reportingInstance": component,
        "firstTimestamp": stamp.strftime("%Y-%m-%dT%H:%M:%SZ"),
        "lastTimestamp": stamp.strftime("%Y-%m-%dT%H:%M:%SZ"),
        "eventTime": stamp.strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
        "count": 1,
        "action": reason,
    }
    created: Object = await client.create(resources.EVENTS, event)
    return created
