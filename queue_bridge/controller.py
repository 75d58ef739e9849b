"""The Kueue-path controller: watch caches -> one bounded per-key work queue -> handlers.

Watch callbacks only map a change to keys and ``add`` them (never I/O, never a decision); the
handlers re-read the caches for their key, call the pure decisions in
:mod:`queue_bridge.reconciling` / :mod:`queue_bridge.admission_check`, and write through
:mod:`queue_bridge.acting`. Keys are ``(kind, namespace, name)``:

- ``Workload``: an eviction in force on an opted-in Workload -> create its Checkpoint (once:
  deterministic name, ``AlreadyExists`` is success); our AdmissionCheck's answer.
- ``Checkpoint``: follow the members to a terminal phase (status subresource, merge patch),
  Events on the transition, retention and owner expiry once terminal; requeued at the next
  deadline so a pod stuck Terminating cannot stall it.
- ``Pod``: count a failed restore once; remove the ``kontinue.dev/checkpoint`` finalizer when
  the decision says so, or requeue at its recheck time.
- ``Disruption`` (name: the lineage annotation value): pod-level disruptions of the lineage's
  opted-in pods (kube-scheduler preemption, Eviction API, taint manager, Volcano) -> one
  Checkpoint per eviction event, created or joined (:mod:`queue_bridge.disruptions`).
- ``Job``: warn once per process about an opted-in Job whose preemptions count against
  ``backoffLimit``; a finished Job's checkpoints are re-examined for expiry.
- ``AdmissionCheck``: keep ours ``Active``.

Only the leader processes keys (:meth:`Controller.lead`); the standby keeps its caches warm, so
a takeover starts with a full sweep (every key enqueued) and no relist. Nothing needed for a
decision lives only in memory: the few in-memory sets here (Jobs already warned about) only
spare the cluster duplicate Events.

Both paths may see the same pods (a Volcano victim of a Kueue-managed Job; a Kueue eviction
whose pods a drain also hits). Creating or joining a Checkpoint of one lineage therefore runs
under a per-lineage lock and waits until the watch cache shows the write, so the other path's
next decision already counts those pods as taken (only the leader writes, so an in-process lock
is enough).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import datetime
import logging
import time
from collections.abc import AsyncIterator, Callable, Iterable
from typing import Any

from opentelemetry import metrics

from kontinue import catalog, keys, lineage, optin
from kontinue.kube import api as kube_api
from kontinue.kube import errors, resources, watching
from kontinue.models import base, checkpoint, core, kueue, volcano
from kontinue.models import errors as model_errors
from kontinue.models import policy as policy_model
from queue_bridge import acting, admission_check, disruptions, queueing, reconciling, recording
from queue_bridge import settings as settings_module

log = logging.getLogger("kontinue.bridge")

Key = tuple[str, str, str]
WORKLOAD = "Workload"
CHECKPOINT = "Checkpoint"
POD = "Pod"
JOB = "Job"
ADMISSION_CHECK = "AdmissionCheck"
DISRUPTION = "Disruption"
WRITE_VISIBLE_SECONDS = 5.0
"""How long a lineage's lock waits for the watch cache to show our own Checkpoint write."""
Clock = Callable[[], datetime.datetime]
SECONDS_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0)
"""Histogram bounds for sub-second work (OpenTelemetry's default starts at 0, 5, 10 s)."""


def _utcnow() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


def _key(kind: str, obj: Any) -> Key:
    meta = obj.metadata
    return (kind, meta.namespace or "", meta.name or "")


def _owner_uid(annotation: str | None) -> str | None:
    """The owner UID from a ``kontinue.dev/lineage`` annotation, without validating the rest."""
    if not annotation or annotation.count("/") != 3:
        return None
    return annotation.rsplit("/", 1)[1] or None


