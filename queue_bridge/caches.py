"""The bridge's view of the cluster: one watch cache per resource it reads, plus indexes.

The indexes (pods by UID and by lineage, Checkpoints by member pod and by owner, Workloads by
owner) are kept by synchronous cache subscriptions, never by I/O. :class:`Caches` answers the
read-only :class:`queue_bridge.state.State` the pure decisions in :mod:`queue_bridge.deciding`
take.
"""

from __future__ import annotations

import collections
import functools

import pydantic
from opentelemetry import metrics

from kontinue import keys, lineage
from kontinue.kube import api as kube_api
from kontinue.kube import cacheset, lookups, resources, watching
from kontinue.models import checkpoint as checkpoint_model
from kontinue.models import core, kueue, pruning, volcano
from kontinue.models import policy as policy_model
from queue_bridge import settings as settings_module


def _slim(model: type[pydantic.BaseModel]) -> watching.Transform:
    """The cache transform keeping the fields ``model`` names (:mod:`kontinue.models.pruning`)."""
    return functools.partial(pruning.prune, model)


class Caches(lookups.QueueLookups):
    """The bridge's view of the cluster: one watch cache per resource it reads, plus indexes."""

    def __init__(
        self,
        kube: kube_api.Api,
        *,
        admission_check: bool,
        queue_systems: tuple[str, ...] = (settings_module.KUEUE,),
        meter: metrics.Meter | None = None,
        options: cacheset.CacheOptions | None = None,
    ) -> None:
        self.cache_set = cacheset.CacheSet(kube, options=options, meter=meter)
        cache = self.cache_set.add
        # The three big caches keep slim, packed objects (kontinue/kube/store.py, "Memory"):
        # only the fields the models name, as compact JSON parsed when read. The pod watch
        # selects the pods the webhook plumbed (kontinue.dev/plumbed); pods plumbed before the
        # label existed are labelled at start-up (queue_bridge/adoption.py).
        self.workloads = cache(
            resources.WORKLOADS, kueue.Workload, transform=_slim(kueue.Workload), packed=True
        )
        # always made (served empty without Kueue): narrower than QueueLookups' optional ones
        self.cluster_queues: watching.WatchCache[kueue.ClusterQueue] = cache(
            resources.CLUSTER_QUEUES, kueue.ClusterQueue
        )
        self.local_queues: watching.WatchCache[kueue.LocalQueue] = cache(
            resources.LOCAL_QUEUES, kueue.LocalQueue
        )
        self.policies = cache(resources.CHECKPOINT_POLICIES, policy_model.CheckpointPolicy)
        self.checkpoints = cache(resources.CHECKPOINTS, checkpoint_model.Checkpoint)
        self.pods = cache(
            resources.PODS,
            core.Pod,
            label_selector={keys.PLUMBED_LABEL: keys.PLUMBED_VALUE},
            transform=_slim(core.Pod),
            packed=True,
        )
        self.jobs = cache(resources.JOBS, core.Job, transform=_slim(core.Job), packed=True)
        self.gpu_nodes = cache(resources.NODES, core.Node, label_selector=keys.GPU_PRODUCT_LABEL)
        self.admission_checks: watching.WatchCache[kueue.AdmissionCheck] | None = None
        self.flavors: watching.WatchCache[kueue.ResourceFlavor] | None = None
        # Kueue's caches, like Volcano's, only where Kueue is installed (the volcano overlay):
        # without it they stand empty and synced, and are never run.
        self.kueue = settings_module.KUEUE in queue_systems
        if not self.kueue:
            for absent in (self.workloads, self.cluster_queues, self.local_queues):
                absent.serve_empty()
                self.cache_set.all.remove(absent)
        if admission_check and self.kueue:
            self.admission_checks = cache(resources.ADMISSION_CHECKS, kueue.AdmissionCheck)
            self.flavors = cache(resources.RESOURCE_FLAVORS, kueue.ResourceFlavor)
        # Only where Volcano is installed: a cache of a missing CRD never syncs (readiness).
        self.volcano_queues: watching.WatchCache[volcano.Queue] | None = None
        self.pod_groups: watching.WatchCache[volcano.PodGroup] | None = None
        self.vcjobs: watching.WatchCache[volcano.VolcanoJob] | None = None
        if settings_module.VOLCANO in queue_systems:
            self.volcano_queues = cache(resources.VOLCANO_QUEUES, volcano.Queue)
            self.pod_groups = cache(resources.PODGROUPS, volcano.PodGroup)
            self.vcjobs = cache(resources.VOLCANO_JOBS, volcano.VolcanoJob)

        # indexes, kept by subscriptions (synchronous, no I/O)
        self.pods_by_uid: dict[str, tuple[str, str]] = {}
        self.pods_by_lineage: dict[str, set[tuple[str, str]]] = collections.defaultdict(set)
        self.checkpoints_by_pod: dict[str, set[tuple[str, str]]] = collections.defaultdict(set)
        self.checkpoints_by_owner: dict[str, set[tuple[str, str]]] = collections.defaultdict(set)
        self.workloads_by_owner: dict[str, set[tuple[str, str]]] = collections.defaultdict(set)
        self.pods.subscribe(self._index_pod)
        self.checkpoints.subscribe(self._index_checkpoint)
        self.workloads.subscribe(self._index_workload)

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

    def _index_checkpoint(self, event: watching.Event[checkpoint_model.Checkpoint]) -> None:
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

    # -- lookups (queues, policies, Checkpoints by name: kontinue/kube/lookups.py) -------------

    def pod_by_uid(self, uid: str) -> core.Pod | None:
        key = self.pods_by_uid.get(uid)
        return self.pods.get(key[1], key[0]) if key is not None else None

    def lineage_pods(self, owner: checkpoint_model.Lineage) -> list[core.Pod]:
        found = (
            self.pods.get(name, ns)
            for ns, name in self.pods_by_lineage.get(lineage.annotation_value(owner), ())
        )
        return [p for p in found if p is not None]

    def checkpoints_of_pod(self, uid: str) -> list[checkpoint_model.Checkpoint]:
        found = (self.checkpoints.get(n, ns) for ns, n in self.checkpoints_by_pod.get(uid, ()))
        return [cp for cp in found if cp is not None]

    def checkpoints_of_owner(self, uid: str) -> list[checkpoint_model.Checkpoint]:
        found = (self.checkpoints.get(n, ns) for ns, n in self.checkpoints_by_owner.get(uid, ()))
        return [cp for cp in found if cp is not None]

    def workloads_of_owner(self, uid: str) -> list[kueue.Workload]:
        found = (self.workloads.get(n, ns) for ns, n in self.workloads_by_owner.get(uid, ()))
        return [wl for wl in found if wl is not None]

    def flavor(self, name: str) -> kueue.ResourceFlavor | None:
        return self.flavors.get(name) if self.flavors is not None else None

    def pod(self, namespace: str, name: str) -> core.Pod | None:
        return self.pods.get(name, namespace)

    def pods_of_lineage(self, namespace: str, annotation: str) -> list[core.Pod]:
        """The cached pods in ``namespace`` whose ``kontinue.dev/lineage`` is ``annotation``."""
        found = (
            self.pods.get(name, ns)
            for ns, name in list(self.pods_by_lineage.get(annotation, ()))
            if ns == namespace
        )
        return [p for p in found if p is not None]

    def workload(self, namespace: str, name: str) -> kueue.Workload | None:
        return self.workloads.get(name, namespace)

    def job(self, namespace: str, name: str) -> core.Job | None:
        return self.jobs.get(name, namespace)

    @property
    def jobs_synced(self) -> bool:
        return self.jobs.synced

    def gpu_node(self, name: str) -> core.Node | None:
        return self.gpu_nodes.get(name)
