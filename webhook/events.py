"""Events the webhook tells a user about its pods: ``NotPlumbed`` (an opted-in pod left
untouched, with why) and ``ColdStart`` (a pod that starts without a checkpoint, with the restore
plan's reason), on the pod's owner (``kubectl describe job`` shows them).

Admission must never wait on the API server for this: :meth:`EventSink.add` only counts, in
memory, and a background task (:meth:`EventSink.run`) writes every ``interval`` seconds one
Event per (owner, reason, message) with the count seen — a 100-pod Job that starts cold is one
``ColdStart`` Event with ``count: 100``, written once, not 100 writes. The Event's name is
derived from the owner's UID, the reason and the message, so later flushes (and other webhook
replicas) bump ``count`` on the same Event: the aggregation client-go's recorder does
(kubernetes/client-go ``tools/record/events_cache.go``). Best effort: a failed write is logged
and dropped; the pending set is bounded (``max_pending``), extra occurrences are dropped.
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import logging
from typing import Any, Literal

from kontinue.kube import api, errors, resources
from kontinue.models import base

logger = logging.getLogger("kontinue.webhook.events")

COMPONENT = "kontinue-webhook"
REPORTING_CONTROLLER = "kontinue.dev/webhook"

Obj = dict[str, Any]


@dataclasses.dataclass
class _Pending:
    involved: Obj
    reason: str
    message: str
    type_: Literal["Normal", "Warning"]
    count: int = 0


def event_name(involved: Obj, reason: str, message: str) -> str:
    meta = involved["metadata"]
    digest = hashlib.sha256(f"{meta['uid']}/{reason}/{message}".encode()).hexdigest()[:12]
    return f"{meta['name'][:200]}.{digest}"


def build_event(pending: _Pending, *, instance: str) -> Obj:
    """Pure: the core/v1 Event for ``pending.count`` occurrences."""
    meta = pending.involved["metadata"]
    stamp = base.format_time(base.now())
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {
            "name": event_name(pending.involved, pending.reason, pending.message),
            "namespace": meta["namespace"],
        },
        "involvedObject": {
            "apiVersion": pending.involved.get("apiVersion", ""),
            "kind": pending.involved.get("kind", ""),
            "name": meta["name"],
            "namespace": meta["namespace"],
            "uid": meta["uid"],
        },
        "reason": pending.reason,
        "message": pending.message[:1024],
        "type": pending.type_,
        "source": {"component": COMPONENT},
        "reportingComponent": REPORTING_CONTROLLER,
        "reportingInstance": instance,
        "firstTimestamp": stamp,
        "lastTimestamp": stamp,
        "count": pending.count,
    }


class EventSink:
    def __init__(
        self,
        kube: api.Api,
        *,
        instance: str,
        interval: float = 2.0,
        max_pending: int = 1000,
    ) -> None:
        self.kube = kube
        self.instance = instance
        self.interval = interval
        self.max_pending = max_pending
        self._pending: dict[tuple[str, str, str], _Pending] = {}
        self._wake = asyncio.Event()

    def add(
        self,
        involved: Obj,
        *,
        reason: str,
        message: str,
        type_: Literal["Normal", "Warning"] = "Normal",
    ) -> None:
        """Count one occurrence (never blocks, never fails)."""
        key = (involved["metadata"]["uid"], reason, message)
        pending = self._pending.get(key)
        if pending is None:
            if len(self._pending) >= self.max_pending:
                return
            pending = self._pending[key] = _Pending(involved, reason, message, type_)
        pending.count += 1
        self._wake.set()

    async def run(self) -> None:
        """Flush every ``interval`` seconds until cancelled; the owner calls :meth:`flush`
        once more after cancelling it (shutdown)."""
        while True:
            await self._wake.wait()
            await asyncio.sleep(self.interval)
            await self.flush()

    async def flush(self) -> None:
        batch, self._pending = self._pending, {}
        self._wake.clear()
        for pending in batch.values():
            await self._write(pending)

    async def _write(self, pending: _Pending) -> None:
        event = build_event(pending, instance=self.instance)
        meta = event["metadata"]
        try:
            await self.kube.create(resources.EVENTS, event)
        except errors.Conflict:
            try:
                current = await self.kube.get(
                    resources.EVENTS, meta["name"], namespace=meta["namespace"]
                )
                await self.kube.merge_patch(
                    resources.EVENTS,
                    meta["name"],
                    {
                        "count": int(current.get("count") or 1) + pending.count,
                        "lastTimestamp": event["lastTimestamp"],
                    },
                    namespace=meta["namespace"],
                )
            except errors.ApiError as exc:
                logger.warning("could not update event %s: %s", meta["name"], exc)
        except errors.ApiError as exc:
            logger.warning("could not record %s on %s: %s", pending.reason, meta["name"], exc)
