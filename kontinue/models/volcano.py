"""Volcano objects Kontinue reads: ``scheduling.volcano.sh/v1beta1`` Queue and PodGroup,
``batch.volcano.sh/v1alpha1`` Job (volcano-sh/apis pkg/apis/{scheduling,batch}).
"""

from __future__ import annotations

from typing import Any

import pydantic

from kontinue.models import base

SCHEDULING_API_VERSION = "scheduling.volcano.sh/v1beta1"
BATCH_API_VERSION = "batch.volcano.sh/v1alpha1"


class QueueSpec(base.UpstreamModel):
    weight: int | None = None
    capability: dict[str, Any] | None = None
    deserved: dict[str, Any] | None = None
    guarantee: dict[str, Any] | None = None
    reclaimable: bool | None = None
    parent: str | None = None
    priority: int | None = None


class QueueStatus(base.UpstreamModel):
    state: str | None = None


class Queue(base.KubeObject):
    spec: QueueSpec = pydantic.Field(default_factory=QueueSpec)
    status: QueueStatus | None = None


class PodGroupSpec(base.UpstreamModel):
    min_member: int | None = None
    min_task_member: dict[str, int] | None = None
    min_resources: dict[str, Any] | None = None
    queue: str | None = None
    priority_class_name: str | None = None


class PodGroupStatus(base.UpstreamModel):
    phase: str | None = None
    conditions: list[base.Condition] | None = None
    running: int | None = None
    succeeded: int | None = None
    failed: int | None = None


class PodGroup(base.KubeObject):
    spec: PodGroupSpec = pydantic.Field(default_factory=PodGroupSpec)
    status: PodGroupStatus | None = None


class TaskSpec(base.UpstreamModel):
    name: str | None = None
    replicas: int | None = None
    template: dict[str, Any] | None = None
    policies: list[dict[str, Any]] | None = None


class VolcanoJobSpec(base.UpstreamModel):
    scheduler_name: str | None = None
    min_available: int | None = None
    queue: str | None = None
    max_retry: int | None = None
    tasks: list[TaskSpec] | None = None
    policies: list[dict[str, Any]] | None = None
    priority_class_name: str | None = None


class VolcanoJob(base.KubeObject):
    spec: VolcanoJobSpec = pydantic.Field(default_factory=VolcanoJobSpec)
    status: dict[str, Any] | None = None
