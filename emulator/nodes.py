"""Emulated nodes: the Node objects a kubelet registers, with optional emulated GPUs.

A real kubelet creates its own Node (pkg/kubelet/kubelet_node_status.go ``registerWithAPIServer``,
``initialNode``: labels ``kubernetes.io/hostname``, ``kubernetes.io/os``, ``kubernetes.io/arch``)
and then writes ``status`` (capacity, allocatable, the ``Ready`` condition with reason
``KubeletReady``, addresses, nodeInfo). GPUs appear the way the NVIDIA device plugin makes them
appear: ``nvidia.com/gpu`` in capacity/allocatable (a JSON patch of ``nodes/status``, from
:meth:`emulator.gpus.GpuProfile.status_patch`) and the GPU Feature Discovery labels from
:meth:`emulator.gpus.GpuProfile.labels`. Every write goes through the API as
``system:node:<name>``, so webhooks and watchers see what they would see on a real cluster.

Taints only at registration, as ``kubelet --register-with-taints`` sets them (``initialNode``
copies ``registerWithTaints`` into ``spec.taints``). Limits: no heartbeats or Lease renewal, no
pressure conditions or their taints; a node stays Ready.
"""

from __future__ import annotations

import dataclasses
import datetime
from collections.abc import Mapping
from typing import Any

from emulator import gpus, quantity
from emulator.apiserver import server
from kontinue.kube import api as kube_api
from kontinue.kube import resources

Object = dict[str, Any]


@dataclasses.dataclass(frozen=True)
class NodeSpec:
    """One emulated node. ``gpu=None`` is a CPU-only node."""

    name: str
    gpu: gpus.GpuProfile | None = gpus.H100
    cpu: str = "8"
    memory: str = "32Gi"
    pods: int = 110
    labels: Mapping[str, str] = dataclasses.field(default_factory=dict)
    taints: tuple[Mapping[str, str], ...] = ()
    """``--register-with-taints``: each ``{"key", "value", "effect"}``."""

    def __post_init__(self) -> None:
        if not self.name:
            raise ValueError("NodeSpec.name: must not be empty")
        for field in ("cpu", "memory"):
            try:
                quantity.parse(getattr(self, field))
            except quantity.InvalidQuantity as error:
                raise ValueError(f"NodeSpec.{field} of node {self.name!r}: {error}") from None
        if self.pods < 1:
            raise ValueError(f"NodeSpec.pods of node {self.name!r}: must be >= 1")

    @property
    def user(self) -> str:
        return f"system:node:{self.name}"


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def node_object(spec: NodeSpec) -> Object:
    """The Node a kubelet creates at registration (``initialNode``), GFD labels included."""
    labels = {
        "kubernetes.io/arch": "amd64",
        "kubernetes.io/hostname": spec.name,
        "kubernetes.io/os": "linux",
        "beta.kubernetes.io/arch": "amd64",
        "beta.kubernetes.io/os": "linux",
        **(spec.gpu.labels() if spec.gpu is not None else {}),
        **spec.labels,
    }
    node_spec: Object = {}
    if spec.taints:
        node_spec["taints"] = [dict(t) for t in spec.taints]
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": spec.name, "labels": labels},
        "spec": node_spec,
    }


def node_status(spec: NodeSpec, *, ip: str, now: str | None = None) -> Object:
    """The status the kubelet writes: resources, the Ready condition, address, node info."""
    at = now or _now()
    resources_ = {
        "cpu": spec.cpu,
        "memory": spec.memory,
        "pods": str(spec.pods),
        "ephemeral-storage": "100Gi",
    }
    return {
        "capacity": dict(resources_),
        "allocatable": dict(resources_),
        "conditions": [
            {
                "type": "Ready",
                "status": "True",
                "lastHeartbeatTime": at,
                "lastTransitionTime": at,
                "reason": "KubeletReady",
                "message": "kubelet is posting ready status",
            }
        ],
        "addresses": [
            {"type": "InternalIP", "address": ip},
            {"type": "Hostname", "address": spec.name},
        ],
        "nodeInfo": {
            "architecture": "amd64",
            "operatingSystem": "linux",
            "kubeletVersion": "v1.36.2",
            "containerRuntimeVersion": "emulator://1.0",
            "kernelVersion": "",
            "osImage": "Kontinue emulated node",
            "machineID": "",
            "systemUUID": "",
            "bootID": "",
            "kubeProxyVersion": "",
        },
    }


async def register(api: server.ApiServer, spec: NodeSpec, *, ip: str) -> Object:
    """Create the Node as its kubelet, write its status, then advertise its GPUs."""
    client = api.client(spec.user)
    await client.create(resources.NODES, node_object(spec))
    node = await client.patch(
        resources.NODES,
        spec.name,
        {"status": node_status(spec, ip=ip)},
        content_type=kube_api.MERGE_PATCH,
        subresource="status",
    )
    if spec.gpu is not None and spec.gpu.count > 0:
        node = await client.patch(
            resources.NODES,
            spec.name,
            spec.gpu.status_patch(),
            content_type=kube_api.JSON_PATCH,
            subresource="status",
        )
    return node
