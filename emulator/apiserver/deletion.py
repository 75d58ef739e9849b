"""What a DELETE does to an object: pure decisions, the registry does the writing.

Copies staging/src/k8s.io/apiserver/pkg/registry/rest/delete.go ``BeforeDelete`` and the pod
strategy's ``CheckGracefulDelete`` (pkg/registry/core/pod/strategy.go):
- a pod's grace period is the request's, else ``spec.terminationGracePeriodSeconds`` (defaulted
  to 30); a pod not bound to a node or already terminal goes at once (grace 0);
- a pod deleted with grace > 0 gets deletionTimestamp (now + grace) and
  deletionGracePeriodSeconds and stays until someone (the kubelet) deletes it with grace 0;
- a second DELETE may only shorten a pod's grace period;
- an object with finalizers gets deletionTimestamp and deletionGracePeriodSeconds 0 and stays;
  removing its last finalizer then deletes it (``finished``);
- anything else is removed at once; generation grows when deletionTimestamp is first set.
Garbage collection: batch/v1 Jobs default to ``Orphan`` (pkg/registry/batch/job/strategy.go
``DefaultGarbageCollectionPolicy``), everything else to ``Background``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any, Literal

from emulator.apiserver import kinds, statuses
from kontinue import json_copy

Object = dict[str, Any]
_PODS = ("", "pods")


def check_preconditions(kind: kinds.Kind, obj: Object, preconditions: Mapping[str, Any]) -> None:
    meta = obj["metadata"]
    for field, value in preconditions.items():
        if value is not None and meta.get(field) != value:
            label = "UID" if field == "uid" else "ResourceVersion"
            raise statuses.conflict(
                kind.group,
                kind.plural,
                meta["name"],
                f"Precondition failed: {label} in precondition: {value}, "
                f"{label} in object meta: {meta.get(field)}",
            )


def effective_grace(kind: kinds.Kind, obj: Object, requested: int | None) -> int | None:
    """The grace period the apiserver resolves (and shows webhooks in DeleteOptions)."""
    if kind.key != _PODS:
        return requested
    spec = obj.get("spec") or {}
    grace = int(spec.get("terminationGracePeriodSeconds", 30)) if requested is None else requested
    if not spec.get("nodeName"):
        return 0
    if (obj.get("status") or {}).get("phase") in ("Failed", "Succeeded"):
        return 0
    return grace


@dataclasses.dataclass(frozen=True)
class Plan:
    action: Literal["keep", "update", "remove"]
    obj: Object


def plan(
    kind: kinds.Kind, current: Object, grace: int | None, *, now: Callable[[float], str]
) -> Plan:
    """keep (nothing changes), update (store ``obj``: terminating), or remove."""
    new = json_copy.copied(current)
    meta = new["metadata"]
    finalizers = bool(meta.get("finalizers"))
    is_pod = kind.key == _PODS
    if meta.get("deletionTimestamp"):
        current_grace = int(meta.get("deletionGracePeriodSeconds") or 0)
        if not is_pod or grace is None or grace >= current_grace:
            return Plan("keep", current)
        meta["deletionTimestamp"] = now(grace)
        meta["deletionGracePeriodSeconds"] = grace
        return Plan("update", new) if grace > 0 or finalizers else Plan("remove", current)
    if (is_pod and grace) or finalizers:
        meta["deletionTimestamp"] = now(grace if is_pod and grace else 0)
        meta["deletionGracePeriodSeconds"] = grace if is_pod and grace else 0
        meta["generation"] = int(meta.get("generation", 1)) + 1
        return Plan("update", new)
    return Plan("remove", current)


def finished(obj: Object) -> bool:
    """Terminating, no finalizers left, no grace period left: an update completes the delete."""
    meta = obj["metadata"]
    return bool(
        meta.get("deletionTimestamp")
        and not meta.get("finalizers")
        and not meta.get("deletionGracePeriodSeconds")
    )


def propagation(kind: kinds.Kind, requested: str | None) -> str:
    if requested:
        return requested
    return "Orphan" if kind.key == ("batch", "jobs") else "Background"
