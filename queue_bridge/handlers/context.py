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

from kontinue import lineage
from kontinue.kube import api as kube_api
from kontinue.kube import resources, watching
from kontinue.models import base, checkpoint
from queue_bridge import caches as caches_module
from queue_bridge import instruments, kinds, queueing, recording
from queue_bridge import outbox as outbox_module
from queue_bridge import settings as settings_module

log = logging.getLogger("kontinue.bridge")

WRITE_VISIBLE_SECONDS = 5.0
"""How long a lineage's lock waits for the watch cache to show our own Checkpoint write."""
Clock = Callable[[], datetime.datetime]
VOLCANO_JOB_KIND = lineage.owner_kind(api_version=resources.VOLCANO_JOBS.api_version, kind="Job")
"""A Volcano Job's lineage ``owner_kind`` (``Job.batch.volcano.sh``, kontinue/lineage.py)."""


def reference(obj: base.KubeObject, api_version: str, kind: str) -> dict[str, Any]:
    """What an Event needs of the object it is about (:class:`queue_bridge.recording.Involved`),
    instead of a dump of the whole object."""
    meta = obj.metadata
    return {
        "apiVersion": api_version,
        "kind": kind,
        "metadata": {
            "name": meta.name or "",
            "namespace": meta.namespace or "",
            "uid": meta.uid or "",
        },
    }


Seen = Callable[[checkpoint.Checkpoint | None], bool]


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
    _visible_waiters: dict[tuple[str, str], list[tuple[Seen, asyncio.Event]]] = dataclasses.field(
        default_factory=dict
    )

    outbox: outbox_module.EventOutbox = dataclasses.field(init=False)
    """Events, posted best-effort after the keys that create Checkpoints (queue_bridge/outbox.py)"""

    def __post_init__(self) -> None:
        self.outbox = outbox_module.EventOutbox(self.recorder, self.queue)
        self.caches.checkpoints.subscribe(self._on_checkpoint)

    def _on_checkpoint(self, event: watching.Event[checkpoint.Checkpoint]) -> None:
        """Wake :meth:`visible` waiters whose write the cache now shows (no I/O, no await)."""
        if event.type == "DELETED":
            return
        key = (event.obj.metadata.namespace or "", event.obj.name)
        for seen, woken in self._visible_waiters.get(key, ()):
            if seen(event.obj):
                woken.set()

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
        """Wait (bounded) until the checkpoints cache shows our write ``raw`` of ``cp``: woken
        by the cache's own event for it, not by polling."""
        version = (raw.get("metadata") or {}).get("resourceVersion")
        members = {m.pod_uid for m in cp.spec.members}

        def seen(held: checkpoint.Checkpoint | None) -> bool:
            return held is not None and (
                held.metadata.resource_version == version
                or members <= {m.pod_uid for m in held.spec.members}
            )

        if seen(self.caches.checkpoints.get(cp.name, cp.metadata.namespace)):
            return
        key = (cp.metadata.namespace or "", cp.name)
        woken = asyncio.Event()
        waiters = self._visible_waiters.setdefault(key, [])
        waiters.append((seen, woken))
        try:
            async with asyncio.timeout(WRITE_VISIBLE_SECONDS):
                await woken.wait()
            return
        except TimeoutError:
            pass
        finally:
            waiters.remove((seen, woken))
            if not waiters:
                del self._visible_waiters[key]
        log.warning(
            "checkpoint=%s/%s: our write not in the cache yet", cp.metadata.namespace, cp.name
        )

    async def event(
        self, obj: dict[str, Any] | None, reason: str, message: str, type_: str = "Normal"
    ) -> None:
        """Record an Event on ``obj`` — posted by the outbox's sender after the handler moves
        on (queue_bridge/outbox.py): Events are never on the path from an eviction to its
        Checkpoint (issue 14)."""
        if obj is not None:
            self.outbox.add(obj, reason, message, type_)

    async def events_sent(self) -> None:
        """Wait until every Event asked for so far was posted (tests)."""
        await self.outbox.sent()

    def job_dict(self, owner: checkpoint.Lineage) -> dict[str, Any] | None:
        """The lineage's owner as an Event's object, if it is a ``batch/v1`` Job or a Volcano
        Job (``kubectl describe vcjob``) this bridge caches, with the lineage's UID."""
        found: base.KubeObject | None = None
        api_version = "batch/v1"
        if owner.owner_kind == "Job":
            found = self.caches.jobs.get(owner.owner_name, owner.namespace)
        elif owner.owner_kind == VOLCANO_JOB_KIND and self.caches.vcjobs is not None:
            found = self.caches.vcjobs.get(owner.owner_name, owner.namespace)
            api_version = resources.VOLCANO_JOBS.api_version
        if found is None or found.metadata.uid != owner.owner_uid:
            return None
        return reference(found, api_version, "Job")

    def workload_dict(self, cp: checkpoint.Checkpoint) -> dict[str, Any] | None:
        """The set's queue object (``spec.workload``) as an Event's object: its Kueue Workload,
        else its Volcano PodGroup (deciding.queue_object names either)."""
        if not cp.spec.workload:
            return None
        namespace = cp.spec.lineage.namespace
        wl = self.caches.workloads.get(cp.spec.workload, namespace)
        if wl is not None:
            return reference(wl, resources.WORKLOADS.api_version, "Workload")
        groups = self.caches.pod_groups
        group = groups.get(cp.spec.workload, namespace) if groups is not None else None
        if group is None:
            return None
        return reference(group, resources.PODGROUPS.api_version, "PodGroup")

    async def tell(
        self,
        cp: checkpoint.Checkpoint,
        raw: dict[str, Any] | None,
        event: tuple[str, str, str],
    ) -> None:
        """One Event on the Workload or PodGroup, the owner Job (or Volcano Job) and the
        Checkpoint (whichever exist)."""
        reason, message, type_ = event
        for obj in (self.workload_dict(cp), self.job_dict(cp.spec.lineage), raw):
            await self.event(obj, reason, message, type_)
