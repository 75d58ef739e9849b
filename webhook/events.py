"""Events the webhook tells a user about its pods: ``NotPlumbed`` (an opted-in pod left
untouched, with why), ``ColdStart`` (a pod that starts without a checkpoint, with the restore
plan's reason) and ``CheckpointVolumeMissing`` (an opted-in pod left untouched because its
namespace lacks the policy's claim, webhook/claims.py), on the pod's owner (``kubectl describe
job`` shows them).

Admission must never wait on the API server for this: :meth:`EventSink.add` only counts, in
memory, and a background task (:meth:`EventSink.run`) writes every ``interval`` seconds one
Event per (owner, reason, message) with the count seen — a 100-pod Job that starts cold is one
``ColdStart`` Event with ``count: 100``, written once, not 100 writes. The Event's name is
derived from the owner's UID, the reason and the message, so later flushes (and other webhook
replicas) bump ``count`` on the same Event: the aggregation client-go's recorder does
(kubernetes/client-go ``tools/record/events_cache.go``; the writer is kontinue/kube/events.py,
shared with the bridge). Best effort: a failed write is logged and dropped; the pending set is
bounded (``max_pending``), extra occurrences are dropped.

An occurrence may also name what it is *about* (``once_per``): then only the first within
``quiet_seconds`` is counted, and later ones with the same ``once_per`` are dropped, whichever
owner they name. ``CheckpointVolumeMissing`` is ``once_per`` (namespace, claim): a namespace
without its claim gets one Event per five minutes, not one per pod or per Job (the pods'
admission warnings and the ``claim_missing`` count say the rest). Per replica: two replicas may
each write one. The remembered keys are bounded by ``max_pending`` too.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections.abc import Callable, Hashable
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
        quiet_seconds: float = 300.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.kube = kube
        self.instance = instance
        self.interval = interval
        self.max_pending = max_pending
        self.quiet_seconds = quiet_seconds
        self._clock = clock
        self._pending: dict[tuple[str, str, str], _Pending] = {}
        self._told: dict[Hashable, float] = {}  # once_per -> when it was last counted
        self._wake = asyncio.Event()

    def add(
        self,
        involved: Obj,
        *,
        reason: str,
        message: str,
        type_: events.EventType = "Normal",
        once_per: Hashable | None = None,
    ) -> None:
        """Count one occurrence (never blocks, never fails); with ``once_per``, only if none
        with the same ``once_per`` was counted in the last ``quiet_seconds``."""
        if once_per is not None and not self._first_in_window(once_per):
            return
        key = (involved["metadata"]["uid"], reason, message)
        pending = self._pending.get(key)
        if pending is None:
            if len(self._pending) >= self.max_pending:
                return
            pending = self._pending[key] = _Pending(involved, reason, message, type_)
        pending.count += 1
        self._wake.set()

    def _first_in_window(self, once_per: Hashable) -> bool:
        now = self._clock()
        last = self._told.get(once_per)
        if last is not None and now - last < self.quiet_seconds:
            return False
        if once_per not in self._told and len(self._told) >= self.max_pending:
            self._told = {k: t for k, t in self._told.items() if now - t < self.quiet_seconds}
            if len(self._told) >= self.max_pending:
                return False
        self._told[once_per] = now
        return True

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