class Caches:
    """The bridge's view of the cluster: one watch cache per resource it reads, plus indexes."""

    def __init__(
        self,
        kube: kube_api.Api,
        *,
        admission_check: bool,
        resync_seconds: float | None,
        queue_systems: tuple[str, ...] = (settings_module.KUEUE,),
        meter: metrics.Meter | None = None,
        **options: Any,
    ) -> None:
        def cache(resource: resources.Resource, model: Any, **extra: Any) -> Any:
            return watching.WatchCache(
                kube,
                resource,
                model=model,
                meter=meter,
                resync_seconds=resync_seconds,
                **options,
                **extra,
            )

        self.workloads: watching.WatchCache[kueue.Workload] = cache(
            resources.WORKLOADS, kueue.Workload
        )
        self.cluster_queues: watching.WatchCache[kueue.ClusterQueue] = cache(
            resources.CLUSTER_QUEUES, kueue.ClusterQueue
        )
        self.local_queues: watching.WatchCache[kueue.LocalQueue] = cache(
            resources.LOCAL_QUEUES, kueue.LocalQueue
        )
        self.policies: watching.WatchCache[policy_model.CheckpointPolicy] = cache(
            resources.CHECKPOINT_POLICIES, policy_model.CheckpointPolicy
        )
        self.checkpoints: watching.WatchCache[checkpoint.Checkpoint] = cache(
            resources.CHECKPOINTS, checkpoint.Checkpoint
        )
        self.pods: watching.WatchCache[core.Pod] = cache(resources.PODS, core.Pod)
        self.jobs: watching.WatchCache[core.Job] = cache(resources.JOBS, core.Job)
        self.gpu_nodes: watching.WatchCache[core.Node] = cache(
            resources.NODES, core.Node, label_selector=keys.GPU_PRODUCT_LABEL
        )
        self.admission_checks: watching.WatchCache[kueue.AdmissionCheck] | None = None
        self.flavors: watching.WatchCache[kueue.ResourceFlavor] | None = None
        if admission_check:
            self.admission_checks = cache(resources.ADMISSION_CHECKS, kueue.AdmissionCheck)
            self.flavors = cache(resources.RESOURCE_FLAVORS, kueue.ResourceFlavor)
        # Only where Volcano is installed: a cache of a missing CRD never syncs (readiness).
        self.volcano_queues: watching.WatchCache[volcano.Queue] | None = None
        self.pod_groups: watching.WatchCache[volcano.PodGroup] | None = None
        if settings_module.VOLCANO in queue_systems:
            self.volcano_queues = cache(resources.VOLCANO_QUEUES, volcano.Queue)
            self.pod_groups = cache(resources.PODGROUPS, volcano.PodGroup)

        # indexes, kept by subscriptions (synchronous, no I/O)
        self.pods_by_uid: dict[str, tuple[str, str]] = {}
        self.pods_by_lineage: dict[str, set[tuple[str, str]]] = collections.defaultdict(set)
        self.checkpoints_by_pod: dict[str, set[tuple[str, str]]] = collections.defaultdict(set)
        self.checkpoints_by_owner: dict[str, set[tuple[str, str]]] = collections.defaultdict(set)
        self.workloads_by_owner: dict[str, set[tuple[str, str]]] = collections.defaultdict(set)
        self.pods.subscribe(self._index_pod)
        self.checkpoints.subscribe(self._index_checkpoint)
        self.workloads.subscribe(self._index_workload)

    @property
    def all(self) -> list[watching.WatchCache[Any]]:
        found: list[watching.WatchCache[Any] | None] = [
            self.workloads,
            self.cluster_queues,
            self.local_queues,
            self.policies,
            self.checkpoints,
            self.pods,
            self.jobs,
            self.gpu_nodes,
            self.admission_checks,
            self.flavors,
            self.volcano_queues,
            self.pod_groups,
        ]
        return [c for c in found if c is not None]

    @property
    def synced(self) -> bool:
        return all(c.synced for c in self.all)

    async def wait_synced(self) -> None:
        for cache in self.all:
            await cache.wait_synced()

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[Caches]:
        async with watching.running(self.all):
            yield self

    # -- indexes -------------------------------------------------------------------------------

    def _index_pod(self, event: watching.Event[core.Pod]) -> None:
        for obj in (event.old, event.obj):
            if obj is None:
                continue
            key = (obj.namespace, obj.name)
            if obj.metadata.uid and self.pods_by_uid.get(obj.metadata.uid) == key:
                del self.pods_by_uid[obj.metadata.uid]
            annotation = obj.metadata.annotation(keys.LINEAGE_ANNOTATION)
            if annotation:
                self.pods_by_lineage[annotation].discard(key)
        if event.type == "DELETED":
            return
        pod = event.obj
        key = (pod.namespace, pod.name)
        if pod.metadata.uid:
            self.pods_by_uid[pod.metadata.uid] = key
        if annotation := pod.metadata.annotation(keys.LINEAGE_ANNOTATION):
            self.pods_by_lineage[annotation].add(key)

    def _index_checkpoint(self, event: watching.Event[checkpoint.Checkpoint]) -> None:
        for obj in (event.old, event.obj):
            if obj is None:
                continue
            key = (obj.metadata.namespace or "", obj.name)
            for member in obj.spec.members:
                self.checkpoints_by_pod[member.pod_uid].discard(key)
            self.checkpoints_by_owner[obj.spec.lineage.owner_uid].discard(key)
        if event.type == "DELETED":
            return
        cp = event.obj
        key = (cp.metadata.namespace or "", cp.name)
        for member in cp.spec.members:
            self.checkpoints_by_pod[member.pod_uid].add(key)
        self.checkpoints_by_owner[cp.spec.lineage.owner_uid].add(key)

    def _index_workload(self, event: watching.Event[kueue.Workload]) -> None:
        for obj in (event.old, event.obj):
            if obj is None:
                continue
            ref = obj.metadata.controller_ref()
            if ref is not None:
                self.workloads_by_owner[ref.uid].discard((obj.namespace, obj.name))
        if event.type == "DELETED":
            return
        ref = event.obj.metadata.controller_ref()
        if ref is not None:
            self.workloads_by_owner[ref.uid].add((event.obj.namespace, event.obj.name))

    # -- lookups -------------------------------------------------------------------------------

    def pod_by_uid(self, uid: str) -> core.Pod | None:
        key = self.pods_by_uid.get(uid)
        return self.pods.get(key[1], key[0]) if key is not None else None

    def lineage_pods(self, owner: checkpoint.Lineage) -> list[core.Pod]:
        found = (
            self.pods.get(name, ns)
            for ns, name in self.pods_by_lineage.get(lineage.annotation_value(owner), ())
        )
        return [p for p in found if p is not None]

    def checkpoints_of_pod(self, uid: str) -> list[checkpoint.Checkpoint]:
        found = (self.checkpoints.get(n, ns) for ns, n in self.checkpoints_by_pod.get(uid, ()))
        return [cp for cp in found if cp is not None]

    def checkpoints_of_owner(self, uid: str) -> list[checkpoint.Checkpoint]:
        found = (self.checkpoints.get(n, ns) for ns, n in self.checkpoints_by_owner.get(uid, ()))
        return [cp for cp in found if cp is not None]

    def workloads_of_owner(self, uid: str) -> list[kueue.Workload]:
        found = (self.workloads.get(n, ns) for ns, n in self.workloads_by_owner.get(uid, ()))
        return [wl for wl in found if wl is not None]

    def local_queue(self, namespace: str, name: str) -> kueue.LocalQueue | None:
        return self.local_queues.get(name, namespace)

    def cluster_queue(self, name: str) -> kueue.ClusterQueue | None:
        return self.cluster_queues.get(name)

    def volcano_queue(self, name: str) -> volcano.Queue | None:
        return self.volcano_queues.get(name) if self.volcano_queues is not None else None

    def pod_group(self, namespace: str, name: str) -> volcano.PodGroup | None:
        return self.pod_groups.get(name, namespace) if self.pod_groups is not None else None

    def policy(self, name: str) -> policy_model.CheckpointPolicy | None:
        return self.policies.get(name)

    def flavor(self, name: str) -> kueue.ResourceFlavor | None:
        return self.flavors.get(name) if self.flavors is not None else None


