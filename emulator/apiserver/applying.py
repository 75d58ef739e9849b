"""Server-side apply (``application/apply-patch+yaml``) with field ownership per manager.

A small copy of sigs.k8s.io/structured-merge-diff (merge/update.go) as the apiserver uses it
(staging/src/k8s.io/apiserver/pkg/endpoints/handlers/fieldmanager): each apply records the set of
field paths its manager applied; applying again removes the fields that manager applied before and
omits now, unless another manager also owns them; list-maps (``x-kubernetes-list-type: map``, or
the core merge keys) merge item by item, sets by value, other lists are atomic. A field another
manager owns with a different value is a 409 conflict unless ``force``; with ``force`` it changes
hands. An ordinary update (PUT/PATCH) takes ownership of what it changed away from appliers.

Not copied: ``metadata.managedFields`` is not written (ownership lives in the emulator), no
``x-kubernetes-map-type: atomic``, and no conversion between versions.
"""

from __future__ import annotations

import json
from typing import Any

from emulator.apiserver import patching, statuses
from kontinue import json_copy
from kontinue.kube import errors

Object = dict[str, Any]
Path = tuple[str, ...]
Owners = dict[str, set[Path]]

_MISSING = object()
_TOP_SKIP = ("apiVersion", "kind")
_META_OWNED = ("labels", "annotations", "finalizers", "ownerReferences")


def _list_info(
    schema: Object | None, field: str, items: list[Any], typed: bool
) -> tuple[str, list[str]]:
    """('map', keys) | ('set', []) | ('atomic', []) for the list under ``field``."""
    if typed:
        list_type = (schema or {}).get("x-kubernetes-list-type", "atomic")
        if list_type == "map":
            return "map", list((schema or {}).get("x-kubernetes-list-map-keys") or ())
        return ("set", []) if list_type == "set" else ("atomic", [])
    if field in patching.SET_LISTS:
        return "set", []
    key = patching.merge_key(field, items)
    return ("map", [key]) if key else ("atomic", [])


def _sub(schema: Object | None, key: str) -> Object | None:
    if schema is None:
        return None
    props = schema.get("properties") or {}
    if key in props:
        return dict(props[key])
    extra = schema.get("additionalProperties")
    return dict(extra) if isinstance(extra, dict) else None


def _item_key(item: Object, keys: list[str]) -> str:
    return "k:" + json.dumps({k: item.get(k) for k in keys}, sort_keys=True, separators=(",", ":"))


class Fields:
    """Paths of an object under one kind's schema (``typed``: a CRD schema governs lists)."""

    def __init__(self, schema: Object | None) -> None:
        self.schema = schema
        self.typed = schema is not None

    def paths(self, obj: Object) -> set[Path]:
        found: set[Path] = set()
        for key, value in obj.items():
            if key in _TOP_SKIP:
                continue
            if key == "metadata":
                for meta_key in _META_OWNED:
                    if meta_key in value:
                        self._walk(
                            value[meta_key],
                            None,
                            ("f:metadata", f"f:{meta_key}"),
                            meta_key,
                            found,
                            typed=False,
                        )
                continue
            self._walk(value, _sub(self.schema, key), (f"f:{key}",), key, found, typed=self.typed)
        return found

    def _walk(
        self,
        value: Any,
        schema: Object | None,
        prefix: Path,
        field: str,
        found: set[Path],
        *,
        typed: bool,
    ) -> None:
        if isinstance(value, dict) and value:
            for key, sub in value.items():
                self._walk(sub, _sub(schema, key), (*prefix, f"f:{key}"), key, found, typed=typed)
        elif isinstance(value, list) and value:
            kind, keys = _list_info(schema, field, value, typed)
            items_schema = (schema or {}).get("items")
            if kind == "map" and all(isinstance(i, dict) for i in value):
                for item in value:
                    item_path = (*prefix, _item_key(item, keys))
                    found.add(item_path)
                    for key, sub in item.items():
                        self._walk(
                            sub,
                            _sub(items_schema, key),
                            (*item_path, f"f:{key}"),
                            key,
                            found,
                            typed=typed,
                        )
            elif kind == "set":
                for item in value:
                    found.add((*prefix, "v:" + json.dumps(item, sort_keys=True)))
            else:
                found.add(prefix)
        else:
            found.add(prefix)

    def merge(self, live: Any, config: Any, path: Path = ()) -> Any:
        if isinstance(config, dict) and isinstance(live, dict):
            result = json_copy.copied(live)
            for key, value in config.items():
                result[key] = self.merge(live.get(key, _MISSING), value, (*path, f"f:{key}"))
            return result
        if isinstance(config, list) and isinstance(live, list) and path:
            kind, keys = self._info_at(path, live + config)
            if kind == "map":
                result_list = json_copy.copied(live)
                for item in config:
                    index = next(
                        (
                            i
                            for i, c in enumerate(result_list)
                            if isinstance(c, dict) and all(c.get(k) == item.get(k) for k in keys)
                        ),
                        None,
                    )
                    item_path = (*path, _item_key(item, keys))
                    if index is None:
                        result_list.append(json_copy.copied(item))
                    else:
                        result_list[index] = self.merge(result_list[index], item, item_path)
                return result_list
            if kind == "set":
                return json_copy.copied(live) + [
                    json_copy.copied(v) for v in config if v not in live
                ]
        return json_copy.copied(config)

    def _info_at(self, path: Path, items: list[Any]) -> tuple[str, list[str]]:
        schema: Object | None = self.schema
        typed = self.typed and path[0] != "f:metadata"
        for element in path:
            schema = (
                _sub(schema, element[2:])
                if element.startswith("f:")
                else (schema or {}).get("items")
            )
        return _list_info(schema, path[-1][2:], items, typed)


