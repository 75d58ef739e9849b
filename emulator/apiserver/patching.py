"""JSON patch (RFC 6902), JSON merge patch (RFC 7386) and strategic merge patch.

Strategic merge copies staging/src/k8s.io/apimachinery/pkg/util/strategicpatch/patch.go for the
parts Kontinue and the emulated controllers use: lists keyed by their ``patchMergeKey`` (read
here from ``MERGE_KEYS``, which mirrors the ``patchStrategy:"merge"`` tags of
staging/src/k8s.io/api/core/v1/types.go), primitive lists merged as sets (finalizers),
``$patch: delete|replace`` and ``$deleteFromPrimitiveList/<field>``; ``$setElementOrder`` and
``$retainKeys`` are accepted and ignored. Lists not in the table are replaced, as upstream.
"""

from __future__ import annotations

import json
from typing import Any

from emulator.apiserver import statuses
from kontinue import json_copy

# field name -> merge key of its items (core/v1 and batch/v1 ``patchMergeKey`` tags)
MERGE_KEYS: dict[str, str] = {
    "containers": "name",
    "initContainers": "name",
    "ephemeralContainers": "name",
    "env": "name",
    "volumes": "name",
    "volumeMounts": "mountPath",
    "volumeDevices": "devicePath",
    "imagePullSecrets": "name",
    "conditions": "type",
    "ownerReferences": "uid",
    "hostAliases": "ip",
    "topologySpreadConstraints": "topologyKey",
    "resourceClaims": "name",
    "ports": "containerPort",  # container ports; service ports use "port" (see below)
    "podIPs": "ip",
    "addresses": "type",
    "taints": "key",
}
# primitive lists with patchStrategy "merge" (merged as sets)
SET_LISTS = frozenset({"finalizers"})


def merge_key(field: str, items: list[Any]) -> str | None:
    key = MERGE_KEYS.get(field)
    if field == "ports" and any(isinstance(i, dict) and "port" in i for i in items):
        return "port"
    return key


# --- JSON patch --------------------------------------------------------------------------------


def _pointer(path: str) -> list[str]:
    if path == "":
        return []
    if not path.startswith("/"):
        raise statuses.bad_request(f"invalid JSON pointer {path!r}")
    return [p.replace("~1", "/").replace("~0", "~") for p in path[1:].split("/")]


def _parent(doc: Any, parts: list[str], path: str) -> tuple[Any, str]:
    node = doc
    for part in parts[:-1]:
        if isinstance(node, dict) and part in node:
            node = node[part]
        elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        else:
            raise statuses.invalid_patch(f"doc is missing path: {path!r}")
    return node, parts[-1]


def _get(doc: Any, path: str) -> Any:
    parts = _pointer(path)
    if not parts:
        return doc
    parent, last = _parent(doc, parts, path)
    if isinstance(parent, dict) and last in parent:
        return parent[last]
    if isinstance(parent, list) and last.isdigit() and int(last) < len(parent):
        return parent[int(last)]
    raise statuses.invalid_patch(f"doc is missing path: {path!r}")


def _remove(doc: Any, path: str) -> Any:
    parent, last = _parent(doc, _pointer(path), path)
    if isinstance(parent, dict) and last in parent:
        return parent.pop(last)
    if isinstance(parent, list) and last.isdigit() and int(last) < len(parent):
        return parent.pop(int(last))
    raise statuses.invalid_patch(f"doc is missing path: {path!r}")


def _add(doc: Any, path: str, value: Any) -> Any:
    parts = _pointer(path)
    if not parts:
        return value
    parent, last = _parent(doc, parts, path)
    if isinstance(parent, dict):
        parent[last] = value
    elif isinstance(parent, list):
        if last == "-":
            parent.append(value)
        elif last.isdigit() and int(last) <= len(parent):
            parent.insert(int(last), value)
        else:
            raise statuses.invalid_patch(f"index out of range in {path!r}")
    else:
        raise statuses.invalid_patch(f"doc is missing path: {path!r}")
    return doc


