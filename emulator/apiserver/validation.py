"""Validation that answers 422 Invalid with a field path, as kube-apiserver does.

Metadata: name (or generateName) required, DNS-1123-ish names (apimachinery
pkg/api/validation/objectmeta.go). Pods: ``spec.containers`` with name and image
(pkg/apis/core/validation/validation.go). Jobs: a podFailurePolicy rule's container name must be
in the pod template (pkg/apis/batch/validation/validation.go). Custom resources: a light walk of
the CRD's ``openAPIV3Schema`` (types, ``required``, ``enum``, ``nullable``, int-or-string, preserve
unknown fields), the part of apiextensions-apiserver's schema validation that catches a missing or
mistyped field. No CEL rules, no formats, no pruning: see docs/testing.md.
"""

from __future__ import annotations

import re
from typing import Any

from emulator.apiserver import kinds, statuses

Cause = tuple[str, str, str]  # (field, reason, message)

_NAME = re.compile(r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")


def _required(field: str, detail: str = "") -> Cause:
    return (field, "FieldValueRequired", "Required value" + (f": {detail}" if detail else ""))


def _value(value: Any) -> str:
    if isinstance(value, str):
        return f'"{value}"'
    return repr(value)


def _metadata(obj: dict[str, Any], kind: kinds.Kind) -> list[Cause]:
    meta = obj.get("metadata") or {}
    causes: list[Cause] = []
    name = meta.get("name")
    if not name:
        causes.append(_required("metadata.name", "name or generateName is required"))
    elif not _NAME.match(name) or len(name) > 253:
        causes.append(
            (
                "metadata.name",
                "FieldValueInvalid",
                f"Invalid value: {_value(name)}: a lowercase RFC 1123 subdomain must consist of "
                "lower case alphanumeric characters, '-' or '.', and must start and end with an "
                "alphanumeric character",
            )
        )
    if kind.namespaced and not meta.get("namespace"):
        causes.append(_required("metadata.namespace"))
    return causes


def _pod(obj: dict[str, Any]) -> list[Cause]:
    spec = obj.get("spec") or {}
    containers = spec.get("containers")
    if not containers:
        return [_required("spec.containers")]
    causes: list[Cause] = []
    for i, container in enumerate(containers):
        if not container.get("name"):
            causes.append(_required(f"spec.containers[{i}].name"))
        if not container.get("image"):
            causes.append(_required(f"spec.containers[{i}].image"))
    return causes


_TYPES: dict[str, tuple[type, ...]] = {
    "object": (dict,),
    "array": (list,),
    "string": (str,),
    "integer": (int,),
    "number": (int, float),
    "boolean": (bool,),
}


def _schema(value: Any, schema: dict[str, Any], path: str, causes: list[Cause]) -> None:
    if value is None:
        if not schema.get("nullable"):
            causes.append(
                (
                    path,
                    "FieldValueTypeInvalid",
                    f'Invalid value: "null": {path} in body must be of type '
                    f'{schema.get("type", "object")}: "null"',
                )
            )
        return
    if schema.get("x-kubernetes-int-or-string"):
        if not isinstance(value, int | str) or isinstance(value, bool):
            causes.append(
                (
                    path,
                    "FieldValueTypeInvalid",
                    f"Invalid value: {_value(value)}: {path} in body must be of type int-or-string",
                )
            )
        return
    expected = schema.get("type")
    if expected in _TYPES:
        ok = isinstance(value, _TYPES[expected]) and not (
            isinstance(value, bool) and expected in ("integer", "number")
        )
        if not ok:
            causes.append(
                (
                    path,
                    "FieldValueTypeInvalid",
                    f"Invalid value: {_value(value)}: {path} in body must be of type {expected}: "
                    f'"{type(value).__name__}"',
                )
            )
            return
    if "enum" in schema and value not in schema["enum"]:
        allowed = ", ".join(_value(v) for v in schema["enum"])
        causes.append(
            (
                path,
                "FieldValueNotSupported",
                f"Unsupported value: {_value(value)}: supported values: {allowed}",
            )
        )
    if isinstance(value, dict):
        for required in schema.get("required") or ():
            if required not in value:
                causes.append(_required(f"{path}.{required}" if path else required))
        props = schema.get("properties") or {}
        extra = schema.get("additionalProperties")
        for key, sub in value.items():
            sub_path = f"{path}.{key}" if path else key
            if key in props:
                _schema(sub, props[key], sub_path, causes)
            elif isinstance(extra, dict):
                _schema(sub, extra, sub_path, causes)
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        for i, item in enumerate(value):
            _schema(item, schema["items"], f"{path}[{i}]", causes)


def _job(obj: dict[str, Any]) -> list[Cause]:
    """A podFailurePolicy rule's ``onExitCodes.containerName`` must name a container or init
    container of the pod template (kubernetes/kubernetes pkg/apis/batch/validation/validation.go
    ``validatePodFailurePolicyRuleOnExitCodes``)."""
    spec = obj.get("spec") or {}
    template = (spec.get("template") or {}).get("spec") or {}
    names = {
        c.get("name")
        for c in [*(template.get("containers") or []), *(template.get("initContainers") or [])]
    }
    causes: list[Cause] = []
    for i, rule in enumerate((spec.get("podFailurePolicy") or {}).get("rules") or []):
        name = (rule.get("onExitCodes") or {}).get("containerName")
        if name is not None and name not in names:
            causes.append(
                (
                    f"spec.podFailurePolicy.rules[{i}].onExitCodes.containerName",
                    "FieldValueInvalid",
                    f"Invalid value: {_value(name)}: must be one of the container or "
                    "initContainer names in the pod template",
                )
            )
    return causes


def validate(obj: dict[str, Any], kind: kinds.Kind) -> None:
    """Raise ``Invalid`` (422) naming every bad field of ``obj``."""
    causes = _metadata(obj, kind)
    if kind.key == ("", "pods"):
        causes += _pod(obj)
    if kind.key == ("batch", "jobs"):
        causes += _job(obj)
    if kind.schema is not None:
        body = {k: v for k, v in obj.items() if k not in ("metadata", "apiVersion", "kind")}
        schema = dict(kind.schema)
        schema["properties"] = {
            k: v
            for k, v in (schema.get("properties") or {}).items()
            if k not in ("metadata", "apiVersion", "kind")
        }
        schema["required"] = [
            r for r in schema.get("required") or () if r not in ("metadata", "apiVersion", "kind")
        ]
        _schema(body, schema, "", causes)
    if causes:
        name = (obj.get("metadata") or {}).get("name") or ""
        raise statuses.invalid(kind.group, kind.kind, name, causes)


# --- updates ------------------------------------------------------------------------------------

_POD_MUTABLE = (
    "`spec.containers[*].image`,`spec.initContainers[*].image`,`spec.activeDeadlineSeconds`,"
    "`spec.tolerations` (only additions to existing tolerations),"
    "`spec.terminationGracePeriodSeconds` (allow it to be set to 1 if it was previously negative)"
)


def _masked_pod_spec(spec: dict[str, Any], old: dict[str, Any]) -> dict[str, Any]:
    """``spec`` with the fields a pod update may change replaced by the old values."""
    masked = dict(spec)
    for field in ("containers", "initContainers"):
        olds = {c.get("name"): c for c in old.get(field) or []}
        masked[field] = [
            {**c, "image": olds.get(c.get("name"), c).get("image")} for c in spec.get(field) or []
        ]
    masked.pop("activeDeadlineSeconds", None)
    masked["tolerations"] = old.get("tolerations")
    masked["schedulingGates"] = old.get("schedulingGates")
    # Deviation: the emulated scheduler binds with a patch of spec.nodeName while pods/binding is
    # new here; upstream only allows that through the binding subresource.
    if not old.get("nodeName"):
        masked["nodeName"] = old.get("nodeName")
    return {k: v for k, v in masked.items() if v is not None}


def _pod_update(new: dict[str, Any], old: dict[str, Any]) -> list[Cause]:
    """pkg/apis/core/validation/validation.go ``ValidatePodUpdate``: the pod spec is frozen."""
    new_spec, old_spec = new.get("spec") or {}, old.get("spec") or {}
    causes: list[Cause] = []
    tolerations = old_spec.get("tolerations") or []
    if any(t not in (new_spec.get("tolerations") or []) for t in tolerations):
        causes.append(
            (
                "spec.tolerations",
                "FieldValueForbidden",
                "Forbidden: existing toleration can not be modified except its tolerationSeconds",
            )
        )
    gates = new_spec.get("schedulingGates") or []
    if any(g not in (old_spec.get("schedulingGates") or []) for g in gates):
        causes.append(
            (
                "spec.schedulingGates",
                "FieldValueForbidden",
                "Forbidden: only deletion is allowed, but found new scheduling gate",
            )
        )
    old_masked = {k: v for k, v in old_spec.items() if v is not None}
    old_masked.pop("activeDeadlineSeconds", None)
    if _masked_pod_spec(new_spec, old_spec) != _masked_pod_spec(old_masked, old_spec):
        causes.append(
            (
                "spec",
                "FieldValueForbidden",
                f"Forbidden: pod updates may not change fields other than {_POD_MUTABLE}",
            )
        )
    return causes


_TEMPLATE_SCHEDULING = ("nodeSelector", "tolerations", "affinity", "schedulingGates")


def scheduling_directives_mutable(old: dict[str, Any]) -> bool:
    """Whether a Job's template may change its labels, annotations and scheduling directives.

    kubernetes/kubernetes v1.36 ``pkg/registry/batch/job/strategy.go`` ``validationOptionsForJob``
    with the ``MutableSchedulingDirectivesForSuspendedJobs`` gate (beta, on): the old Job is
    suspended and either never started (``status.startTime`` empty) or fully suspended (its
    ``Suspended`` condition True and ``status.active == 0``) — the ``notStarted ||`` half is the
    1.36 regression fix kubernetes/kubernetes#139287 (cherry-picked to release-1.36). Measured on
    a real v1.36.2 kube-apiserver (tests/realcp/test_emulator_agreement.py): a suspended Job
    whose ``startTime`` was written back is still mutable once ``Suspended`` is True, and not
    while ``active`` is 1."""
    spec, status = old.get("spec") or {}, old.get("status") or {}
    if not spec.get("suspend"):
        return False
    if not status.get("startTime"):
        return True
    suspended = any(
        c.get("type") == "Suspended" and c.get("status") == "True"
        for c in status.get("conditions") or []
    )
    return suspended and not status.get("active")


def _job_update(new: dict[str, Any], old: dict[str, Any]) -> list[Cause]:
    """pkg/apis/batch/validation/validation.go ``ValidateJobSpecUpdate``: selector and template
    are immutable, except that a suspended Job may change its template's labels, annotations and
    scheduling directives (what Kueue's podSetUpdates write) while
    :func:`scheduling_directives_mutable`."""
    new_spec, old_spec = new.get("spec") or {}, old.get("spec") or {}
    causes: list[Cause] = []
    if new_spec.get("selector") != old_spec.get("selector"):
        causes.append(("spec.selector", "FieldValueInvalid", "Invalid value: field is immutable"))
    new_t, old_t = new_spec.get("template") or {}, old_spec.get("template") or {}
    if new_t != old_t:
        if scheduling_directives_mutable(old):
            strip = {
                "metadata": {
                    k: v
                    for k, v in (new_t.get("metadata") or {}).items()
                    if k not in ("labels", "annotations")
                },
                "spec": {
                    k: v
                    for k, v in (new_t.get("spec") or {}).items()
                    if k not in _TEMPLATE_SCHEDULING
                },
            }
            was = {
                "metadata": {
                    k: v
                    for k, v in (old_t.get("metadata") or {}).items()
                    if k not in ("labels", "annotations")
                },
                "spec": {
                    k: v
                    for k, v in (old_t.get("spec") or {}).items()
                    if k not in _TEMPLATE_SCHEDULING
                },
            }
            if strip == was:
                return causes
        causes.append(("spec.template", "FieldValueInvalid", "Invalid value: field is immutable"))
    return causes


def validate_update(new: dict[str, Any], old: dict[str, Any], kind: kinds.Kind) -> None:
    """Raise ``Invalid`` (422) for changes the kind forbids (immutable fields)."""
    causes: list[Cause] = []
    if kind.key == ("", "pods"):
        causes = _pod_update(new, old)
    elif kind.key == ("batch", "jobs"):
        causes = _job_update(new, old)
    if causes:
        raise statuses.invalid(kind.group, kind.kind, new["metadata"].get("name", ""), causes)
