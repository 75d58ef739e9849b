"""Validation that answers 422 Invalid with a field path, as kube-apiserver does.

Metadata: name (or generateName) required, DNS-1123-ish names (apimachinery
pkg/api/validation/objectmeta.go). Pods: ``spec.containers`` with name and image
(pkg/apis/core/validation/validation.go). Custom resources: a light walk of the CRD's
``openAPIV3Schema`` (types, ``required``, ``enum``, ``nullable``, int-or-string, preserve
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


def validate(obj: dict[str, Any], kind: kinds.Kind) -> None:
    """Raise ``Invalid`` (422) naming every bad field of ``obj``."""
    causes = _metadata(obj, kind)
    if kind.key == ("", "pods"):
        causes += _pod(obj)
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
