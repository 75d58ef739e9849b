"""Resource quantities as integers of milli-units (k8s.io/apimachinery pkg/api/resource).

Kueue and Volcano compare requests with quotas exactly, so quantities are parsed into integer
milli-units (``"500m"`` -> 500, ``"2"`` -> 2000, ``"1Gi"`` -> 1073741824000). Only the suffixes a
Kubernetes quantity may carry are accepted; anything else raises ``ValueError`` naming the text.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from emulator import quantity as exact

_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40}

Resources = dict[str, int]


def milli(value: object) -> int:
    """``value`` (a quantity string or a number) in milli-units, rounded up like the apiserver.

    Parsing is :func:`emulator.quantity.parse`'s (one parser for the whole emulated cluster);
    a malformed quantity raises its ``InvalidQuantity`` (a ``ValueError``) naming the text.
    """
    return math.ceil(exact.parse(value) * 1000)


def parse(resources: Mapping[str, object] | None) -> Resources:
    return {name: milli(value) for name, value in (resources or {}).items()}


def render(name: str, value: int) -> str:
    """A milli-unit integer back as a canonical-enough quantity for status fields."""
    if value % 1000 == 0:
        whole = value // 1000
        if name == "memory" or name.endswith("storage"):
            for suffix in ("Ti", "Gi", "Mi", "Ki"):
                if whole and whole % _BINARY[suffix] == 0:
                    return f"{whole // _BINARY[suffix]}{suffix}"
        return str(whole)
    return f"{value}m"


def add(a: Mapping[str, int], b: Mapping[str, int]) -> Resources:
    out = dict(a)
    for name, value in b.items():
        out[name] = out.get(name, 0) + value
    return out


def pod_requests(spec: Mapping[str, Any]) -> Resources:
    """What one pod asks for, the way the scheduler and Kueue count it
    (k8s pkg/api/v1/resource ``PodRequests``): containers plus native sidecars, at least each init
    container plus the sidecars started before it, plus overhead. A container's missing request
    defaults to its limit (extended resources such as ``nvidia.com/gpu`` are often set as limits
    only, and the apiserver copies them into requests)."""

    def container(c: Any) -> Resources:
        if not isinstance(c, dict):
            return {}
        res = c.get("resources") or {}
        out = parse(res.get("limits"))
        out.update(parse(res.get("requests")))
        return out

    total: Resources = {}
    for c in spec.get("containers") or []:
        total = add(total, container(c))
    sidecars: Resources = {}
    peaks: list[Resources] = []
    for c in spec.get("initContainers") or []:
        wanted = container(c)
        if isinstance(c, dict) and c.get("restartPolicy") == "Always":
            sidecars = add(sidecars, wanted)
        else:
            peaks.append(add(wanted, sidecars))
    total = add(total, sidecars)
    for peak in peaks:
        for name, value in peak.items():
            total[name] = max(total.get(name, 0), value)
    return add(total, parse(spec.get("overhead")))
