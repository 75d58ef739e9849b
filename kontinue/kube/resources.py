"""Every Kubernetes resource Kontinue reads or writes, with its REST path.

A ``Resource`` is a (group, version, plural) triple plus its scope; ``path()`` builds the URL the
apiserver serves it at. Keeping them in one table is what lets one generic client read Pods,
Jobs, Kueue Workloads and our Checkpoints alike, and lets RBAC be reviewed against one list.
"""

from __future__ import annotations

import dataclasses
from urllib.parse import quote

from kontinue import keys


@dataclasses.dataclass(frozen=True)
class Resource:
    group: str
    version: str
    plural: str
    kind: str
    namespaced: bool = True

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    def path(
        self, *, namespace: str | None = None, name: str | None = None, subresource: str = ""
    ) -> str:
        """``/api/v1/namespaces/ns/pods/name/status`` and its cluster-wide and group forms."""
        base = f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"
        if self.namespaced and namespace:
            base += f"/namespaces/{quote(namespace, safe='')}"
        base += f"/{self.plural}"
        if name is not None:
            base += f"/{quote(name, safe='')}"
            if subresource:
                base += f"/{subresource}"
        return base

    def __str__(self) -> str:
        return f"{self.plural}.{self.group}" if self.group else self.plural


PODS = Resource("", "v1", "pods", "Pod")
NODES = Resource("", "v1", "nodes", "Node", namespaced=False)
NAMESPACES = Resource("", "v1", "namespaces", "Namespace", namespaced=False)
EVENTS = Resource("", "v1", "events", "Event")
SECRETS = Resource("", "v1", "secrets", "Secret")
SERVICES = Resource("", "v1", "services", "Service")
PVCS = Resource("", "v1", "persistentvolumeclaims", "PersistentVolumeClaim")
JOBS = Resource("batch", "v1", "jobs", "Job")
LEASES = Resource("coordination.k8s.io", "v1", "leases", "Lease")
PRIORITY_CLASSES = Resource(
    "scheduling.k8s.io", "v1", "priorityclasses", "PriorityClass", namespaced=False
)
MUTATING_WEBHOOKS = Resource(
    "admissionregistration.k8s.io",
    "v1",
    "mutatingwebhookconfigurations",
    "MutatingWebhookConfiguration",
    namespaced=False,
)
VALIDATING_WEBHOOKS = Resource(
    "admissionregistration.k8s.io",
    "v1",
    "validatingwebhookconfigurations",
    "ValidatingWebhookConfiguration",
    namespaced=False,
)
CRDS = Resource(
    "apiextensions.k8s.io",
    "v1",
    "customresourcedefinitions",
    "CustomResourceDefinition",
    namespaced=False,
)

CHECKPOINTS = Resource(keys.GROUP, keys.VERSION, "checkpoints", "Checkpoint")
CHECKPOINT_POLICIES = Resource(
    keys.GROUP, keys.VERSION, "checkpointpolicies", "CheckpointPolicy", namespaced=False
)

WORKLOADS = Resource(keys.KUEUE_GROUP, keys.KUEUE_VERSION, "workloads", "Workload")
LOCAL_QUEUES = Resource(keys.KUEUE_GROUP, keys.KUEUE_VERSION, "localqueues", "LocalQueue")
CLUSTER_QUEUES = Resource(
    keys.KUEUE_GROUP, keys.KUEUE_VERSION, "clusterqueues", "ClusterQueue", namespaced=False
)
ADMISSION_CHECKS = Resource(
    keys.KUEUE_GROUP, keys.KUEUE_VERSION, "admissionchecks", "AdmissionCheck", namespaced=False
)
RESOURCE_FLAVORS = Resource(
    keys.KUEUE_GROUP, keys.KUEUE_VERSION, "resourceflavors", "ResourceFlavor", namespaced=False
)

VOLCANO_QUEUES = Resource(
    keys.VOLCANO_SCHEDULING_GROUP, "v1beta1", "queues", "Queue", namespaced=False
)
PODGROUPS = Resource(keys.VOLCANO_SCHEDULING_GROUP, "v1beta1", "podgroups", "PodGroup")
VOLCANO_JOBS = Resource(keys.VOLCANO_BATCH_GROUP, "v1alpha1", "jobs", "Job")
