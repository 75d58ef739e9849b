"""The lookups both deployables' caches answer the same way: queues, policies, Checkpoints.

The webhook's :class:`webhook.caches.Caches` and the bridge's :class:`queue_bridge.caches.Caches`
each watch Kueue's and Volcano's queues (where installed), the CheckpointPolicies and the
Checkpoints; the opt-in rule (kontinue/optin.py ``Queues``) and the restore plan read them
through these methods. A queue system that is not installed has no cache (``None``), and its
lookups answer ``None``: nothing there opts in.
"""

from __future__ import annotations

from kontinue.kube import cacheset, watching
from kontinue.models import checkpoint as checkpoint_model
from kontinue.models import kueue, volcano
from kontinue.models import policy as policy_model


class QueueLookups(cacheset.Backed):
    """Mixed into a deployable's caches; the subclass makes the caches named here."""

    policies: watching.WatchCache[policy_model.CheckpointPolicy]
    checkpoints: watching.WatchCache[checkpoint_model.Checkpoint]
    cluster_queues: watching.WatchCache[kueue.ClusterQueue] | None
    local_queues: watching.WatchCache[kueue.LocalQueue] | None
    volcano_queues: watching.WatchCache[volcano.Queue] | None
    pod_groups: watching.WatchCache[volcano.PodGroup] | None

    def cluster_queue(self, name: str) -> kueue.ClusterQueue | None:
        return self.cluster_queues.get(name) if self.cluster_queues is not None else None

    def local_queue(self, namespace: str, name: str) -> kueue.LocalQueue | None:
        return self.local_queues.get(name, namespace) if self.local_queues is not None else None

    def volcano_queue(self, name: str) -> volcano.Queue | None:
        return self.volcano_queues.get(name) if self.volcano_queues is not None else None

    def pod_group(self, namespace: str, name: str) -> volcano.PodGroup | None:
        return self.pod_groups.get(name, namespace) if self.pod_groups is not None else None

    def policy(self, name: str) -> policy_model.CheckpointPolicy | None:
        return self.policies.get(name)

    def checkpoint(self, namespace: str, name: str) -> checkpoint_model.Checkpoint | None:
        return self.checkpoints.get(name, namespace)
