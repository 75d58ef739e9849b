"""The bridge's writes: every call that changes the cluster, each idempotent.

Decisions come from :mod:`queue_bridge.reconciling` and :mod:`queue_bridge.admission_check`;
this module only turns them into requests with the right verb and Content-Type:

- Checkpoint create: ``AlreadyExists`` is success (another sighting, replica or restart made it).
- Checkpoint members: a later victim of the same eviction joins an open Checkpoint by a merge
  patch of ``spec.members`` carrying the ``resourceVersion`` it was decided from.
- Checkpoint status: a JSON merge patch on the ``status`` subresource carrying the
  ``resourceVersion`` we decided from, so a decision made on a stale copy fails with
  ``Conflict`` (retried from fresh state) instead of overwriting newer results.
- Pod finalizer: a JSON patch that *tests* the finalizer at its index before removing it, so a
  concurrent change to the list can never make us remove someone else's finalizer.
- Workload ``status.admissionChecks`` and AdmissionCheck ``status``: server-side apply as our
  own field manager, forced (what Kueue's controllers do).
"""

from __future__ import annotations

import logging
from typing import Any

from kontinue import keys
from kontinue.kube import api as kube_api
from kontinue.kube import errors, resources
from kontinue.models import base, checkpoint, core

log = logging.getLogger("kontinue.bridge")


async def create_checkpoint(kube: kube_api.Api, cp: checkpoint.Checkpoint) -> dict[str, Any] | None:
    """Create ``cp``: the stored object, or ``None`` when it already existed (not an error)."""
    try:
        return await kube.create(resources.CHECKPOINTS, base.to_dict(cp))
    except errors.Conflict as exc:
        if exc.already_exists:
            return None
        raise


async def write_members(
    kube: kube_api.Api, cp: checkpoint.Checkpoint, members: list[checkpoint.Member]
) -> dict[str, Any]:
    """Replace ``spec.members`` (a later victim of the same eviction joins an open Checkpoint).

    A merge patch carrying the ``resourceVersion`` the decision was made from: ``Conflict``
    when the Checkpoint changed since (retried from fresh state), never a lost member.
    """
    patch: dict[str, Any] = {
        "metadata": {"resourceVersion": cp.metadata.resource_version},
        "spec": {"members": [base.to_dict(m) for m in members]},
    }
    return await kube.merge_patch(
        resources.CHECKPOINTS, cp.name, patch, namespace=cp.metadata.namespace
    )


async def write_status(
    kube: kube_api.Api, cp: checkpoint.Checkpoint, status: checkpoint.CheckpointStatus
) -> dict[str, Any]:
    """Merge-patch ``status`` (whole lists replace: members are always written complete)."""
    patch: dict[str, Any] = {"status": base.to_dict(status)}
    if cp.metadata.resource_version:
        patch["metadata"] = {"resourceVersion": cp.metadata.resource_version}
    return await kube.merge_patch(
        resources.CHECKPOINTS,
        cp.name,
        patch,
        namespace=cp.metadata.namespace,
        subresource="status",
    )


async def remove_finalizer(kube: kube_api.Api, pod: core.Pod) -> bool:
    """Remove ``kontinue.dev/checkpoint`` from ``pod``; ``False`` if it or the pod is gone.

    The same patch drops the label ``kontinue.dev/lineage-hash``: the webhook finds a
    replacement's predecessors that no set records yet among the lineage's Failed pods still
    carrying it (webhook/unrecorded.py), so a released pod leaves that list and it stays small
    however many pods a Job has ended."""
    finalizers = pod.metadata.finalizers or []
    if keys.CHECKPOINT_FINALIZER not in finalizers:
        return False
    index = finalizers.index(keys.CHECKPOINT_FINALIZER)
    path = f"/metadata/finalizers/{index}"
    operations: list[dict[str, Any]] = [
        {"op": "test", "path": "/metadata/uid", "value": pod.metadata.uid},
        {"op": "test", "path": path, "value": keys.CHECKPOINT_FINALIZER},
        {"op": "remove", "path": path},
    ]
    if pod.metadata.label(keys.CHECKPOINT_LINEAGE_LABEL) is not None:
        label = keys.CHECKPOINT_LINEAGE_LABEL.replace("~", "~0").replace("/", "~1")
        operations.append({"op": "remove", "path": f"/metadata/labels/{label}"})
    try:
        await kube.json_patch(resources.PODS, pod.name, operations, namespace=pod.namespace)
    except errors.NotFound:
        return False
    except errors.Invalid as exc:
        # A failed test (the list changed since our cache saw it): re-read and decide again.
        raise errors.Conflict(f"finalizers of {pod.namespace}/{pod.name} changed: {exc}") from exc
    return True