class Metrics:
    """The bridge's OpenTelemetry instruments (names in docs/operations.md)."""

    def __init__(
        self,
        meter: metrics.Meter,
        caches: Caches,
        queue: queueing.WorkQueue[Key],
        leading: Callable[[], bool],
    ) -> None:
        def by_phase(_: metrics.CallbackOptions) -> Iterable[metrics.Observation]:
            counts = collections.Counter(cp.status.phase.value for cp in caches.checkpoints.items())
            for phase in checkpoint.Phase:
                yield metrics.Observation(counts.get(phase.value, 0), {"phase": phase.value})

        def depth(_: metrics.CallbackOptions) -> Iterable[metrics.Observation]:
            yield metrics.Observation(len(queue))

        meter.create_observable_gauge(
            "kontinue.bridge.checkpoints",
            callbacks=[by_phase],
            unit="{checkpoint}",
            description="Checkpoints in the cluster, by phase",
        )

        def leader(_: metrics.CallbackOptions) -> Iterable[metrics.Observation]:
            yield metrics.Observation(1 if leading() else 0)

        meter.create_observable_gauge(
            "kontinue.bridge.leader",
            callbacks=[leader],
            unit="1",
            description="1 while this replica holds the Lease and works, else 0",
        )
        meter.create_observable_gauge(
            "kontinue.bridge.queue.depth",
            callbacks=[depth],
            unit="{key}",
            description="Keys waiting in the work queue",
        )
        self.transitions = meter.create_counter(
            "kontinue.bridge.checkpoint.transitions",
            unit="{checkpoint}",
            description="Checkpoints created (phase Pending) or moved to a phase",
        )
        self.reaction = meter.create_histogram(
            "kontinue.bridge.reaction_latency",
            unit="s",
            description="From the eviction's condition time (1 s resolution) to its Checkpoint",
            explicit_bucket_boundaries_advisory=SECONDS_BUCKETS,
        )
        self.errors = meter.create_counter(
            "kontinue.bridge.reconcile.errors",
            unit="{error}",
            description="Reconciles that failed (retried with backoff), by kind",
        )
        self.reconciles = meter.create_histogram(
            "kontinue.bridge.reconcile.duration",
            unit="s",
            description="Time spent handling one key, by kind",
            explicit_bucket_boundaries_advisory=SECONDS_BUCKETS,
        )
        self.finalizers = meter.create_counter(
            "kontinue.bridge.finalizers.released",
            unit="{pod}",
            description="Pod finalizers removed, by why",
        )


