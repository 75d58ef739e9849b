"""Pure validation rules: object (and old object) in, field errors out. No I/O, no aiohttp.

Each function returns *all* problems it finds, each with a field path (kueue's
``field.ErrorList`` habit, style.md §7.1); :mod:`webhook.admission` joins them into one denial.

* our CRDs: ``CheckpointPolicy`` and ``Checkpoint`` parse through their models (the same code
  that reads them elsewhere), so an error names the field exactly as a reader would fail on it;
* queue opt-in labels: ``kontinue.dev/enabled`` is ``"true"``/``"false"``, and
  ``kontinue.dev/policy`` names a policy that exists (or ``default``);
* pods: the reserved keys (DESIGN.md "Pod keys Kontinue owns") may be neither changed on UPDATE
  nor forged on CREATE. A CREATE reaching us has already been through our own mutation, so on
  CREATE the keys are checked for *consistency* with the pod (its own lineage, a Checkpoint of
  that lineage, paths inside that lineage's directory) rather than for absence.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from kontinue import keys, lineage
from kontinue.models import base, checkpoint, core, errors
from kontinue.models import policy as policy_model
from webhook import plumbing
from webhook import state as state_module

FieldError = errors.FieldError
Obj = dict[str, Any]


def _parse_errors(loader: Callable[[object], object], obj: Obj) -> list[FieldError]:
    try:
        loader(obj)
    except errors.InvalidObject as exc:
        return list(exc.errors)
    return []


def policy_errors(obj: Obj) -> list[FieldError]:
    return _parse_errors(policy_model.load, obj)


def checkpoint_errors(obj: Obj) -> list[FieldError]:
    return _parse_errors(checkpoint.load, obj)


def queue_label_errors(
    labels: dict[str, str] | None,
    old_labels: dict[str, str] | None,
    *,
    state: state_module.State,
) -> list[FieldError]:
    """Opt-in labels of a Kueue ClusterQueue or Volcano Queue.

    Only labels whose value changed are checked, so an unrelated update of a queue whose policy
    was deleted later is not blocked (the webhook warns on that queue's pods instead).
    """
    labels = labels or {}
    old = old_labels or {}
    found: list[FieldError] = []
    enabled = labels.get(keys.ENABLED_LABEL)
    if enabled not in (None, "true", "false", old.get(keys.ENABLED_LABEL)):
        found.append(
            FieldError(
                f"metadata.labels[{keys.ENABLED_LABEL}]",
                f'must be "true" or "false", not {enabled!r}',
            )
        )
    name = labels.get(keys.POLICY_LABEL)
    if (
        name is not None
        and name != old.get(keys.POLICY_LABEL)
        and state.policy(name) is None
        and name != keys.DEFAULT_POLICY_NAME
    ):
        found.append(
            FieldError(
                f"metadata.labels[{keys.POLICY_LABEL}]",
                f"CheckpointPolicy {name!r} does not exist",
            )
        )
    return found


def _annotations(obj: Obj | None) -> dict[str, str]:
    return dict(((obj or {}).get("metadata") or {}).get("annotations") or {})


def changed_reserved_annotations(pod: Obj, old_pod: Obj) -> list[FieldError]:
    """UPDATE: a reserved annotation added, changed or removed."""
    new, old = _annotations(pod), _annotations(old_pod)
    return [
        FieldError(f"metadata.annotations[{key}]", "reserved for Kontinue; may not be changed")
        for key in sorted(keys.RESERVED_POD_ANNOTATIONS)
        if new.get(key) != old.get(key)
    ]


def inside_lineage(path: str, pod_lineage: checkpoint.Lineage) -> bool:
    """Whether ``path`` lies in the lineage's own directory (no ``..`` escapes)."""
    if ".." in path.split("/"):
        return False
    return f"/{lineage.lineage_dir(pod_lineage)}/" in f"/{path.strip('/')}/"


def _path_errors(
    containers: list[Obj], field: str, pod_lineage: checkpoint.Lineage | None
) -> list[FieldError]:
    found: list[FieldError] = []
    watched = {keys.ENV_RESTORE_FROM, plumbing.ENV_RESTORE_SOURCE, keys.ENV_WAIT_FOR}
    for i, container in enumerate(containers):
        for j, env in enumerate(container.get("env") or []):
            name = env.get("name")
            if name not in watched:
                continue
            where = f"{field}[{i}].env[{j}]"
            if "valueFrom" in env:
                found.append(FieldError(where, f"{name} must be a literal value"))
                continue
            value = env.get("value") or ""
            if not value or (name == keys.ENV_RESTORE_FROM and value == plumbing.RESTORE_LINK):
                continue
            if pod_lineage is None:
                found.append(FieldError(where, f"{name} on a pod without a lineage"))
            elif not inside_lineage(value, pod_lineage):
                found.append(
                    FieldError(where, f"{name}={value} is outside lineage {pod_lineage.key}")
                )
    return found


def forged_reserved_keys(
    pod: Obj, *, namespace: str, state: state_module.State
) -> list[FieldError]:
    """CREATE: reserved keys that do not belong to this pod (another lineage or namespace)."""
    found: list[FieldError] = []
    try:
        model = base.parse(core.Pod, pod)
        model.metadata.namespace = model.metadata.namespace or namespace
        pod_lineage = lineage.of_pod(model)
    except errors.InvalidObject as exc:
        return list(exc.errors)
    annotations = _annotations(pod)
    if (value := annotations.get(keys.LINEAGE_ANNOTATION)) is not None:
        expected = lineage.annotation_value(pod_lineage) if pod_lineage else None
        if value != expected:
            found.append(
                FieldError(
                    f"metadata.annotations[{keys.LINEAGE_ANNOTATION}]",
                    f"{value!r} is not this pod's lineage ({expected or 'none: no controller'})",
                )
            )
    if (name := annotations.get(keys.RESTORE_FROM_ANNOTATION)) is not None:
        field = f"metadata.annotations[{keys.RESTORE_FROM_ANNOTATION}]"
        cp = state.checkpoint(namespace, name)
        if cp is None:
            found.append(FieldError(field, f"no Checkpoint {name!r} in namespace {namespace}"))
        elif pod_lineage is None or cp.spec.lineage != pod_lineage:
            found.append(
                FieldError(field, f"Checkpoint {name!r} belongs to lineage {cp.spec.lineage.key}")
            )
    spec: Obj = pod.get("spec") or {}
    found += _path_errors(spec.get("containers") or [], "spec.containers", pod_lineage)
    found += _path_errors(spec.get("initContainers") or [], "spec.initContainers", pod_lineage)
    return found
