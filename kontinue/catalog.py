"""The checkpoint catalog: which checkpoint a new incarnation restores, which ones may go.

Pure decisions over ``Checkpoint`` objects (read from a cache by the caller), shared by the
webhook (restore on pod CREATE) and the queue bridge (retention, expiry, the AdmissionCheck's
``podSetUpdates``). Nothing here does I/O, so every decision can be re-derived after a restart.

Restore rules (DESIGN.md, "Restore"):

- Only the lineage's own checkpoints: same namespace and owner UID (a new Job reusing a name never
  restores a stranger's state).
- Newest first, by trigger time, then creation time, then name (deterministic on ties).
- If the lineage's newest checkpoint is still ``Pending``/``InProgress`` (its previous incarnation
  is still saving), the decision is to *wait for it* (``wait_for``) and restore from it once it is
  ``Succeeded`` — not to start from an older one. ``fallback`` names the older good checkpoint the
  init container may use if the awaited one ends ``Failed`` (what the next decision would pick).
- Only ``Succeeded`` checkpoints are restored from; one whose ``status.failedRestores`` reached
  ``spec.restore.attemptsBeforeFallback`` is skipped (fall back to the previous one, then cold).
- Compatibility per ``spec.compatibility``; a key recorded on only one side is not compared.
  GPU product and CUDA driver major are properties of *nodes*: the checkpoint is usable if at
  least one Ready, schedulable node carries both recorded labels, and ``required_node_labels``
  tells the webhook / AdmissionCheck where to steer the pod.
"""

from __future__ import annotations

import dataclasses
import datetime
from collections.abc import Collection, Iterable

from kontinue import fingerprint, keys
from kontinue.models import base, checkpoint, core
from kontinue.models import policy as policy_model

# The decision's field ``checkpoint`` shadows the module inside the class body.
_Checkpoint = checkpoint.Checkpoint
_EPOCH = datetime.datetime.min.replace(tzinfo=datetime.UTC)

fingerprint_of = fingerprint.of
"""``fingerprint_of(pod, node=None, *, container=None) -> Fingerprint``: see :mod:`fingerprint`."""


@dataclasses.dataclass(frozen=True)
class RestoreDecision:
    """What a new incarnation of a lineage should restore from, and why.

    Exactly one of three shapes:
    - restore: ``checkpoint`` set, ``wait_for`` ``None``;
    - wait: ``wait_for`` set (restore from it once it is ``Succeeded``), ``checkpoint`` ``None``,
      ``fallback`` the older compatible good checkpoint if any;
    - cold start: both ``None``; ``reason`` says why (for the cold-start annotation and Event).
    """

    checkpoint: _Checkpoint | None
    reason: str
    wait_for: _Checkpoint | None = None
    required_node_labels: dict[str, str] = dataclasses.field(default_factory=dict)
    """Node labels the restoring pod must land on; empty when nothing is required."""
    fallback_from: list[str] = dataclasses.field(default_factory=list)
    """Names of newer checkpoints passed over (failed restores, incompatible), newest first."""
    fallback: _Checkpoint | None = None
    """Only with ``wait_for``: the checkpoint to use if the awaited one ends ``Failed``."""

    @property
    def cold_start(self) -> bool:
        return self.checkpoint is None and self.wait_for is None


def newest_first(checkpoints: Iterable[checkpoint.Checkpoint]) -> list[checkpoint.Checkpoint]:
    """Sorted by trigger time, then creation time, then name, newest first."""

    def key(cp: checkpoint.Checkpoint) -> tuple[datetime.datetime, datetime.datetime, str]:
        created = cp.metadata.creation_timestamp or _EPOCH
        return (_aware(cp.spec.trigger.time), _aware(created), cp.name)

    return sorted(checkpoints, key=key, reverse=True)


def _aware(value: datetime.datetime) -> datetime.datetime:
    return value if value.tzinfo else value.replace(tzinfo=datetime.UTC)