async def release_verdict_gate(
    kube: kube_api.Api, pod: core.Pod, *, member: str, wait_seconds: int
) -> bool:
    """Write the set verdict's two annotations and remove the ``kontinue.dev/set-verdict`` gate
    in one JSON patch that tests the pod UID and the gate at its index (``False``: pod gone).

    One patch, so the kubelet can never start the restore with the gate gone and no verdict.
    """
    gates = pod.spec.scheduling_gates or []
    index = next((i for i, g in enumerate(gates) if g.get("name") == keys.SET_VERDICT_GATE), None)
    if index is None:
        return False
    annotations = pod.metadata.annotations
    operations: list[dict[str, Any]] = [
        {"op": "test", "path": "/metadata/uid", "value": pod.metadata.uid},
        {"op": "test", "path": f"/spec/schedulingGates/{index}", "value": gates[index]},
    ]
    if annotations is None:
        operations.append({"op": "add", "path": "/metadata/annotations", "value": {}})
    for key, value in (
        (keys.RESTORE_MEMBER_ANNOTATION, member),
        (keys.RESTORE_WAIT_ANNOTATION, str(wait_seconds)),
    ):
        escaped = key.replace("~", "~0").replace("/", "~1")
        operations.append({"op": "add", "path": f"/metadata/annotations/{escaped}", "value": value})
    operations.append({"op": "remove", "path": f"/spec/schedulingGates/{index}"})
    try:
        await kube.json_patch(resources.PODS, pod.name, operations, namespace=pod.namespace)
    except errors.NotFound:
        return False
    except errors.Invalid as exc:
        raise errors.Conflict(f"gates of {pod.namespace}/{pod.name} changed: {exc}") from exc
    return True


async def mark_restore_counted(kube: kube_api.Api, pod: core.Pod, checkpoint_name: str) -> None:
    """Annotate ``pod`` so its failed restore of ``checkpoint_name`` is counted only once."""
    await kube.merge_patch(
        resources.PODS,
        pod.name,
        {
            "metadata": {
                "resourceVersion": pod.metadata.resource_version,
                "annotations": {keys.RESTORE_FAILURE_COUNTED_ANNOTATION: checkpoint_name},
            }
        },
        namespace=pod.namespace,
    )


async def count_failed_restore(
    kube: kube_api.Api, *, namespace: str, name: str, reason: str
) -> int | None:
    """Increment ``status.failedRestores`` of the Checkpoint (read fresh, written with its
    resourceVersion); the new count, or ``None`` when the Checkpoint is gone."""
    try:
        raw = await kube.get(resources.CHECKPOINTS, name, namespace=namespace)
    except errors.NotFound:
        return None
    cp = checkpoint.load(raw)
    count = cp.status.failed_restores + 1
    status = cp.status.model_copy(update={"failed_restores": count})
    log.info("failed restore counted checkpoint=%s/%s count=%d %s", namespace, name, count, reason)
    await write_status(kube, cp, status)
    return count


async def apply_status(kube: kube_api.Api, resource: resources.Resource, body: Any) -> None:
    """Server-side apply on ``<resource>/status`` as the client's field manager, forced."""
    await kube.apply(resource, body, subresource="status", force=True)
