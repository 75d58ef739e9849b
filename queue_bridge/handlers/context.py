"""What the handlers share: the API, the caches, the clock, metrics, Events and requeue.

Both paths may see the same pods (a Volcano victim of a Kueue-managed Job; a Kueue eviction
whose pods a drain also hits). Creating or joining a Checkpoint of one lineage therefore runs
under a per-lineage lock (:meth:`Context.lineage_lock`) and waits until the watch cache shows
the write (:meth:`Context.visible`), so the other path's next decision already counts those pods
as taken (only the leader writes, so an in-process lock is enough).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import datetime
import logging
from collections.abc import AsyncIterator, Callable
from typing import Any

from kontinue.kube import api as kube_api
from kontinue.kube import resources
from kontinue.models import base, checkpoint
from queue_bridge import caches as caches_module
from queue_bridge import instruments, kinds, queueing, recording
from queue_bridge import settings as settings_module

log = logging.getLogger("kontinue.bridge")

WRITE_VISIBLE_SECONDS = 5.0
"""How long a lineage's lock waits for the watch cache to show our own Checkpoint write."""
Clock = Callable[[], datetime.datetime]


@dataclasses.dataclass
class Context:
    kube: kube_api.Api
    applier: kube_api.Api
    """Our AdmissionCheck entries are applied under their own field manager, as Kueue's are."""
    config: settings_module.Settings
    clock: Clock
    caches: caches_module.Caches
    metrics: instruments.Metrics
    recorder: recording.Recorder
    queue: queueing.WorkQueue[kinds.Key]
    warned_jobs: set[str] = dataclasses.field(default_factory=set)
    """Jobs already warned about in this process: only spares the cluster duplicate Events."""
    _lineage_locks: dict[str, asyncio.Lock] = dataclasses.field(default_factory=dict)

    def requeue_at(self, key: kinds.Key, when: datetime.datetime | None) -> None:
        if when is None:
            return
        delay = max(0.05, (when - self.clock()).total_seconds() + 0.05)
        self.queue.add_after(key, delay)

    @contextlib.asynccontextmanager
    async def lineage_lock(self, owner: checkpoint.Lineage) -> AsyncIterator[None]:
        """Serialise Checkpoint creation for one lineage across both paths (module doc)."""
        lock = self._lineage_locks.setdefault(owner.owner_uid, asyncio.Lock())
        try:
            async with lock:
                yield
        finally:
            if not lock.locked() and self._lineage_locks.get(owner.owner_uid) is lock:
                del self._lineage_locks[owner.owner_uid]

    async def visible(self, cp: checkpoint.Checkpoint, raw: dict[str, Any]) -> None:
        """Wait (bounded) until the checkpoints cache shows our write ``raw`` of ``cp``."""
        version = (raw.get("metadata") or {}).get("resourceVersion")
        loop = asyncio.get_running_loop()
        deadline = loop.time() + WRITE_VISIBLE_SECONDS
        while loop.time() < deadline:
            seen = self.caches.checkpoints.get(cp.name, cp.metadata.namespace)
            if seen is not None and (
                seen.metadata.resource_version == version
                or {m.pod_uid for m in cp.spec.members} <= {m.pod_uid for m in seen.spec.members}
            ):
                return
            await asyncio.sleep(0.01)
        log.warning(
            "checkpoint=%s/%s: our write not in the cache yet", cp.metadata.namespace, cp.name
        )

    async def event(
        self, obj: dict[str, Any] | None, reason: str, message: str, type_: str = "Normal"
    ) -> None:
        if obj is None:
            return
        await self.recorder.record(
            obj, reason=reason, message=message, type_="Warning" if type_ == "Warning" else "Normal"
        )

    def job_dict(self, owner: checkpoint.Lineage) -> dict[str, Any] | None:
        if owner.owner_kind != "Job":
            return None
        job = self.caches.jobs.get(owner.owner_name, owner.namespace)
        if job is None or job.metadata.uid != owner.owner_uid:
            return None
        return {**base.to_dict(job), "apiVersion": "batch/v1", "kind": "Job"}

    def workload_dict(self, cp: checkpoint.Checkpoint) -> dict[str, Any] | None:
        if not cp.spec.workload:
            return None
        wl = self.caches.workloads.get(cp.spec.workload, cp.spec.lineage.namespace)
        if wl is None:
            return None
        return {**base.to_dict(wl), "apiVersion": resources.WORKLOADS.api_version}

    async def tell(
        self,
        cp: checkpoint.Checkpoint,
        raw: dict[str, Any] | None,
        event: tuple[str, str, str],
    ) -> None:
        """One Event on the Workload, the owner Job and the Checkpoint (whichever exist)."""
        reason, message, type_ = event
        for obj in (self.workload_dict(cp), self.job_dict(cp.spec.lineage), raw):
            await self.event(obj, reason, message, type_)
