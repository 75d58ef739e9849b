"""Event -> keys: watch callbacks map a change to the work-queue keys it can affect.

Callbacks run synchronously inside the watch caches: they read the caches' indexes and ``add``
keys, never do I/O and never decide anything (the handlers re-read and decide, level-triggered).
Keys are only queued while this replica leads (:attr:`Router.leading`); a new leader starts with
a sweep of every key instead (:meth:`Router.every_key`, the queue's sweep source, added in
batches as the queue drains: :mod:`queue_bridge.queueing`).

Two small indexes of the pods, kept from the pod events (the pod at hand is parsed anyway),
spare re-reading pods: the keys of the pods that matter to the Pod handler (:func:`pod_matters`)
and, by lineage, the pods with a disruption. The sweep and a Workload's or Checkpoint's event
read them instead of parsing every pod, or the lineage's pods, again (the pod cache keeps its
objects packed: kontinue/kube/store.py).

A queue or policy change re-sweeps only what it can change: the Workloads whose opt-in goes
through it (:func:`workloads_affected`), and only when the change is one opt-in reads (labels,
spec, creation, deletion) — not the frequent status writes of Kueue's queues.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

from kontinue import keys, lineage
from kontinue.kube import watching
from kontinue.models import checkpoint, core, kueue, volcano
from kontinue.models import policy as policy_model
from queue_bridge import caches as caches_module
from queue_bridge import deciding, disruptions, kinds, queueing, reconciling


def pod_matters(pod: core.Pod) -> bool:
    """A pod the Pod handler has anything to do for: it holds our finalizer or restores."""
    return reconciling.has_finalizer(pod) or bool(
        pod.metadata.annotation(keys.RESTORE_FROM_ANNOTATION)
    )


def opt_in_changed(event: watching.Event[Any]) -> bool:
    """Whether a queue or policy event can change an opt-in decision (not a status write)."""
    old, new = event.old, event.obj
    return (
        old is None
        or event.type == "DELETED"
        or old.metadata.labels != new.metadata.labels
        or old.metadata.generation != new.metadata.generation
    )


def _policy_label(queue: kueue.ClusterQueue) -> str:
    return queue.metadata.label(keys.POLICY_LABEL) or keys.DEFAULT_POLICY_NAME


def workloads_affected(
    workloads: Iterable[kueue.Workload],
    local_queues: Iterable[kueue.LocalQueue],
    cluster_queues: Iterable[kueue.ClusterQueue],
    *,
    changed: kueue.ClusterQueue | kueue.LocalQueue | policy_model.CheckpointPolicy,
) -> list[kueue.Workload]:
    """The Workloads whose opt-in (:func:`queue_bridge.reconciling.opt_in`) reads ``changed``.

    A Workload reads its ClusterQueue (the admitted one, else its LocalQueue's), and through it
    the policy the ClusterQueue's ``kontinue.dev/policy`` label names (``default`` when unset).
    ``cluster_queues`` and ``local_queues`` are the cached ones, ``changed`` included (or, for a
    deletion, not).
    """
    lq_to_cq = {(q.namespace, q.name): q.spec.cluster_queue for q in local_queues}
    if isinstance(changed, kueue.LocalQueue):
        name = (changed.namespace, changed.name)
        return [
            w
            for w in workloads
            if (w.status is None or w.status.admission is None)
            and (w.namespace, w.spec.queue_name) == name
        ]
    if isinstance(changed, kueue.ClusterQueue):
        names = {changed.name}
    else:
        names = {q.name for q in cluster_queues if _policy_label(q) == changed.name}
        if not names:
            return []

    def cluster_queue(w: kueue.Workload) -> str | None:
        if w.status is not None and w.status.admission is not None:
            return w.status.admission.cluster_queue
        return lq_to_cq.get((w.namespace, w.spec.queue_name or ""))

    return [w for w in workloads if cluster_queue(w) in names]


class Router:
    """Subscribes to the caches and turns their events into keys of ``queue``."""

    def __init__(self, caches: caches_module.Caches, queue: queueing.WorkQueue[kinds.Key]) -> None:
        self.caches = caches
        self.queue = queue
        self.leading = False
        # pod indexes (module doc): pod keys that matter; lineage -> pods with a disruption
        self._matter: set[tuple[str, str]] = set()
        self._disrupted: dict[str, set[tuple[str, str]]] = {}
        queue.set_sweep(self.every_key)
        c = caches
        c.workloads.subscribe(self._on_workload)
        c.checkpoints.subscribe(self._on_checkpoint)
        c.pods.subscribe(self._on_pod)
        c.jobs.subscribe(self._on_job)
        for cache in (c.cluster_queues, c.local_queues, c.policies):
            cache.subscribe(self._on_workload_opt_in_source)
        # The pod path re-decides on an opt-in change only (labels, spec), not on the frequent
        # status writes of queues; a PodGroup is read only for its queue, which the pod's own
        # queue annotation also names, so PodGroup changes need no sweep.
        opt_in_sources = (c.cluster_queues, c.local_queues, c.policies, c.volcano_queues)
        for queues in opt_in_sources:
            if queues is not None:
                queues.subscribe(self._on_opt_in_source)
        if c.vcjobs is not None:
            c.vcjobs.subscribe(self._on_vcjob)
        if c.admission_checks is not None:
            c.admission_checks.subscribe(
                lambda e: self.add(kinds.key(kinds.ADMISSION_CHECK, e.obj))
            )

    def add(self, key: kinds.Key) -> None:
        if self.leading:
            self.queue.add(key)

    def keys_of(self, kind: str) -> Iterator[kinds.Key]:
        """Every key of ``kind`` the caches hold (pods: only those that matter; disruptions: one
        per disrupted pod, de-duplicated by the queue)."""
        if kind == kinds.DISRUPTION:
            disrupted = sorted(
                (key, annotation) for annotation, held in self._disrupted.items() for key in held
            )
            for (namespace, _), annotation in disrupted:
                yield (kinds.DISRUPTION, namespace, annotation)
            return
        if kind == kinds.POD:
            for namespace, name in sorted(self._matter):
                yield (kinds.POD, namespace, name)
            return
        cache: dict[str, watching.WatchCache[Any] | None] = {
            kinds.WORKLOAD: self.caches.workloads,
            kinds.CHECKPOINT: self.caches.checkpoints,
            kinds.POD: self.caches.pods,
            kinds.JOB: self.caches.jobs,
            kinds.VOLCANO_JOB: self.caches.vcjobs,
            kinds.ADMISSION_CHECK: self.caches.admission_checks,
        }
        found = cache[kind]
        for obj in found.each() if found is not None else []:
            yield kinds.key(kind, obj)

    def every_key(self) -> Iterator[kinds.Key]:
        """Every key of every kind, in :data:`queue_bridge.kinds.SWEEP_ORDER` (the queue's sweep
        source: nothing unless leading)."""
        for kind in kinds.SWEEP_ORDER:
            if not self.leading:
                return
            yield from self.keys_of(kind)

    def sweep(self, kind: str) -> None:
        """Queue every key of ``kind`` now (while leading)."""
        if self.leading:
            for key in self.keys_of(kind):
                self.queue.add(key)

    def _on_workload_opt_in_source(self, event: watching.Event[Any]) -> None:
        if not self.leading or not opt_in_changed(event):
            return
        c = self.caches
        for workload in workloads_affected(
            c.workloads.items(), c.local_queues.items(), c.cluster_queues.items(), changed=event.obj
        ):
            self.queue.add(kinds.key(kinds.WORKLOAD, workload))

    def _on_opt_in_source(self, event: watching.Event[Any]) -> None:
        if opt_in_changed(event):
            self.sweep(kinds.DISRUPTION)
            self.sweep(kinds.VOLCANO_JOB)

    def _on_vcjob(self, event: watching.Event[volcano.VolcanoJob]) -> None:
        if event.type != "DELETED":
            self.add(kinds.key(kinds.VOLCANO_JOB, event.obj))

    def _add_disruption(self, pod: core.Pod) -> None:
        if disruptions.has_disruption(pod):
            annotation = pod.metadata.annotation(keys.LINEAGE_ANNOTATION) or ""
            self.add((kinds.DISRUPTION, pod.namespace, annotation))

    def _add_lineage_disruptions(self, owner: checkpoint.Lineage | None) -> None:
        if owner is None:
            return
        annotation = lineage.annotation_value(owner)
        for namespace, _ in self._disrupted.get(annotation, ()):
            self.add((kinds.DISRUPTION, namespace, annotation))

    def _index_pod(self, event: watching.Event[core.Pod]) -> None:
        """Keep the pod indexes (module doc) current with ``event``."""
        pod = event.obj
        key = (pod.namespace, pod.name)
        for seen in (event.old, pod):
            if seen is None:
                continue
            annotation = seen.metadata.annotation(keys.LINEAGE_ANNOTATION) or ""
            if (held := self._disrupted.get(annotation)) is not None:
                held.discard(key)
                if not held:
                    del self._disrupted[annotation]
        self._matter.discard(key)
        if event.type == "DELETED":
            return
        if pod_matters(pod):
            self._matter.add(key)
        if disruptions.has_disruption(pod):
            annotation = pod.metadata.annotation(keys.LINEAGE_ANNOTATION) or ""
            self._disrupted.setdefault(annotation, set()).add(key)

    def _on_workload(self, event: watching.Event[kueue.Workload]) -> None:
        if not self.leading:  # nothing is queued (add); the new leader sweeps
            return
        workload = event.obj
        self.add(kinds.key(kinds.WORKLOAD, workload))
        self._add_lineage_disruptions(reconciling.workload_lineage(workload))
        ref = workload.metadata.controller_ref()
        if ref is not None and ref.kind == "Job" and ref.api_version == "batch/v1":
            self.add((kinds.JOB, workload.namespace, ref.name))

    def _on_checkpoint(self, event: watching.Event[checkpoint.Checkpoint]) -> None:
        if not self.leading:
            return
        cp = event.obj
        self.add(kinds.key(kinds.CHECKPOINT, cp))
        for member in cp.spec.members:
            pod = self.caches.pod_by_uid(member.pod_uid)
            if pod is not None:
                self.add(kinds.key(kinds.POD, pod))
        for ns, name in self.caches.workloads_by_owner.get(cp.spec.lineage.owner_uid, ()):
            self.add((kinds.WORKLOAD, ns, name))
        self._add_lineage_disruptions(cp.spec.lineage)
        if cp.status.phase.terminal or event.type == "DELETED":
            for pod in self.caches.lineage_pods(cp.spec.lineage):
                if deciding.gated(pod):  # waiting for this set's verdict
                    self.add(kinds.key(kinds.POD, pod))

    def _on_pod(self, event: watching.Event[core.Pod]) -> None:
        self._index_pod(event)
        if not self.leading:
            return
        pod = event.obj
        if event.type != "DELETED" and pod_matters(pod):
            self.add(kinds.key(kinds.POD, pod))
        for ns, name in self.caches.checkpoints_by_pod.get(pod.metadata.uid or "", ()):
            self.add((kinds.CHECKPOINT, ns, name))
        owner = deciding.owner_uid(pod.metadata.annotation(keys.LINEAGE_ANNOTATION))
        for ns, name in self.caches.workloads_by_owner.get(owner or "", ()):
            self.add((kinds.WORKLOAD, ns, name))
        if event.type != "DELETED":
            self._add_disruption(pod)

    def _on_job(self, event: watching.Event[core.Job]) -> None:
        if not self.leading:
            return
        job = event.obj
        if event.type != "DELETED":
            self.add(kinds.key(kinds.JOB, job))
        for ns, name in self.caches.checkpoints_by_owner.get(job.metadata.uid or "", ()):
            self.add((kinds.CHECKPOINT, ns, name))
