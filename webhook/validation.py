"""Pure validation rules: object (and old object) in, field errors out. No I/O, no aiohttp.

Each function returns *all* problems it finds, each with a field path (kueue's
``field.ErrorList`` habit, kubernetes
``staging/src/k8s.io/apimachinery/pkg/util/validation/field/errors.go``); :mod:`webhook.admission`
joins them into one denial.

* our CRDs: ``CheckpointPolicy`` and ``Checkpoint`` parse through their models (the same code
  that reads them elsewhere), so an error names the field exactly as a reader would fail on it;
* queue opt-in labels: ``kontinue.dev/enabled`` is ``"true"``/``"false"``, and
  ``kontinue.dev/policy`` names a policy that exists (or ``default``);
* pods: the reserved keys (docs/api.md, "Keys") may be neither changed on UPDATE
  nor forged on CREATE. A CREATE reaching us has already been through our own mutation, so on
  CREATE the keys are checked for *consistency* with the pod (its own lineage, a Checkpoint of
  that lineage, paths inside that lineage's directory) rather than for absence.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pydantic

from kontinue import keys, lineage, optin
from kontinue.models import base, checkpoint, core, errors
from kontinue.models import policy as policy_model
from webhook import plumbing
from webhook import state as state_module

FieldError = errors.FieldError
Obj = dict[str, Any]

MAX_ERRORS = 5
"""Field errors named in one answer; the rest are counted (:func:`capped`)."""


def capped(found: list[FieldError]) -> list[FieldError]:
    """The first :data:`MAX_ERRORS` errors, and one more saying how many were left out.

    A review of a pod with 100,000 bad ownerReferences once produced 100,003 errors and a
    9.9 MB message (issue 20 item 4); one answer names a few and counts the rest.
    """
    if len(found) <= MAX_ERRORS:
        return found
    return [*found[:MAX_ERRORS], FieldError("", f"and {len(found) - MAX_ERRORS} more errors")]


def _parse_errors(loader: Callable[[object], object], obj: Obj) -> list[FieldError]:
    try:
        loader(obj)
    except errors.InvalidObject as exc:
        return capped(list(exc.errors))
    return []


CHUNK = 64
"""Items of a long list validated at a time before the whole object is (see below)."""

_LONG_LISTS: tuple[tuple[str, str, Any], ...] = (
    ("spec", "members", pydantic.TypeAdapter(list[checkpoint.Member])),
    ("status", "members", pydantic.TypeAdapter(list[checkpoint.MemberResult])),
    ("status", "conditions", pydantic.TypeAdapter(list[base.Condition])),
)


def _long_lists(obj: Obj) -> tuple[list[FieldError], Obj]:
    """Errors in a Checkpoint's long lists, found a chunk at a time; else the object with
    those lists cut to their first item, for the parse of everything else.

    pydantic reports every bad item of a list, and producing 15,000 errors for 15,000 bad
    members took 220 ms of the one event loop; a chunk at a time stops at the first bad
    chunk, and a good list is still validated only once (issue 20 item 4).
    """
    trimmed = obj
    for section, key, adapter in _LONG_LISTS:
        part = obj.get(section)
        items = part.get(key) if isinstance(part, dict) else None
        if not isinstance(items, list) or len(items) <= CHUNK:
            continue
        for start in range(0, len(items), CHUNK):
            try:
                adapter.validate_python(items[start : start + CHUNK])
            except pydantic.ValidationError as exc:
                found = []
                for error in exc.errors()[:MAX_ERRORS]:
                    index, *rest = error["loc"]
                    where = f"{section}.{key}[{start + int(index)}]"
                    found.append(FieldError(".".join([where, *map(str, rest)]), error["msg"]))
                return found, obj
        assert isinstance(part, dict)
        trimmed = {**trimmed, section: {**part, key: items[:1]}}
    return [], trimmed


def policy_errors(obj: Obj) -> list[FieldError]:
    return _parse_errors(policy_model.load, obj)


def checkpoint_errors(obj: Obj) -> list[FieldError]:
    """A Checkpoint's fields, and that its lineage is of its own namespace.

    Every lookup of a lineage's checkpoints (the webhook choosing a restore, the bridge's
    retention) is by the Checkpoint's own namespace; a Checkpoint in ``team-a`` naming
    ``team-b``'s Job would otherwise be offered to ``team-b``'s pods (issue 11 item 2).
    """
    found, trimmed = _long_lists(obj)
    if found:
        return found
    found = _parse_errors(checkpoint.load, trimmed)
    if found:
        return found
    namespace = (obj.get("metadata") or {}).get("namespace")
    claimed = ((obj.get("spec") or {}).get("lineage") or {}).get("namespace")
    if namespace and claimed != namespace:
        found.append(
            FieldError(
                "spec.lineage.namespace",
                f"must be the Checkpoint's own namespace {namespace!r}, not {claimed!r}",
            )
        )
    return found


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


def _finalizers(obj: Obj | None) -> list[str]:
    return list(((obj or {}).get("metadata") or {}).get("finalizers") or [])


def changed_reserved_annotations(pod: Obj, old_pod: Obj) -> list[FieldError]:
    """UPDATE: a reserved annotation added, changed or removed, or our finalizer added.

    Removing the finalizer stays allowed: it is the documented way out for a pod stuck
    terminating while the bridge is down (docs/operations.md).
    """
    new, old = _annotations(pod), _annotations(old_pod)
    found = [
        FieldError(f"metadata.annotations[{key}]", "reserved for Kontinue; may not be changed")
        for key in sorted(keys.RESERVED_POD_ANNOTATIONS)
        if new.get(key) != old.get(key)
    ]
    if keys.CHECKPOINT_FINALIZER in _finalizers(pod) and (
        keys.CHECKPOINT_FINALIZER not in _finalizers(old_pod)
    ):
        found.append(
            FieldError(
                "metadata.finalizers",
                f"{keys.CHECKPOINT_FINALIZER} is reserved for Kontinue; may not be added",
            )
        )
    return found


def inside_lineage(path: str, pod_lineage: checkpoint.Lineage, *, mount_path: str) -> bool:
    """Whether ``path`` lies in the lineage's own directory under the checkpoint mount
    (:func:`kontinue.lineage.contains`, the check the restore plan applies too)."""
    return lineage.contains(path, pod_lineage, mount_path=mount_path)


def _mount_paths(container: Obj, pod_mounts: list[str]) -> list[str]:
    """Where ``container`` mounts the checkpoint volume (else where any container of the pod
    does: the restore container's paths are read from its own mount)."""
    own = [
        m["mountPath"]
        for m in container.get("volumeMounts") or []
        if m.get("name") == keys.CHECKPOINT_VOLUME and isinstance(m.get("mountPath"), str)
    ]
    return own or pod_mounts


def _policy_mount(pod: Obj, *, namespace: str, state: state_module.State) -> str:
    """Where the policy of the pod's queue mounts checkpoints (the default policy's otherwise):
    the root for a pod in which no container mounts the checkpoint volume."""
    try:
        decision = optin.decide(optin.Marks.of(pod), namespace=namespace, state=state)
    except ValueError:
        decision = None
    chosen = decision.policy if decision is not None and decision.policy else policy_model.DEFAULT
    return chosen.spec.storage.mount_path


_WATCHED_ENV = frozenset({keys.ENV_RESTORE_FROM, plumbing.ENV_RESTORE_SOURCE, keys.ENV_WAIT_FOR})


def _names_watched_env(containers: list[Obj]) -> bool:
    """Whether any container sets a variable :func:`_path_errors` checks (most pods: none, and
    then the policy lookup for their mount path is skipped; issue 14)."""
    return any(env.get("name") in _WATCHED_ENV for c in containers for env in c.get("env") or [])


def _path_errors(
    containers: list[Obj], field: str, pod_lineage: checkpoint.Lineage | None, pod_mounts: list[str]
) -> list[FieldError]:
    found: list[FieldError] = []
    watched = _WATCHED_ENV
    for i, container in enumerate(containers):
        mounts = _mount_paths(container, pod_mounts)
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
            elif not isinstance(value, str) or not any(
                inside_lineage(value, pod_lineage, mount_path=m) for m in mounts
            ):
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
        return capped(list(exc.errors))
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
    if keys.CHECKPOINT_FINALIZER in _finalizers(pod) and (
        pod_lineage is None or keys.LINEAGE_ANNOTATION not in annotations
    ):
        # The mutating webhook adds the finalizer together with the lineage annotation, and
        # only to a pod with a lineage: without both, the requester put it there.
        found.append(
            FieldError(
                "metadata.finalizers",
                f"{keys.CHECKPOINT_FINALIZER} is reserved for Kontinue; may not be set "
                + ("on a pod without a controller" if pod_lineage is None else "by hand"),
            )
        )
    spec: Obj = pod.get("spec") or {}
    containers: list[Obj] = [*(spec.get("initContainers") or []), *(spec.get("containers") or [])]
    if not _names_watched_env(containers):
        return capped(found)  # no path to check: the mounts below would go unread
    pod_mounts = [
        m["mountPath"]
        for c in containers
        for m in c.get("volumeMounts") or []
        if m.get("name") == keys.CHECKPOINT_VOLUME and isinstance(m.get("mountPath"), str)
    ] or [_policy_mount(pod, namespace=namespace, state=state)]
    found += _path_errors(spec.get("containers") or [], "spec.containers", pod_lineage, pod_mounts)
    found += _path_errors(
        spec.get("initContainers") or [], "spec.initContainers", pod_lineage, pod_mounts
    )
    return capped(found)
