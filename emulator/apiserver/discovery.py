"""Discovery documents: /api, /apis, /apis/<group>, and each group/version's resource list.

Copies the unaggregated (v1) discovery of staging/src/k8s.io/apiserver/pkg/endpoints/discovery:
APIVersions, APIGroupList, APIGroup and APIResourceList, with a ``<plural>/status`` entry for
kinds with a status subresource, and CRD versions ordered by Kubernetes version priority
(apimachinery/pkg/version/helpers.go ``CompareKubeAwareVersionStrings``).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from emulator.apiserver import kinds

Object = dict[str, Any]


def _priority(version: str) -> tuple[int, int, int]:
    m = re.fullmatch(r"v(\d+)(?:(alpha|beta)(\d+))?", version)
    if not m:
        return (-1, 0, 0)
    major, stage, minor = m.groups()
    rank = {"alpha": 0, "beta": 1, None: 2}[stage]
    return (rank, int(major), int(minor or 0))


def versions(address: str) -> Object:
    return {
        "kind": "APIVersions",
        "versions": ["v1"],
        "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": address}],
    }


def _group(name: str, group_versions: Iterable[str]) -> Object:
    ordered = sorted(set(group_versions), key=_priority, reverse=True)
    entries = [{"groupVersion": f"{name}/{v}", "version": v} for v in ordered]
    return {"name": name, "versions": entries, "preferredVersion": entries[0]}


def _by_group(all_kinds: Iterable[kinds.Kind]) -> dict[str, set[str]]:
    groups: dict[str, set[str]] = {}
    for kind in all_kinds:
        if kind.group:
            groups.setdefault(kind.group, set()).add(kind.version)
    return groups


def group_list(all_kinds: Iterable[kinds.Kind]) -> Object:
    groups = _by_group(all_kinds)
    return {
        "kind": "APIGroupList",
        "apiVersion": "v1",
        "groups": [_group(name, vs) for name, vs in sorted(groups.items())],
    }


def group(all_kinds: Iterable[kinds.Kind], name: str) -> Object | None:
    found = _by_group(all_kinds).get(name)
    if not found:
        return None
    return {"kind": "APIGroup", "apiVersion": "v1", **_group(name, found)}


def resource_list(all_kinds: Iterable[kinds.Kind], group_name: str, version: str) -> Object | None:
    served = sorted(
        (k for k in all_kinds if k.group == group_name and k.version == version),
        key=lambda k: k.plural,
    )
    if not served:
        return None
    resources: list[Object] = []
    for kind in served:
        entry: Object = {
            "name": kind.plural,
            "singularName": kind.singular,
            "namespaced": kind.namespaced,
            "kind": kind.kind,
            "verbs": list(kinds.VERBS),
        }
        if kind.short_names:
            entry["shortNames"] = list(kind.short_names)
        resources.append(entry)
        if kind.key == ("", "pods"):
            resources.append(
                {
                    "name": "pods/binding",
                    "singularName": "",
                    "namespaced": True,
                    "kind": "Binding",
                    "verbs": ["create"],
                }
            )
            resources.append(
                {
                    "name": "pods/eviction",
                    "singularName": "",
                    "namespaced": True,
                    "group": "policy",
                    "version": "v1",
                    "kind": "Eviction",
                    "verbs": ["create"],
                }
            )
        if kind.status:
            resources.append(
                {
                    "name": f"{kind.plural}/status",
                    "singularName": "",
                    "namespaced": kind.namespaced,
                    "kind": kind.kind,
                    "verbs": ["get", "patch", "update"],
                }
            )
    group_version = f"{group_name}/{version}" if group_name else version
    return {
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": group_version,
        "resources": resources,
    }
