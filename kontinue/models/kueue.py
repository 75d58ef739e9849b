"""Kueue ``kueue.x-k8s.io/v1beta2`` objects Kontinue reads (apis/kueue/v1beta2/*_types.go).

v1beta2 is the storage version and the one Kueue's own controllers use; v1beta1 is deprecated
and, without Kueue's conversion webhook, not convertible. Kontinue reads v1beta2 only.
"""

from __future__ import annotations

from typing import Any

import pydantic

from kontinue import keys
from kontinue.models import base

API_VERSION = f"{keys.KUEUE_GROUP}/{keys.KUEUE_VERSION}"


class PodSet(base.UpstreamModel):
    name: str
    count: int
    template: dict[str, Any] = pydantic.Field(default_factory=dict)


class WorkloadSpec(base.UpstreamModel):
    pod_sets: list[PodSet] = pydantic.Field(default_factory=list)
    queue_name: str | None = None
    priority: int | None = None
    active: bool | None = None


class PodSetAssignment(base.UpstreamModel):
    name: str
    flavors: dict[str, str] | None = None
    count: int | None = None


class Admission(base.UpstreamModel):
    cluster_queue: str
    pod_set_assignments: list[PodSetAssignment] = pydantic.Field(default_factory=list)


class PodSetUpdate(base.UpstreamModel):
    name: str
    labels: dict[str, str] | None = None
    annotations: dict[str, str] | None = None
    node_selector: dict[str, str] | None = None
    tolerations: list[dict[str, Any]] | None = None


class AdmissionCheckState(base.UpstreamModel):
    name: str
    state: str
    message: str | None = None
    last_transition_time: base.Time | None = None
    pod_set_updates: list[PodSetUpdate] | None = None
    retry_count: int | None = None


class WorkloadStatus(base.UpstreamModel):
    conditions: list[base.Condition] | None = None
    admission: Admission | None = None
    admission_checks: list[AdmissionCheckState] | None = None


class Workload(base.KubeObject):
    spec: WorkloadSpec = pydantic.Field(default_factory=WorkloadSpec)
    status: WorkloadStatus | None = None

    @property
    def conditions(self) -> list[base.Condition]:
        return (self.status.conditions if self.status else None) or []


class ClusterQueueSpec(base.UpstreamModel):
    resource_groups: list[dict[str, Any]] | None = None
    cohort_name: str | None = None
    preemption: dict[str, Any] | None = None
    admission_checks_strategy: dict[str, Any] | None = None
    stop_policy: str | None = None


class ClusterQueue(base.KubeObject):
    spec: ClusterQueueSpec = pydantic.Field(default_factory=ClusterQueueSpec)
    status: dict[str, Any] | None = None


class LocalQueueSpec(base.UpstreamModel):
    cluster_queue: str
    stop_policy: str | None = None


class LocalQueue(base.KubeObject):
    spec: LocalQueueSpec
    status: dict[str, Any] | None = None


class AdmissionCheckSpec(base.UpstreamModel):
    controller_name: str
    parameters: dict[str, Any] | None = None


class AdmissionCheckStatus(base.UpstreamModel):
    conditions: list[base.Condition] | None = None


class AdmissionCheck(base.KubeObject):
    spec: AdmissionCheckSpec
    status: AdmissionCheckStatus | None = None


class ResourceFlavorSpec(base.UpstreamModel):
    node_labels: dict[str, str] | None = None
    node_taints: list[dict[str, Any]] | None = None
    tolerations: list[dict[str, Any]] | None = None


class ResourceFlavor(base.KubeObject):
    spec: ResourceFlavorSpec = pydantic.Field(default_factory=ResourceFlavorSpec)
