"""A workload's lineage: who it is across incarnations, how that is written down, where it saves.

Pure functions over typed objects, shared by the webhook (which stamps the lineage annotation and
``KONTINUE_CHECKPOINT_DIR`` on pod CREATE) and the queue bridge (which records the lineage in each
``Checkpoint`` and finds a lineage's checkpoints).

Identity comes from the pod's *controller* ownerReference, guarded by the owner's UID: a new Job
that reuses a name has a new UID, so it never restores a stranger's state. Two exceptions:

- JobSet: a JobSet's pods are controlled by a child batch Job, which JobSet may recreate on a
  restart. The lineage is the JobSet itself, read from the ``jobset.sigs.k8s.io/jobset-name`` and
  ``jobset.sigs.k8s.io/jobset-uid`` labels JobSet stamps on every child Job and pod.
- A bare pod (no controller) has **no lineage** (:func:`of_pod` returns ``None``): nothing will
  ever recreate it, so a checkpoint of it could never be restored, and a later pod that happens to
  reuse its name is a different workload. Kontinue leaves such pods alone.

Owner kinds are written as Kubernetes spells them for the core ``batch`` group (``Job``) and as
``Kind.group`` for any other group (``Job.batch.volcano.sh``, ``JobSet.jobset.x-k8s.io``,
``PyTorchJob.kubeflow.org``): a Volcano Job and a batch Job of the same name must not collide.
"""

from __future__ import annotations

import posixpath
import re

from kontinue import keys
from kontinue.models import base, checkpoint, core, errors
from kontinue.models import policy as policy_model

# Groups whose kinds are written bare: the core group and batch/v1.
_BARE_GROUPS = frozenset({"", "batch"})
_UID_LIKE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
_DOWNWARD_REF = re.compile(r"^\$\([A-Za-z_][A-Za-z0-9_]*\)$")


def owner_kind(*, api_version: str, kind: str) -> str:
    """``Job`` for batch/v1, ``Kind.group`` for any other group (unambiguous, no ``/``)."""
    group = api_version.rpartition("/")[0] if "/" in api_version else ""
    return kind if group in _BARE_GROUPS else f"{kind}.{group}"


def of_pod(pod: core.Pod) -> checkpoint.Lineage | None:
    """The lineage of ``pod``, or ``None`` for a pod without a controller (see module doc).

    Works on a pod being created (``generateName`` set, no name or UID yet): only the
    namespace, labels and ownerReferences are read. The namespace must be known; a pod CREATE
    review may omit it from the object, so the caller fills it from ``request.namespace``.

    Raises :class:`~kontinue.models.errors.InvalidObject` when the pod has no namespace or
    carries half of the JobSet labels (a name without a UID, or the reverse).
    """
    return of_meta(pod.metadata)


def of_meta(meta: base.ObjectMeta) -> checkpoint.Lineage | None:
    """:func:`of_pod` from the pod's metadata alone (all it reads): the webhook names the
    lineage of a pod CREATE before it parses the whole pod (webhook/freshness.py)."""
    namespace = meta.namespace
    if not namespace:
        raise errors.InvalidObject(
            "Pod", [errors.FieldError("metadata.namespace", "required to name a lineage")]
        )
    jobset_name = meta.label(keys.JOBSET_NAME_LABEL)
    jobset_uid = meta.label(keys.JOBSET_UID_LABEL)
    if jobset_name or jobset_uid:
        if not (jobset_name and jobset_uid):
            missing = keys.JOBSET_UID_LABEL if jobset_name else keys.JOBSET_NAME_LABEL
            raise errors.InvalidObject(
                "Pod",
                [errors.FieldError(f"metadata.labels[{missing}]", "JobSet pod without it")],
            )
        return _lineage(namespace, f"JobSet.{keys.JOBSET_GROUP}", jobset_name, jobset_uid)
    ref = meta.controller_ref()
    if ref is None:
        return None
    kind = owner_kind(api_version=ref.api_version, kind=ref.kind)
    return _lineage(namespace, kind, ref.name, ref.uid)


def _lineage(namespace: str, kind: str, name: str, uid: str) -> checkpoint.Lineage:
    return base.parse(
        checkpoint.Lineage,
        {"namespace": namespace, "ownerKind": kind, "ownerName": name, "ownerUid": uid},
    )