class Controller:
    def __init__(
        self,
        kube: kube_api.Api,
        *,
        config: settings_module.Settings,
        meter: metrics.Meter | None = None,
        clock: Clock | None = None,
        **cache_options: Any,  # test hooks for the watch caches
    ) -> None:
        self.kube = kube
        self.config = config
        self.clock = clock or _utcnow
        meter = meter or metrics.NoOpMeter("kontinue.bridge")
        self.caches = Caches(
            kube,
            admission_check=config.admission_check,
            resync_seconds=config.resync_seconds,
            queue_systems=config.queue_systems,
            meter=meter,
            **cache_options,
        )
        self.queue: queueing.WorkQueue[Key] = queueing.WorkQueue(max_keys=config.max_queued_keys)
        self.recorder = recording.Recorder(kube, instance=config.identity)
        # Our AdmissionCheck entries are applied under their own field manager, as Kueue's are.
        self.applier = kube_api.Api(kube.api_client, field_manager=admission_check.FIELD_MANAGER)
        self.metrics = Metrics(meter, self.caches, self.queue, lambda: self.leading)
        self.leading = False
        self._warned_jobs: set[str] = set()
        self._lineage_locks: dict[str, asyncio.Lock] = {}
        c = self.caches
        c.workloads.subscribe(self._on_workload)
        c.checkpoints.subscribe(self._on_checkpoint)
        c.pods.subscribe(self._on_pod)
        c.jobs.subscribe(self._on_job)
        for cache in (c.cluster_queues, c.local_queues, c.policies):
            cache.subscribe(lambda _: self._add_all(WORKLOAD))
        # The pod path re-decides on an opt-in change only (labels, spec), not on the frequent
        # status writes of queues; a PodGroup is read only for its queue, which the pod's own
        # queue annotation also names, so PodGroup changes need no sweep.
        opt_in_sources = (c.cluster_queues, c.local_queues, c.policies, c.volcano_queues)
        for queues in opt_in_sources:
            if queues is not None:
                queues.subscribe(self._on_opt_in_source)
        if c.admission_checks is not None:
            c.admission_checks.subscribe(lambda e: self._add(_key(ADMISSION_CHECK, e.obj)))

    # -- event -> keys -------------------------------------------------------------------------

    def _add(self, key: Key) -> None:
        if self.leading:
            self.queue.add(key)

    def _add_all(self, kind: str) -> None:
        if not self.leading:
            return
        cache: dict[str, watching.WatchCache[Any] | None] = {
            WORKLOAD: self.caches.workloads,
            CHECKPOINT: self.caches.checkpoints,
            POD: self.caches.pods,
            JOB: self.caches.jobs,
            ADMISSION_CHECK: self.caches.admission_checks,
        }
        if kind == DISRUPTION:
            for pod in self.caches.pods.items():
                self._add_disruption(pod)
            return
        found = cache[kind]
        for obj in found.items() if found is not None else []:
            if kind == POD and not self._pod_matters(obj):
                continue
            self.queue.add(_key(kind, obj))

    @staticmethod
    def _pod_matters(pod: core.Pod) -> bool:
        return reconciling.has_finalizer(pod) or bool(
            pod.metadata.annotation(keys.RESTORE_FROM_ANNOTATION)
        )

    def _on_opt_in_source(self, event: watching.Event[Any]) -> None:
        old, new = event.old, event.obj
        if (
            old is None
            or event.type == "DELETED"
            or old.metadata.labels != new.metadata.labels
            or old.metadata.generation != new.metadata.generation
        ):
            self._add_all(DISRUPTION)

    def _add_disruption(self, pod: core.Pod) -> None:
        if disruptions.has_disruption(pod):
            annotation = pod.metadata.annotation(keys.LINEAGE_ANNOTATION) or ""
            self._add((DISRUPTION, pod.namespace, annotation))

    def _add_lineage_disruptions(self, owner: checkpoint.Lineage | None) -> None:
        for pod in self.caches.lineage_pods(owner) if owner is not None else []:
            self._add_disruption(pod)

    def _on_workload(self, event: watching.Event[kueue.Workload]) -> None:
        workload = event.obj
        self._add(_key(WORKLOAD, workload))
        self._add_lineage_disruptions(reconciling.workload_lineage(workload))
        ref = workload.metadata.controller_ref()
        if ref is not None and ref.kind == "Job" and ref.api_version == "batch/v1":
            self._add((JOB, workload.namespace, ref.name))

    def _on_checkpoint(self, event: watching.Event[checkpoint.Checkpoint]) -> None:
        cp = event.obj
        self._add(_key(CHECKPOINT, cp))
        for member in cp.spec.members:
            pod = self.caches.pod_by_uid(member.pod_uid)
            if pod is not None:
                self._add(_key(POD, pod))
        for ns, name in self.caches.workloads_by_owner.get(cp.spec.lineage.owner_uid, ()):
            self._add((WORKLOAD, ns, name))
        self._add_lineage_disruptions(cp.spec.lineage)

    def _on_pod(self, event: watching.Event[core.Pod]) -> None:
        pod = event.obj
        if event.type != "DELETED" and self._pod_matters(pod):
            self._add(_key(POD, pod))
        for ns, name in self.caches.checkpoints_by_pod.get(pod.metadata.uid or "", ()):
            self._add((CHECKPOINT, ns, name))
        owner = _owner_uid(pod.metadata.annotation(keys.LINEAGE_ANNOTATION))
        for ns, name in self.caches.workloads_by_owner.get(owner or "", ()):
            self._add((WORKLOAD, ns, name))
        if event.type != "DELETED":
            self._add_disruption(pod)

    def _on_job(self, event: watching.Event[core.Job]) -> None:
        job = event.obj
        if event.type != "DELETED":
            self._add(_key(JOB, job))
        for ns, name in self.caches.checkpoints_by_owner.get(job.metadata.uid or "", ()):
            self._add((CHECKPOINT, ns, name))

    # -- running -------------------------------------------------------------------------------

    async def lead(self) -> None:
        """Work while leading: wait for the caches, sweep every key, run the workers."""
        await self.caches.wait_synced()
        self.leading = True
        log.info("leading: sweeping every object")
        try:
            for kind in (ADMISSION_CHECK, JOB, CHECKPOINT, WORKLOAD, DISRUPTION, POD):
                self._add_all(kind)
            await self.queue.run(self.handle, workers=self.config.workers)
        finally:
            self.leading = False

    async def handle(self, key: Key) -> None:
        kind, namespace, name = key
        handler = {
            WORKLOAD: self.reconcile_workload,
            CHECKPOINT: self.reconcile_checkpoint,
            POD: self.reconcile_pod,
            JOB: self.reconcile_job,
            ADMISSION_CHECK: self.reconcile_admission_check,
            DISRUPTION: self.reconcile_disruption,
        }[kind]
        started = time.monotonic()
        try:
            await handler(namespace, name)
        except Exception as exc:
            self.metrics.errors.add(1, {"kind": kind, "error": type(exc).__name__})
            raise
        finally:
            self.metrics.reconciles.record(time.monotonic() - started, {"kind": kind})

    def _requeue_at(self, key: Key, when: datetime.datetime | None) -> None:
        if when is None:
            return
        delay = max(0.05, (when - self.clock()).total_seconds() + 0.05)
        self.queue.add_after(key, delay)

    def _opt_in(self, workload: kueue.Workload) -> reconciling.OptIn:
        c = self.caches
        return reconciling.opt_in(
            workload, cluster_queue=c.cluster_queue, local_queue=c.local_queue, policy=c.policy
        )

    def _policy_of(self, cp: checkpoint.Checkpoint) -> policy_model.CheckpointPolicy:
        return (
            reconciling.policy_named(cp.spec.policy_name, policy=self.caches.policy)
            or policy_model.DEFAULT
        )

    async def _event(
        self, obj: dict[str, Any] | None, reason: str, message: str, type_: str = "Normal"
    ) -> None:
        if obj is None:
            return
        await self.recorder.record(
            obj, reason=reason, message=message, type_="Warning" if type_ == "Warning" else "Normal"
        )

    def _job_dict(self, owner: checkpoint.Lineage) -> dict[str, Any] | None:
        if owner.owner_kind != "Job":
            return None
        job = self.caches.jobs.get(owner.owner_name, owner.namespace)
        if job is None or job.metadata.uid != owner.owner_uid:
            return None
        return {**base.to_dict(job), "apiVersion": "batch/v1", "kind": "Job"}

    def _workload_dict(self, cp: checkpoint.Checkpoint) -> dict[str, Any] | None:
        if not cp.spec.workload:
            return None
        wl = self.caches.workloads.get(cp.spec.workload, cp.spec.lineage.namespace)
        if wl is None:
            return None
        return {**base.to_dict(wl), "apiVersion": resources.WORKLOADS.api_version}

    async def _tell(
        self,
        cp: checkpoint.Checkpoint,
        raw: dict[str, Any] | None,
        event: tuple[str, str, str],
    ) -> None:
        """One Event on the Workload, the owner Job and the Checkpoint (whichever exist)."""
        reason, message, type_ = event
        for obj in (self._workload_dict(cp), self._job_dict(cp.spec.lineage), raw):
            await self._event(obj, reason, message, type_)

    # -- Workload ------------------------------------------------------------------------------

    async def reconcile_workload(self, namespace: str, name: str) -> None:
        workload = self.caches.workloads.get(name, namespace)
        if workload is None:
            return
        decision = self._opt_in(workload)
        try:
            found = reconciling.eviction(workload, decision=decision)
        except model_errors.InvalidObject as exc:
            log.error("workload=%s/%s cannot be read: %s", namespace, name, exc)
            found = None
        if found is not None and self.caches.checkpoints.get(found.name, namespace) is None:
            async with self._lineage_lock(found.lineage):
                await self._create_checkpoint(workload, found)
        if self.caches.admission_checks is not None:
            await self._answer_check(workload, decision)

    @contextlib.asynccontextmanager
    async def _lineage_lock(self, owner: checkpoint.Lineage) -> AsyncIterator[None]:
        """Serialise Checkpoint creation for one lineage across both paths (module doc)."""
        lock = self._lineage_locks.setdefault(owner.owner_uid, asyncio.Lock())
        try:
            async with lock:
                yield
        finally:
            if not lock.locked() and self._lineage_locks.get(owner.owner_uid) is lock:
                del self._lineage_locks[owner.owner_uid]

    def _taken(self, owner: checkpoint.Lineage) -> set[str]:
        """UIDs of the lineage's pods already members of an unexpired Checkpoint (any path)."""
        return {
            m.pod_uid
            for cp in self.caches.checkpoints_of_owner(owner.owner_uid)
            if cp.status.phase is not checkpoint.Phase.EXPIRED
            for m in cp.spec.members
        }

    async def _visible(self, cp: checkpoint.Checkpoint, raw: dict[str, Any]) -> None:
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

    async def _create_checkpoint(
        self, workload: kueue.Workload, found: reconciling.Eviction
    ) -> None:
        c = self.caches
        pods = c.lineage_pods(found.lineage)
        taken = self._taken(found.lineage)
        members = reconciling.members_of(pods, owner=found.lineage, taken=taken)
        if not members:
            log.info(
                "eviction without running pods, no checkpoint workload=%s/%s reason=%s",
                workload.namespace,
                workload.name,
                found.trigger.reason,
            )
            return
        await self._create(found, members=members, workload=workload.name)

    async def _create(
        self,
        found: reconciling.Eviction,
        *,
        members: list[checkpoint.Member],
        workload: str | None,
    ) -> None:
        """Create the Checkpoint of ``found`` (both paths), its metric, log and Event."""
        c = self.caches
        first = c.pod_by_uid(members[0].pod_uid)
        node = c.gpu_nodes.get(members[0].node) if members[0].node else None
        try:
            fingerprint = catalog.fingerprint_of(first, node) if first else checkpoint.Fingerprint()
        except ValueError as exc:
            log.warning("fingerprint of %s: %s", members[0].pod_name, exc)
            fingerprint = checkpoint.Fingerprint()
        cp = reconciling.new_checkpoint(
            workload=workload, found=found, members=members, fingerprint=fingerprint
        )
        raw = await acting.create_checkpoint(self.kube, cp)
        if raw is None:
            return
        await self._visible(cp, raw)
        latency = (self.clock() - found.trigger.time).total_seconds()
        self.metrics.reaction.record(max(0.0, latency), {"source": found.trigger.source.value})
        self.metrics.transitions.add(1, {"phase": checkpoint.Phase.PENDING.value})
        log.info(
            "checkpoint created checkpoint=%s/%s members=%d source=%s reason=%s",
            cp.metadata.namespace,
            cp.name,
            len(members),
            found.trigger.source.value,
            found.trigger.reason,
        )
        event = (keys.EVENT_CHECKPOINT_STARTED, reconciling.started_message(cp), "Normal")
        await self._tell(cp, raw, event)

    # -- Disruption (pod path) ------------------------------------------------------------------

    def _pod_decision(self, pod: core.Pod) -> optin.Decision:
        return optin.decide(
            optin.Marks.from_meta(pod.metadata), namespace=pod.namespace, state=self.caches
        )

    def _disrupted(self, pod: core.Pod, *, taken: set[str]) -> disruptions.Disrupted | None:
        """``pod`` as a pod-path victim still to record, else ``None`` (module doc of
        :mod:`queue_bridge.disruptions`)."""
        annotation = pod.metadata.annotation(keys.LINEAGE_ANNOTATION)
        if not annotation or pod.metadata.uid in taken or not disruptions.has_disruption(pod):
            return None
        try:
            owner = lineage.parse_annotation(annotation)
        except model_errors.InvalidObject as exc:
            log.warning("pod=%s/%s: %s", pod.namespace, pod.name, exc)
            return None
        if not reconciling.is_member_candidate(pod, owner=owner):
            return None
        decision = self._pod_decision(pod)
        trigger = disruptions.pod_trigger(pod, decision=decision)
        if trigger is None or decision.policy is None or self._eviction_pending(pod):
            return None  # not opted in, a reason the policy skips, or the Kueue path's
        return disruptions.Disrupted(
            pod=pod, trigger=trigger, lineage=owner, policy=decision.policy
        )

    def _queue_object(self, pod: core.Pod, owner: checkpoint.Lineage) -> str | None:
        """The queue-system object the pod belongs to: its Workload, else its PodGroup."""
        workloads = self.caches.workloads_of_owner(owner.owner_uid)
        if workloads:
            return workloads[0].name
        return pod.metadata.annotation(keys.VOLCANO_PODGROUP_ANNOTATION)

    async def reconcile_disruption(self, namespace: str, name: str) -> None:
        """Record the pod-level disruptions of the lineage whose annotation value is ``name``."""
        pods = [
            p
            for ns, pod_name in list(self.caches.pods_by_lineage.get(name, ()))
            if ns == namespace and (p := self.caches.pods.get(pod_name, ns)) is not None
        ]
        if not pods:
            return
        try:
            owner = lineage.parse_annotation(name)
        except model_errors.InvalidObject:
            return
        async with self._lineage_lock(owner):
            taken = self._taken(owner)
            found = [d for p in pods if (d := self._disrupted(p, taken=taken)) is not None]
            if not found:
                return
            groups = disruptions.group(
                found,
                checkpoints=self.caches.checkpoints_of_owner(owner.owner_uid),
                window=self.config.settle_seconds,
            )
            for group in groups:
                if group.existing is not None:
                    await self._join(group.existing, group.pods)
                    continue
                members = reconciling.members_of(group.pods, owner=group.lineage)
                await self._create(
                    disruptions.eviction(group),
                    members=members,
                    workload=self._queue_object(group.pods[0], group.lineage),
                )

    async def _join(self, cp: checkpoint.Checkpoint, pods: list[core.Pod]) -> None:
        members = disruptions.added_members(cp, pods)
        if len(members) == len(cp.spec.members):
            return
        raw = await acting.write_members(self.kube, cp, members)
        joined = cp.model_copy(update={"spec": cp.spec.model_copy(update={"members": members})})
        await self._visible(joined, raw)
        added = ", ".join(f"{m.pod_name}@{m.node or '?'}" for m in members[len(cp.spec.members) :])
        log.info(
            "checkpoint joined checkpoint=%s/%s added=%s", cp.metadata.namespace, cp.name, added
        )
        event = f"Checkpoint {cp.name}: later victim(s) of the same eviction joined: {added}"
        await self._event(
            {**raw, "apiVersion": keys.API_VERSION, "kind": "Checkpoint"},
            keys.EVENT_CHECKPOINT_STARTED,
            event,
        )

    async def _answer_check(self, workload: kueue.Workload, decision: reconciling.OptIn) -> None:
        assert self.caches.admission_checks is not None
        names = [ac.name for ac in self.caches.admission_checks.items() if admission_check.ours(ac)]
        states = admission_check.our_check_states(workload, check_names=names)
        if not states or admission_check.ready_to_answer(workload) is not None:
            return
        owner = reconciling.workload_lineage(workload)
        for state in states:
            if state.state != admission_check.PENDING:
                continue
            answer = admission_check.answer(
                workload,
                owner=owner,
                policy=decision.policy if decision.opted_in else None,
                checkpoints=self.caches.checkpoints_of_owner(owner.owner_uid) if owner else [],
                nodes=self.caches.gpu_nodes.items(),
                flavor=self.caches.flavor,
            )
            body = admission_check.apply_body(
                workload, check_name=state.name, result=answer, current=state, now=self.clock()
            )
            if body is not None:
                log.info(
                    "admission check workload=%s/%s check=%s state=%s: %s",
                    workload.namespace,
                    workload.name,
                    state.name,
                    answer.state,
                    answer.message,
                )
                await acting.apply_status(self.applier, resources.WORKLOADS, body)

    # -- Checkpoint ----------------------------------------------------------------------------

    async def reconcile_checkpoint(self, namespace: str, name: str) -> None:
        cp = self.caches.checkpoints.get(name, namespace)
        if cp is None or cp.status.phase is checkpoint.Phase.EXPIRED:
            return
        policy = self._policy_of(cp)
        pods = [p for m in cp.spec.members if (p := self.caches.pod_by_uid(m.pod_uid))]
        if not cp.status.phase.terminal:
            new = reconciling.next_status(
                cp,
                pods,
                policy=policy,
                now=self.clock(),
                margin=self.config.finalizer_margin_seconds,
                pending_timeout=self.config.pending_timeout_seconds,
            )
            if reconciling.status_changed(cp.status, new):
                raw = await acting.write_status(self.kube, cp, new)
                event = reconciling.transition_event(cp, new)
                if new.phase is not cp.status.phase:
                    self.metrics.transitions.add(1, {"phase": new.phase.value})
                    log.info(
                        "checkpoint phase checkpoint=%s/%s phase=%s message=%s",
                        namespace,
                        name,
                        new.phase.value,
                        new.message or "",
                    )
                cp = checkpoint.load(raw)
                if event is not None:
                    await self._tell(cp, raw, event)
            self._requeue_at(
                (CHECKPOINT, namespace, name),
                reconciling.next_deadline(
                    cp,
                    pods,
                    margin=self.config.finalizer_margin_seconds,
                    pending_timeout=self.config.pending_timeout_seconds,
                ),
            )
        if cp.status.phase.terminal:
            await self._catalog(cp, policy)

    async def _catalog(
        self, cp: checkpoint.Checkpoint, policy: policy_model.CheckpointPolicy
    ) -> None:
        """Retention of the lineage and expiry when the owner Job finished or is gone."""
        owner = cp.spec.lineage
        lineage_cps = self.caches.checkpoints_of_owner(owner.owner_uid)
        in_use = {
            name
            for pod in self.caches.lineage_pods(owner)
            if not reconciling.is_terminal(pod)
            and (name := pod.metadata.annotation(keys.RESTORE_FROM_ANNOTATION))
        }
        doomed = {
            d.name: f"retention: more than {policy.spec.retention.keep} newer checkpoints kept"
            for d in catalog.retention(lineage_cps, policy=policy, in_use=in_use)
        }
        if owner.owner_kind == "Job" and self.caches.jobs.synced:
            job = self.caches.jobs.get(owner.owner_name, owner.namespace)
            live = {job.metadata.uid} if job is not None and job.metadata.uid else set()
            finished = live if job is not None and reconciling.job_finished(job) else set()
            for gone in catalog.expire_on_owner_gone(
                [cp], policy=policy, live_owner_uids=live, finished_owner_uids=finished
            ):
                doomed.setdefault(
                    gone.name,
                    f"owner Job {owner.owner_name} " + ("finished" if finished else "was deleted"),
                )
        for cp_name, reason in doomed.items():
            target = self.caches.checkpoints.get(cp_name, owner.namespace)
            if target is None or target.status.phase is checkpoint.Phase.EXPIRED:
                continue
            await self._expire(target, reason)

    async def _expire(self, cp: checkpoint.Checkpoint, reason: str) -> None:
        status = cp.status.model_copy(
            update={"phase": checkpoint.Phase.EXPIRED, "message": f"expired: {reason}"}
        )
        try:
            raw = await acting.write_status(self.kube, cp, status)
        except errors.Conflict:
            # Changed since our cache saw it (often: another worker expired it first). Its own
            # watch event requeues it, and that reconcile decides again from the new state.
            log.debug("expiry of %s/%s raced a change; re-deciding", cp.metadata.namespace, cp.name)
            return
        self.metrics.transitions.add(1, {"phase": checkpoint.Phase.EXPIRED.value})
        log.info(
            "checkpoint expired checkpoint=%s/%s reason=%s", cp.metadata.namespace, cp.name, reason
        )
        await self._event(raw, keys.EVENT_CHECKPOINT_EXPIRED, f"{cp.name} expired: {reason}")

    # -- Pod -----------------------------------------------------------------------------------

    def _disruption_pending(self, pod: core.Pod) -> bool:
        """A pod-path victim not yet in any Checkpoint: its finalizer waits for that record."""
        if not disruptions.has_disruption(pod) or self.caches.checkpoints_of_pod(
            pod.metadata.uid or ""
        ):
            return False
        return self._disrupted(pod, taken=set()) is not None

    def _eviction_pending(self, pod: core.Pod) -> bool:
        owner = _owner_uid(pod.metadata.annotation(keys.LINEAGE_ANNOTATION))
        for workload in self.caches.workloads_of_owner(owner or ""):
            try:
                found = reconciling.eviction(workload, decision=self._opt_in(workload))
            except model_errors.InvalidObject:
                continue
            if (
                found is not None
                and self.caches.checkpoints.get(found.name, workload.namespace) is None
                and reconciling.is_member_candidate(pod, owner=found.lineage)
            ):
                return True
        return False

    async def reconcile_pod(self, namespace: str, name: str) -> None:
        pod = self.caches.pods.get(name, namespace)
        if pod is None:
            return
        if (failure := reconciling.failed_restore(pod)) is not None:
            await self._count_restore_failure(pod, *failure)
            return  # the annotation write brings the pod back with a new version
        decision = reconciling.finalizer(
            pod,
            checkpoints=self.caches.checkpoints_of_pod(pod.metadata.uid or ""),
            eviction_pending=self._eviction_pending(pod) or self._disruption_pending(pod),
            now=self.clock(),
            margin=self.config.finalizer_margin_seconds,
            settle=self.config.settle_seconds,
        )
        if decision.release:
            if await acting.remove_finalizer(self.kube, pod):
                why = decision.reason.split(":")[0].split(" in ")[0]
                self.metrics.finalizers.add(1, {"reason": why})
                log.info("finalizer removed pod=%s/%s: %s", namespace, name, decision.reason)
        else:
            self._requeue_at((POD, namespace, name), decision.recheck_at)

    async def _count_restore_failure(self, pod: core.Pod, cp_name: str, reason: str) -> None:
        # Mark first, count second: a crash in between loses one count (one more restore
        # attempt), never counts one failure twice (an early fallback to an older checkpoint).
        await acting.mark_restore_counted(self.kube, pod, cp_name)
        count = await acting.count_failed_restore(
            self.kube, namespace=pod.namespace, name=cp_name, reason=reason
        )
        if count is None:
            return
        cp = self.caches.checkpoints.get(cp_name, pod.namespace)
        message = f"restore of pod {pod.name} from {cp_name} failed ({count} so far): {reason}"
        if cp is not None:
            raw = {**base.to_dict(cp), "apiVersion": keys.API_VERSION, "kind": "Checkpoint"}
            await self._event(raw, keys.EVENT_RESTORE_FAILED, message, "Warning")
            job = self._job_dict(cp.spec.lineage)
            await self._event(job, keys.EVENT_RESTORE_FAILED, message, "Warning")

    # -- Job -----------------------------------------------------------------------------------

    async def reconcile_job(self, namespace: str, name: str) -> None:
        job = self.caches.jobs.get(name, namespace)
        if job is None or not job.metadata.uid or job.metadata.uid in self._warned_jobs:
            return
        workloads = self.caches.workloads_of_owner(job.metadata.uid)
        if not any(self._opt_in(wl).opted_in for wl in workloads):
            return
        if job.metadata.annotation(keys.CHECKPOINT_OPT_OUT_ANNOTATION) == "false":
            return
        risk = reconciling.job_risk(job)
        self._warned_jobs.add(job.metadata.uid)
        if risk is not None:
            raw = {**base.to_dict(job), "apiVersion": "batch/v1", "kind": "Job"}
            await self._event(raw, keys.EVENT_UNSAFE_JOB, risk, "Warning")

    # -- AdmissionCheck ------------------------------------------------------------------------

    async def reconcile_admission_check(self, namespace: str, name: str) -> None:
        del namespace  # cluster-scoped
        if self.caches.admission_checks is None:
            return
        check = self.caches.admission_checks.get(name)
        if check is None or not admission_check.ours(check):
            return
        body = admission_check.active_body(check, now=self.clock())
        if body is not None:
            await acting.apply_status(self.applier, resources.ADMISSION_CHECKS, body)
            log.info("admission check %s marked Active", name)