def json_patch(doc: dict[str, Any], operations: Any) -> dict[str, Any]:
    """Apply RFC 6902 operations to a copy of ``doc``."""
    if not isinstance(operations, list):
        raise statuses.bad_request("a JSON patch must be a list of operations")
    result: Any = json_copy.copied(doc)
    for op in operations:
        if not isinstance(op, dict) or "op" not in op or "path" not in op:
            raise statuses.bad_request(f"invalid JSON patch operation: {op!r}")
        kind, path = op["op"], op["path"]
        if kind == "add":
            result = _add(result, path, json_copy.copied(op.get("value")))
        elif kind == "remove":
            _remove(result, path)
        elif kind == "replace":
            _get(result, path)
            if _pointer(path):
                _remove(result, path)
            result = _add(result, path, json_copy.copied(op.get("value")))
        elif kind == "move":
            value = _remove(result, op["from"])
            result = _add(result, path, value)
        elif kind == "copy":
            result = _add(result, path, json_copy.copied(_get(result, op["from"])))
        elif kind == "test":
            if _get(result, path) != op.get("value"):
                raise statuses.invalid_patch(f"testing value {path} failed")
        else:
            raise statuses.bad_request(f"unexpected JSON patch operation {kind!r}")
    if not isinstance(result, dict):
        raise statuses.bad_request("the patched document is not an object")
    return result


# --- JSON merge patch --------------------------------------------------------------------------


def merge_patch(doc: Any, patch: Any) -> Any:
    """RFC 7386: maps merge, ``null`` deletes, everything else (lists too) replaces."""
    if not isinstance(patch, dict):
        return json_copy.copied(patch)
    result = json_copy.copied(doc) if isinstance(doc, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


# --- strategic merge patch ---------------------------------------------------------------------

_DIRECTIVE = "$patch"
_DELETE_PRIMITIVE = "$deleteFromPrimitiveList/"
_IGNORED_PREFIXES = ("$setElementOrder/", "$retainKeys")


def strategic_merge(doc: Any, patch: Any) -> Any:
    if not isinstance(patch, dict):
        return json_copy.copied(patch)
    if patch.get(_DIRECTIVE) == "replace":
        return {k: json_copy.copied(v) for k, v in patch.items() if k != _DIRECTIVE}
    if patch.get(_DIRECTIVE) == "delete":
        return None
    result = json_copy.copied(doc) if isinstance(doc, dict) else {}
    for key, value in patch.items():
        if key == _DIRECTIVE or key.startswith(_IGNORED_PREFIXES):
            continue
        if key.startswith(_DELETE_PRIMITIVE):
            field = key[len(_DELETE_PRIMITIVE) :]
            drop = {json.dumps(v) for v in value or ()}
            result[field] = [v for v in result.get(field) or [] if json.dumps(v) not in drop]
            continue
        if value is None:
            result.pop(key, None)
        elif isinstance(value, list):
            result[key] = _merge_list(key, result.get(key), value)
        elif isinstance(value, dict):
            merged = strategic_merge(result.get(key), value)
            if merged is None:
                result.pop(key, None)
            else:
                result[key] = merged
        else:
            result[key] = value
    return result


def _merge_list(field: str, current: Any, patch: list[Any]) -> list[Any]:
    current = list(current) if isinstance(current, list) else []
    if any(isinstance(p, dict) and p.get(_DIRECTIVE) == "replace" for p in patch):
        kept: list[Any] = [p for p in patch if not (isinstance(p, dict) and _DIRECTIVE in p)]
        return json_copy.copied(kept)
    result: list[Any]
    if field in SET_LISTS:
        result = json_copy.copied(current)
        for item in patch:
            if item not in result:
                result.append(json_copy.copied(item))
        return result
    key = merge_key(field, current + patch)
    if key is None or not all(isinstance(p, dict) for p in patch):
        replaced: list[Any] = json_copy.copied(patch)
        return replaced
    result = json_copy.copied(current)
    for item in patch:
        if key not in item:
            raise statuses.bad_request(f"map: {item} does not contain declared merge key: {key}")
        index = next(
            (i for i, c in enumerate(result) if isinstance(c, dict) and c.get(key) == item[key]),
            None,
        )
        if item.get(_DIRECTIVE) == "delete":
            if index is not None:
                result.pop(index)
        elif index is None:
            result.append(strategic_merge({}, item))
        else:
            result[index] = strategic_merge(result[index], item)
    return result