def annotation_value(lineage: checkpoint.Lineage) -> str:
    """The ``kontinue.dev/lineage`` annotation: ``<namespace>/<owner kind>/<owner name>/<uid>``.

    A plain string rather than JSON so ``kubectl get pod -o yaml`` reads at a glance; none of
    the four parts can contain ``/`` (DNS names, kinds, UIDs), so splitting is unambiguous.
    """
    return f"{lineage.key}/{lineage.owner_uid}"


def parse_annotation(value: str) -> checkpoint.Lineage:
    """Inverse of :func:`annotation_value`.

    Raises :class:`~kontinue.models.errors.InvalidObject` naming the annotation and the cause:
    the wrong number of parts, or an empty part.
    """
    field = f"metadata.annotations[{keys.LINEAGE_ANNOTATION}]"
    parts = value.split("/")
    if len(parts) != 4:
        raise errors.InvalidObject(
            "Pod",
            [
                errors.FieldError(
                    field,
                    f"want <namespace>/<owner kind>/<owner name>/<owner uid>, got {value!r}",
                )
            ],
        )
    names = ("namespace", "owner kind", "owner name", "owner uid")
    empty = [name for name, part in zip(names, parts, strict=True) if not part]
    if empty:
        raise errors.InvalidObject(
            "Pod", [errors.FieldError(field, f"empty {', '.join(empty)} in {value!r}")]
        )
    try:
        return _lineage(*parts)
    except errors.InvalidObject as exc:
        raise errors.InvalidObject(
            "Pod", [errors.FieldError(f"{field}.{e.path}", e.message) for e in exc.errors]
        ) from None


def lineage_dir(lineage: checkpoint.Lineage) -> str:
    """``<namespace>/<owner kind>-<owner name>-<owner uid[:8]>``, relative to the storage mount.

    Lower-cased kind, so the path is the same whatever the case conventions of a group. The UID
    prefix keeps a new Job that reuses a name out of its predecessor's directory; eight hex
    digits make an accidental clash within one namespace and name negligible.
    """
    uid = lineage.owner_uid.replace("-", "")[:8]
    return f"{lineage.namespace}/{lineage.owner_kind.lower()}-{lineage.owner_name}-{uid}"


def checkpoint_dir(
    policy: policy_model.CheckpointPolicy, lineage: checkpoint.Lineage, pod_uid: str
) -> str:
    """Where one pod incarnation saves: ``<lineage dir>/<pod uid>``, relative to the mount.

    Fresh per pod incarnation, because (docs/api.md: nothing lost) the last good checkpoint is never
    written again: a new pod restores *from* its predecessor's directory and saves into its own,
    so a save torn by SIGKILL can only damage a directory no good Checkpoint points at, and two
    incarnations never race on one directory.

    A mutating webhook does not know the pod UID yet; pass a dependent env reference such as
    ``$(KONTINUE_POD_UID)`` (filled by the downward API, expanded by the kubelet) instead. The
    policy is taken so the layout may vary by engine later; today every engine uses this one.
    Raises :class:`ValueError` for a pod UID that could escape the directory.
    """
    del policy  # one layout for every policy today; see docstring
    if not (_UID_LIKE.match(pod_uid) or _DOWNWARD_REF.match(pod_uid)):
        raise ValueError(f"pod uid {pod_uid!r} is not a UID or a $(VAR) reference")
    return f"{lineage_dir(lineage)}/{pod_uid}"


def contains(path: str, owner: checkpoint.Lineage, *, mount_path: str) -> bool:
    """Whether ``path`` lies in ``owner``'s own directory under the checkpoint mount.

    Both are normalised and compared as path prefixes, component by component: neither
    ``/etc/<lineage dir>/`` (the directory's name elsewhere) nor ``<mount>/<lineage dir>/../x``
    (an escape) nor ``<mount>/<lineage dir>-evil`` (a sibling sharing the prefix) is inside.
    Shared by the restore plan (never hands such a directory out) and the validating webhook
    (denies a pod naming one).
    """
    if not path.startswith("/") or "\0" in path:
        return False
    root = f"{mount_path.rstrip('/')}/{lineage_dir(owner)}"
    if not root.startswith("/") or "\0" in root:
        return False
    found, root = posixpath.normpath(path), posixpath.normpath(root)
    return found == root or found.startswith(root.rstrip("/") + "/")
