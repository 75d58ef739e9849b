"""Whether a checkpoint set can be restored by a pod, and on which nodes (pure).

Per the policy's ``spec.compatibility``: image digest and GPU count compare the set's recorded
fingerprint with the pod's (a key recorded on only one side is not compared); GPU product and
CUDA driver major are properties of *nodes*, so the set is usable when a Ready, schedulable node
carries both recorded labels (GPU Feature Discovery's, kontinue/keys.py), and those labels are
what the pod must be steered to. Used by the restore plan (kontinue/restore_plan.py) for every
candidate set.
"""

from __future__ import annotations

from collections.abc import Mapping

from kontinue import keys
from kontinue.models import base, checkpoint, core
from kontinue.models import policy as policy_model


def _node_usable(node: core.Node) -> bool:
    if (node.spec or {}).get("unschedulable"):
        return False
    return base.is_true(node.status.conditions if node.status else None, "Ready")


def mismatch(
    cp: checkpoint.Checkpoint,
    *,
    policy: policy_model.CheckpointPolicy,
    pod_fingerprint: checkpoint.Fingerprint,
    nodes: list[core.Node] | None,
    also: dict[str, str] | None = None,
    pinned: Mapping[str, str] | None = None,
) -> tuple[str | None, dict[str, str]]:
    """``(why not, {})`` or ``(None, node labels to require)`` for one checkpoint.

    A key recorded on only one side is not compared. ``nodes`` ``None``: do not check that a
    node exists (retention, which plans for no particular pod). ``also``: labels already required
    (the awaited checkpoint's, when judging its fallback): the pod is placed once, so a fallback
    must be restorable on the same nodes.
    """
    keys_ = set(policy.spec.compatibility)
    recorded = cp.spec.fingerprint
    compat = policy_model.CompatibilityKey
    if (
        compat.IMAGE_DIGEST in keys_
        and recorded.image_digest
        and pod_fingerprint.image_digest
        and recorded.image_digest != pod_fingerprint.image_digest
    ):
        return (
            f"imageDigest {recorded.image_digest} != pod's {pod_fingerprint.image_digest}",
            {},
        )
    if (
        compat.GPU_COUNT in keys_
        and recorded.gpu_count is not None
        and pod_fingerprint.gpu_count is not None
        and recorded.gpu_count != pod_fingerprint.gpu_count
    ):
        return f"gpuCount {recorded.gpu_count} != pod's {pod_fingerprint.gpu_count}", {}
    required: dict[str, str] = {}
    for key, label, mine, theirs in (
        (
            compat.GPU_PRODUCT,
            keys.GPU_PRODUCT_LABEL,
            recorded.gpu_product,
            pod_fingerprint.gpu_product,
        ),
        (
            compat.CUDA_DRIVER_MAJOR,
            keys.CUDA_DRIVER_MAJOR_LABEL,
            recorded.cuda_driver_major,
            pod_fingerprint.cuda_driver_major,
        ),
    ):
        if key not in keys_ or not mine:
            continue
        if theirs and theirs != mine:
            return f"{key.value} {mine} != pod's {theirs}", {}
        if also and also.get(label, mine) != mine:
            return f"{key.value} {mine} != awaited checkpoint's {also[label]}", {}
        if pinned and pinned.get(label, mine) != mine:
            return f"nodeSelector {label}={pinned[label]} excludes checkpoint's {mine}", {}
        required[label] = mine
    required = {**(also or {}), **required}
    if (
        nodes is not None
        and required
        and not any(
            _node_usable(node)
            and all((node.metadata.labels or {}).get(k) == v for k, v in required.items())
            for node in nodes
        )
    ):
        wanted = ", ".join(f"{k}={v}" for k, v in required.items())
        return f"no Ready node has {wanted}", {}
    return None, required
