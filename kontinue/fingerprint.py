"""What a checkpoint was taken on, and what a pod asks for: the inputs of restore compatibility.

A checkpoint's fingerprint is recorded from the running pod and its node when the eviction is
seen; a restoring pod's fingerprint is read from the pod being created (no status, no node yet).
Both come from :func:`of`, which takes whatever is known and leaves the rest ``None`` — and a
``None`` on either side is never compared (see :mod:`kontinue.catalog`).

Limits:
- The image digest is the *repository* digest (``repo@sha256:…``). A bare ``sha256:…`` imageID
  is a local image ID (the kubelet reports it for images without a repository digest, see the
  kubelet recordings), which is not comparable with a pinned ``image: repo@sha256:…``: it is
  ignored.
- The digest is the workload container's: the one named, else the first workload container
  (kontinue/workload.py: the ``kontinue.dev/workload-containers`` annotation, else the
  accelerator containers, else the first listed), never an injected proxy listed before it.
"""

from __future__ import annotations

import re

from kontinue import keys, workload
from kontinue.models import checkpoint, core

_DIGEST = re.compile(r"@(sha256:[0-9a-f]{64})$")


def digest_of(reference: str | None) -> str | None:
    """``sha256:…`` from ``repo@sha256:…`` (an image or an imageID); ``None`` otherwise."""
    if not reference:
        return None
    found = _DIGEST.search(reference)
    return found.group(1) if found else None


def _quantity(value: object) -> int:
    """An extended-resource quantity: whole numbers only (``nvidia.com/gpu`` cannot be split)."""
    text = str(value).strip()
    if not text.isdigit():
        raise ValueError(f"{keys.GPU_RESOURCE} quantity {text!r} is not a whole number")
    return int(text)


def gpu_count(pod: core.Pod) -> int:
    """GPUs the pod's containers ask for: the sum over main containers of limits (else requests).

    Extended resources must have limits equal to requests when both are set, so either will
    do. Init containers run before the main ones and reuse their GPUs, so they are not added.
    """
    total = 0
    for container in pod.spec.containers:
        resources = container.resources or {}
        for section in ("limits", "requests"):
            values = resources.get(section) or {}
            if keys.GPU_RESOURCE in values:
                total += _quantity(values[keys.GPU_RESOURCE])
                break
    return total


def _container(pod: core.Pod, name: str | None) -> core.Container | None:
    """``name``, else the first workload container (kontinue/workload.py), not merely the
    first listed: an injected proxy or log shipper must not stand for the workload's image."""
    if name is None:
        names = workload.of_pod(pod).names
        name = names[0] if names else None
        if name is None:
            return None
    return next((c for c in pod.spec.containers if c.name == name), None)


def image_digest(pod: core.Pod, *, container: str | None = None) -> str | None:
    """The workload container's repository digest: from its status, else its pinned image."""
    spec = _container(pod, container)
    if spec is None:
        return None
    statuses = (pod.status.container_statuses if pod.status else None) or []
    status = next((s for s in statuses if s.name == spec.name), None)
    from_status = digest_of(status.image_id) if status else None
    return from_status or digest_of(spec.image)


def of(
    pod: core.Pod, node: core.Node | None = None, *, container: str | None = None
) -> checkpoint.Fingerprint:
    """The fingerprint of ``pod`` on ``node`` (``None`` at admission, before scheduling).

    GPU product and CUDA driver major come from the node's GPU Feature Discovery labels
    (``nvidia.com/gpu.product``, ``nvidia.com/cuda.driver-version.major``); without a node, or
    on a node without those labels, they stay ``None``.
    """
    labels = (node.metadata.labels if node else None) or {}
    return checkpoint.Fingerprint(
        image_digest=image_digest(pod, container=container),
        gpu_product=labels.get(keys.GPU_PRODUCT_LABEL),
        cuda_driver_major=labels.get(keys.CUDA_DRIVER_MAJOR_LABEL),
        gpu_count=gpu_count(pod),
    )
