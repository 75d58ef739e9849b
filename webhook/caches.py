"""The webhook's in-memory view of the cluster: one shared watch cache per resource it reads.

Implements :class:`webhook.state.State` over :class:`kontinue.kube.watching.WatchCache`, so the
admission path reads no other API (docs/webhook.md; the one live read, of a plumbed pod's
lineage's Checkpoints at its CREATE, is webhook/freshness.py). What is watched, and why:

* Kueue ClusterQueues and LocalQueues, Volcano Queues and PodGroups: opt-in;
* CheckpointPolicies: the policy a queue names;
* Checkpoints: the restore decision, indexed by lineage (namespace + owner UID) through a
  subscription, so a pod CREATE reads only its own lineage's few checkpoints;
* Nodes carrying the GPU Feature Discovery product label only: the catalog asks whether some
  node can run a checkpoint's GPU fingerprint; nodes without GPU labels can never satisfy that.
* PersistentVolumeClaims, by name only: an opted-in pod whose namespace lacks its policy's
  claim is left untouched (webhook/claims.py). Each claim is kept as its name and namespace,
  pruned and packed (:class:`kontinue.models.core.ClaimName`), and only asked whether it is
  there: about 200 bytes per claim in the store, 1.8 MiB for 10,000 bound claims, against
  2.5 KB each unpruned (benchmarks/bench_claim_cache.py, docs/benchmarks.md).

Pods and Jobs are *not* cached: the admission request carries the object.

Which queue systems to watch is configured (``queue_systems``): a watch of a CRD that is not
installed never syncs, and readiness waits for every cache. Until all are synced the webhook is
not ready, so the Service sends it nothing it would answer from a half-filled cache.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

from opentelemetry import metrics

from kontinue import keys
from kontinue.kube import api as kube_api
from kontinue.kube import cacheset, lookups, resources, watching
from kontinue.models import checkpoint as checkpoint_model
from kontinue.models import core, kueue, pruning, volcano
from kontinue.models import policy as policy_model

KUEUE = "kueue"
VOLCANO = "volcano"
LineageKey = tuple[str, str]


def _lineage_key(lineage: checkpoint_model.Lineage) -> LineageKey:
    return (lineage.namespace, lineage.owner_uid)


class Caches(lookups.QueueLookups):
    """Live :class:`~webhook.state.State`. Start with :meth:`running`; check :attr:`synced`."""

    def __init__(
        self,
        api: kube_api.Api,
        *,
        queue_systems: Sequence[str] = (KUEUE, VOLCANO),
        meter: metrics.Meter | None = None,
        options: cacheset.CacheOptions | None = None,
    ) -> None:
        self.cache_set = cacheset.CacheSet(api, options=options, meter=meter)
        cache = self.cache_set.add
        self.policies = cache(resources.CHECKPOINT_POLICIES, policy_model.CheckpointPolicy)
        self.checkpoints = cache(resources.CHECKPOINTS, checkpoint_model.Checkpoint)
        self.gpu_nodes = cache(resources.NODES, core.Node, label_selector=keys.GPU_PRODUCT_LABEL)
        self.claims = cache(
            resources.PVCS,
            core.ClaimName,
            transform=functools.partial(pruning.prune, core.ClaimName),
            packed=True,
        )
        self.cluster_queues: watching.WatchCache[kueue.ClusterQueue] | None = None
        self.local_queues: watching.WatchCache[kueue.LocalQueue] | None = None
        self.volcano_queues: watching.WatchCache[volcano.Queue] | None = None
        self.pod_groups: watching.WatchCache[volcano.PodGroup] | None = None
        unknown = set(queue_systems) - {KUEUE, VOLCANO}
        if unknown:
            raise ValueError(f"unknown queue systems {sorted(unknown)}; use {KUEUE}, {VOLCANO}")
        if KUEUE in queue_systems:
            self.cluster_queues = cache(resources.CLUSTER_QUEUES, kueue.ClusterQueue)
            self.local_queues = cache(resources.LOCAL_QUEUES, kueue.LocalQueue)
        if VOLCANO in queue_systems:
            self.volcano_queues = cache(resources.VOLCANO_QUEUES, volcano.Queue)
            self.pod_groups = cache(resources.PODGROUPS, volcano.PodGroup)
        self._by_lineage: dict[LineageKey, dict[tuple[str, str], checkpoint_model.Checkpoint]] = {}
        self.checkpoints.subscribe(self._index)

    def _index(self, event: watching.Event[checkpoint_model.Checkpoint]) -> None:
        if event.old is not None and event.old.spec.lineage != event.obj.spec.lineage:
            self._by_lineage.get(_lineage_key(event.old.spec.lineage), {}).pop(
                (event.old.metadata.namespace or "", event.old.name), None
            )
        bucket = self._by_lineage.setdefault(_lineage_key(event.obj.spec.lineage), {})
        key = (event.obj.metadata.namespace or "", event.obj.name)
        if event.type == "DELETED":
            bucket.pop(key, None)
        else:
            bucket[key] = event.obj

    # -- State (queues, policies, Checkpoints by name: kontinue/kube/lookups.py) ---------------

    def checkpoints_of(
        self, lineage: checkpoint_model.Lineage
    ) -> Sequence[checkpoint_model.Checkpoint]:
        return [
            c
            for c in self._by_lineage.get(_lineage_key(lineage), {}).values()
            # the object's own namespace, not only the one it claims (State.checkpoints_of)
            if c.metadata.namespace == lineage.namespace and c.spec.lineage == lineage
        ]

    def nodes(self) -> Sequence[core.Node]:
        return self.gpu_nodes.items()

    def claim_exists(self, namespace: str, name: str) -> bool | None:
        return self.claims.has(name, namespace) if self.claims.synced else None