def _step(node: Any, element: str) -> Any:
    if element.startswith("f:") and isinstance(node, dict):
        return node.get(element[2:], _MISSING)
    if element.startswith("k:") and isinstance(node, list):
        keys = json.loads(element[2:])
        for item in node:
            if isinstance(item, dict) and all(item.get(k) == v for k, v in keys.items()):
                return item
        return _MISSING
    if element.startswith("v:") and isinstance(node, list):
        value = json.loads(element[2:])
        return value if value in node else _MISSING
    return _MISSING


def value_at(obj: Any, path: Path) -> Any:
    node = obj
    for element in path:
        node = _step(node, element)
        if node is _MISSING:
            return _MISSING
    return node


def _delete(obj: Object, path: Path) -> None:
    parent = value_at(obj, path[:-1])
    last = path[-1]
    target = _step(parent, last)
    if target is _MISSING:
        return
    if isinstance(parent, dict):
        parent.pop(last[2:], None)
    elif isinstance(parent, list):
        parent.remove(target)


def conflicts(
    owners: Owners, manager: str, live: Object, config: Object, fields: Fields
) -> list[tuple[str, Path]]:
    applied = fields.paths(config)
    found = []
    for other, paths in sorted(owners.items()):
        if other == manager:
            continue
        for path in sorted(applied & paths):
            if value_at(live, path) != value_at(config, path) and not path[-1].startswith(
                ("k:", "v:")
            ):
                found.append((other, path))
    return found


def apply(
    owners: Owners, manager: str, live: Object, config: Object, fields: Fields, *, force: bool
) -> Object:
    """The object after ``manager`` applies ``config`` to ``live``; updates ``owners`` in place.

    The caller checks ``conflicts`` first (and raises unless forced).
    """
    applied = fields.paths(config)
    if force:
        for other, paths in owners.items():
            if other != manager:
                paths -= {p for p in applied & paths if value_at(live, p) != value_at(config, p)}
    others: set[Path] = set()
    for other, paths in owners.items():
        if other != manager:
            others |= paths
    result = json_copy.copied(live)
    for path in sorted(owners.get(manager, set()) - applied, key=len, reverse=True):
        if any(o[: len(path)] == path for o in others):
            continue
        _delete(result, path)
    merged: Object = fields.merge(result, config)
    owners[manager] = applied
    for key in [k for k, v in owners.items() if not v]:
        del owners[key]
    return merged


def release_changed(owners: Owners, old: Object, new: Object, fields: Fields) -> None:
    """An ordinary update took the fields it changed: appliers no longer own them."""
    changed = {
        p for p in fields.paths(old) | fields.paths(new) if value_at(old, p) != value_at(new, p)
    }
    for paths in owners.values():
        paths -= changed


def conflict_error(
    group: str, plural: str, api_version: str, name: str, found: list[tuple[str, Path]]
) -> errors.ApiError:
    """409 naming each conflicting manager and field, worded like structured-merge-diff."""

    def dotted(path: Path) -> str:
        out = ""
        for element in path:
            if element.startswith("f:"):
                out += "." + element[2:]
            elif element.startswith("k:"):
                out += (
                    "["
                    + ",".join(f"{k}={json.dumps(v)}" for k, v in json.loads(element[2:]).items())
                    + "]"
                )
            else:
                out += "[" + element[2:] + "]"
        return out

    def who(manager: str) -> str:
        name, _, sub = manager.partition("/")
        text = f'conflict with "{name}"'
        if sub:
            text += f' with subresource "{sub}"'
        return f"{text} using {api_version}"

    lines = [f"{who(manager)}: {dotted(path)}" for manager, path in found]
    noun = "conflict" if len(found) == 1 else "conflicts"
    message = f"Apply failed with {len(found)} {noun}: " + "\n".join(lines)
    causes = [
        {"type": "FieldManagerConflict", "message": who(m), "field": dotted(p)} for m, p in found
    ]
    return errors.from_status(
        409,
        statuses.status_body(
            409,
            "Conflict",
            message,
            {"name": name, "group": group, "kind": plural, "causes": causes},
        ),
    )
