"""The fields of core Kubernetes objects Kontinue reads: Pod, Job, Node, a claim's name.

Only named fields are typed; everything else rides along (``extra="allow"``) so a patch built
from a model never drops a field a newer Kubernetes added.
"""

from __future__ import annotations

from typing import Any

import pydantic

from kontinue.models import base


class EnvVar(base.UpstreamModel):
    name: str
    value: str | None = None
    value_from: dict[str, Any] | None = None


class VolumeMount(base.UpstreamModel):
    name: str
    mount_path: str
    read_only: bool | None = None
    sub_path: str | None = None
    sub_path_expr: str | None = None


class Container(base.UpstreamModel):
    name: str
    image: str | None = None
    command: list[str] | None = None
    args: list[str] | None = None
    env: list[EnvVar] | None = None
    volume_mounts: list[VolumeMount] | None = None
    resources: dict[str, Any] | None = None
    restart_policy: str | None = None
    termination_message_path: str | None = None
    termination_message_policy: str | None = None


class Volume(base.UpstreamModel):
    name: str


class PodSpec(base.UpstreamModel):
    containers: list[Container] = pydantic.Field(default_factory=list)
    init_containers: list[Container] | None = None
    volumes: list[Volume] | None = None
    node_name: str | None = None
    node_selector: dict[str, str] | None = None
    affinity: dict[str, Any] | None = None
    restart_policy: str | None = None
    termination_grace_period_seconds: int | None = None
    scheduler_name: str | None = None
    priority_class_name: str | None = None
    priority: int | None = None
    scheduling_gates: list[dict[str, Any]] | None = None


class ContainerStateTerminated(base.UpstreamModel):
    exit_code: int
    signal: int | None = None
    reason: str | None = None
    message: str | None = None
    started_at: base.Time | None = None
    finished_at: base.Time | None = None
    container_id: str | None = pydantic.Field(default=None, alias="containerID")


class ContainerState(base.UpstreamModel):
    waiting: dict[str, Any] | None = None
    running: dict[str, Any] | None = None
    terminated: ContainerStateTerminated | None = None


class ContainerStatus(base.UpstreamModel):
    name: str
    ready: bool = False
    restart_count: int = 0
    image: str | None = None
    image_id: str | None = pydantic.Field(default=None, alias="imageID")
    started: bool | None = None
    state: ContainerState | None = None
    last_state: ContainerState | None = None


class PodStatus(base.UpstreamModel):
    phase: str | None = None
    conditions: list[base.Condition] | None = None
    container_statuses: list[ContainerStatus] | None = None
    init_container_statuses: list[ContainerStatus] | None = None
    host_ip: str | None = pydantic.Field(default=None, alias="hostIP")
    pod_ip: str | None = pydantic.Field(default=None, alias="podIP")
    start_time: base.Time | None = None
    reason: str | None = None
    message: str | None = None


class Pod(base.KubeObject):
    spec: PodSpec = pydantic.Field(default_factory=PodSpec)
    status: PodStatus | None = None


class PodTemplateSpec(base.UpstreamModel):
    metadata: base.ObjectMeta = pydantic.Field(default_factory=base.ObjectMeta)
    spec: PodSpec = pydantic.Field(default_factory=PodSpec)


class JobSpec(base.UpstreamModel):
    template: PodTemplateSpec = pydantic.Field(default_factory=PodTemplateSpec)
    parallelism: int | None = None
    completions: int | None = None
    completion_mode: str | None = None
    backoff_limit: int | None = None
    suspend: bool | None = None
    pod_replacement_policy: str | None = None
    pod_failure_policy: dict[str, Any] | None = None


class JobStatus(base.UpstreamModel):
    conditions: list[base.Condition] | None = None
    active: int | None = None
    succeeded: int | None = None
    failed: int | None = None
    terminating: int | None = None
    ready: int | None = None
    start_time: base.Time | None = None
    completion_time: base.Time | None = None


class Job(base.KubeObject):
    spec: JobSpec = pydantic.Field(default_factory=JobSpec)
    status: JobStatus | None = None


class NodeStatus(base.UpstreamModel):
    capacity: dict[str, str] | None = None
    allocatable: dict[str, str] | None = None
    conditions: list[base.Condition] | None = None


class Node(base.KubeObject):
    spec: dict[str, Any] | None = None
    status: NodeStatus | None = None


class NameOnly(base.UpstreamModel):
    name: str | None = None
    namespace: str | None = None


class ClaimName(base.UpstreamModel):
    """A PersistentVolumeClaim as the webhook keeps it: its name and namespace, nothing else
    (webhook/caches.py asks only whether a policy's claim exists in a namespace)."""

    metadata: NameOnly = pydantic.Field(default_factory=NameOnly)
