"""Events the webhook tells a user about its pods: ``NotPlumbed`` (an opted-in pod left
untouched, with why) and ``ColdStart`` (a pod that starts without a checkpoint, with the restore
plan's reason), on the pod's owner (``kubectl describe job`` shows them).

Admission must never wait on the API server for this: :meth:`EventSink.add` only counts, in
memory, and a background task (:meth:`EventSink.run`) writes every ``interval`` seconds one
Event per (owner, reason, message) with the count seen — a 100-pod Job that starts cold is one
``ColdStart`` Event with ``count: 100``, written once, not 100 writes. The Event's name is
derived from the owner's UID, the reason and the message, so later flushes (and other webhook
replicas) bump ``count`` on the same Event: the aggregation client-go's recorder does
(kubernetes/client-go ``tools/record/events_cache.go``; the writer is kontinue/kube/events.py,
shared with the bridge). Best effort: a failed write is logged and dropped; the pending set is
bounded (``max_pending``), extra occurrences are dropped.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from typing import Any

from kontinue.kube import api, events

logger = logging.getLogger("kontinue.webhook.events")

COMPONENT = "kontinue-webhook"
REPORTING_CONTROLLER = "kontinue.dev/webhook"

Obj = dict[str, Any]


@dataclasses.dataclass
class _Pending:
    involved: Obj
    reason: str
    message: str
    type_: events.EventType
    count: int = 0


def build_event(pending: _Pending, *, instance: str) -> Obj:
    """Pure: the core/v1 Event for ``pending.count`` occurrences."""
    return events.build_event(
        events.Involved.of(pending.involved),
        reason=pending.reason,
        message=pending.message,
        type_=pending.type_,
        reporter=events.Reporter(COMPONENT, REPORTING_CONTROLLER, instance),
        count=pending.count,
    )


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
        type_: events.EventType = "Normal",
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
        await events.write(self.kube, build_event(pending, instance=self.instance), logger=logger)
