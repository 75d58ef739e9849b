"""Resource quantities as integers of milli-units (k8s.io/apimachinery pkg/api/resource).

Kueue and Volcano compare requests with quotas exactly, so quantities are parsed into integer
milli-units (``"500m"`` -> 500, ``"2"`` -> 2000, ``"1Gi"`` -> 1073741824000). Only the suffixes a
Kubernetes quantity may carry are accepted; anything else raises ``ValueError`` naming the text.
"""

from __future__ import annotations

import decimal
import re
from collections.abc import Mapping
from typing import Any

_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {
    "n": decimal.Decimal("1e-9"),
    "u": decimal.Decimal("1e-6"),
    "m": decimal.Decimal("1e-3"),
    "": decimal.Decimal(1),
    "k": decimal.Decimal(10**3),
    "M": decimal.Decimal(10**6),
    "G": decimal.Decimal(10**9),
    "T": decimal.Decimal(10**12),
    "P": decimal.Decimal(10**15),
    "E": decimal.Decimal(10**18),
}
_FORM = re.compile(r"^([+-]?[0-9.]+(?:[eE][+-]?[0-9]+)?)(Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E)?$")

Resources = dict[str, int]


def milli(value: object) -> int:
    """``value`` (a quantity string or a number) in milli-units, rounded up like the apiserver."""
    text = str(value).strip()
    match = _FORM.match(text)
    if match is None:
        raise ValueError(f"quantities must match the regular expression of a quantity: {text!r}")
    number, suffix = decimal.Decimal(match.group(1)), match.group(2) or ""
    scale = decimal.Decimal(_BINARY[suffix]) if suffix in _BINARY else _DECIMAL[suffix]
    return int((number * scale * 1000).to_integral_value(rounding=decimal.ROUND_CEILING))


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