def of_lineage(
    checkpoints: Iterable[checkpoint.Checkpoint], lineage: checkpoint.Lineage
) -> list[checkpoint.Checkpoint]:
    """The lineage's own checkpoints (same namespace and owner UID), newest first."""
    return newest_first(
        cp
        for cp in checkpoints
        if cp.spec.lineage.owner_uid == lineage.owner_uid
        and cp.spec.lineage.namespace == lineage.namespace
    )


def _node_usable(node: core.Node) -> bool:
    if (node.spec or {}).get("unschedulable"):
        return False
    return base.is_true(node.status.conditions if node.status else None, "Ready")


def _mismatch(
    cp: checkpoint.Checkpoint,
    *,
    policy: policy_model.CheckpointPolicy,
    pod_fingerprint: checkpoint.Fingerprint,
    nodes: list[core.Node],
    also: dict[str, str] | None = None,
) -> tuple[str | None, dict[str, str]]:
    """``(why not, {})`` or ``(None, node labels to require)`` for one checkpoint.

    ``also``: labels already required (the awaited checkpoint's, when judging its fallback):
    the pod is placed once, so a fallback must be restorable on the same nodes.
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
        required[label] = mine
    required = {**(also or {}), **required}
    if required and not any(
        _node_usable(node)
        and all((node.metadata.labels or {}).get(k) == v for k, v in required.items())
        for node in nodes
    ):
        wanted = ", ".join(f"{k}={v}" for k, v in required.items())
        return f"no Ready node has {wanted}", {}
    return None, required


def choose_restore(
    checkpoints: Iterable[checkpoint.Checkpoint],
    *,
    lineage: checkpoint.Lineage,
    policy: policy_model.CheckpointPolicy,
    pod_fingerprint: checkpoint.Fingerprint,
    nodes: Iterable[core.Node],
) -> RestoreDecision:
    """The restore decision for a new pod of ``lineage`` (rules in the module docstring)."""
    own = [
        cp
        for cp in of_lineage(checkpoints, lineage)
        if cp.status.phase is not checkpoint.Phase.EXPIRED
    ]
    node_list = list(nodes)
    attempts = policy.spec.restore.attempts_before_fallback
    if not own:
        return RestoreDecision(None, f"no checkpoint of {lineage.key} yet")

    skipped: list[str] = []
    notes: list[str] = []
    wait_for: checkpoint.Checkpoint | None = None
    wait_labels: dict[str, str] = {}
    if not own[0].status.phase.terminal:
        newest = own[0]
        why, labels = _mismatch(
            newest, policy=policy, pod_fingerprint=pod_fingerprint, nodes=node_list
        )
        if why is None:
            wait_for, wait_labels = newest, labels
        else:
            skipped.append(newest.name)
            notes.append(f"{newest.name}: {why}")

    for cp in own:
        if cp is wait_for or cp.status.phase is not checkpoint.Phase.SUCCEEDED:
            continue
        if cp.status.failed_restores >= attempts:
            skipped.append(cp.name)
            notes.append(f"{cp.name}: {cp.status.failed_restores} failed restores")
            continue
        why, labels = _mismatch(
            cp, policy=policy, pod_fingerprint=pod_fingerprint, nodes=node_list, also=wait_labels
        )
        if why is not None:
            skipped.append(cp.name)
            notes.append(f"{cp.name}: {why}")
            continue
        if wait_for is not None:
            return RestoreDecision(
                None,
                f"wait for {wait_for.name} ({wait_for.status.phase.value}) to finish saving, "
                f"then restore from it; if it fails, from {cp.name}" + _passed_over(notes),
                wait_for=wait_for,
                required_node_labels=labels,
                fallback_from=skipped,
                fallback=cp,
            )
        reason = f"restore from {cp.name} (triggered {_when(cp)} by {_by(cp)})"
        reason += _passed_over(notes)
        return RestoreDecision(cp, reason, required_node_labels=labels, fallback_from=skipped)

    if wait_for is not None:
        return RestoreDecision(
            None,
            f"wait for {wait_for.name} ({wait_for.status.phase.value}) to finish saving, "
            "then restore from it; no older checkpoint to fall back to" + _passed_over(notes),
            wait_for=wait_for,
            required_node_labels=wait_labels,
            fallback_from=skipped,
        )
    if not notes:
        return RestoreDecision(None, f"no Succeeded checkpoint of {lineage.key}")
    return RestoreDecision(None, "no usable checkpoint: " + "; ".join(notes), fallback_from=skipped)


def _passed_over(notes: list[str]) -> str:
    return "; passed over " + "; ".join(notes) if notes else ""


def _when(cp: checkpoint.Checkpoint) -> str:
    return _aware(cp.spec.trigger.time).astimezone(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _by(cp: checkpoint.Checkpoint) -> str:
    return f"{cp.spec.trigger.source.value}/{cp.spec.trigger.reason}"


def _usable(cp: checkpoint.Checkpoint, attempts: int) -> bool:
    return cp.status.phase is checkpoint.Phase.SUCCEEDED and cp.status.failed_restores < attempts


def retention(
    checkpoints: Iterable[checkpoint.Checkpoint],
    *,
    policy: policy_model.CheckpointPolicy,
    in_use: Collection[str] = (),
) -> list[checkpoint.Checkpoint]:
    """Checkpoints to expire (their data may be deleted), per lineage, newest first.

    - Keeps the ``spec.retention.keep`` newest ``Succeeded`` ones.
    - Never the newest *usable* one (``Succeeded`` with failed restores under the limit), even
      if newer unusable ones fill ``keep``: it is what the next incarnation restores.
    - ``Failed`` ones older than the newest usable one go (a torn attempt is of no use once a
      newer good one exists); newer ``Failed`` ones stay, for diagnosis, until one does.
    - Never a non-terminal (still saving) or already ``Expired`` one, nor one named in
      ``in_use`` (a running pod's ``kontinue.dev/restore-from``).
    """
    keep = policy.spec.retention.keep
    attempts = policy.spec.restore.attempts_before_fallback
    by_lineage: dict[tuple[str, str], list[checkpoint.Checkpoint]] = {}
    for cp in checkpoints:
        key = (cp.spec.lineage.namespace, cp.spec.lineage.owner_uid)
        by_lineage.setdefault(key, []).append(cp)

    doomed: list[checkpoint.Checkpoint] = []
    for group in by_lineage.values():
        ordered = newest_first(group)
        good = next((cp for cp in ordered if _usable(cp, attempts)), None)
        succeeded = [cp for cp in ordered if cp.status.phase is checkpoint.Phase.SUCCEEDED]
        kept = {id(cp) for cp in succeeded[:keep]}
        for cp in ordered:
            if cp.name in in_use or cp is good:
                continue
            surplus = cp.status.phase is checkpoint.Phase.SUCCEEDED and id(cp) not in kept
            superseded = (
                cp.status.phase is checkpoint.Phase.FAILED
                and good is not None
                and ordered.index(cp) > ordered.index(good)
            )
            if surplus or superseded:
                doomed.append(cp)
    return newest_first(doomed)


def expire_on_owner_gone(
    checkpoints: Iterable[checkpoint.Checkpoint],
    *,
    policy: policy_model.CheckpointPolicy,
    live_owner_uids: Collection[str],
    finished_owner_uids: Collection[str] = (),
) -> list[checkpoint.Checkpoint]:
    """Terminal, unexpired checkpoints whose owner is gone or finished, if the policy says so.

    ``live_owner_uids``: UIDs of owners that exist (from the caller's cache, which must be
    synced: an unsynced cache would expire everything). ``finished_owner_uids``: owners that
    completed or failed for good (Job ``Complete``/``Failed``). A checkpoint still saving is left
    for a later pass, once it is terminal, so its members' results are recorded first.
    """
    if not policy.spec.retention.expire_on_completion:
        return []
    live = set(live_owner_uids)
    finished = set(finished_owner_uids)
    return newest_first(
        cp
        for cp in checkpoints
        if cp.status.phase.terminal
        and cp.status.phase is not checkpoint.Phase.EXPIRED
        and (cp.spec.lineage.owner_uid not in live or cp.spec.lineage.owner_uid in finished)
    )
