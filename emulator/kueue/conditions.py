"""Workload condition bookkeeping, as Kueue does it (pure; dict conditions in, changed in place).

Copies k8s.io/apimachinery ``meta.SetStatusCondition`` (``lastTransitionTime`` moves only when
the status flips) and Kueue's helpers in ``pkg/workload/workload.go``
(``SetQuotaReservation``, ``resetActiveCondition``, ``SyncAdmittedCondition``,
``UnsetQuotaReservationWithCondition``, ``SetRequeuedCondition``) and
``pkg/workload/evict/evict.go`` (``SetEvictedCondition``, ``resetChecksOnEviction``).
Condition timestamps have one-second resolution, as metav1.Time does on the wire.
"""

from __future__ import annotations

import datetime
from typing import Any

Object = dict[str, Any]

EVICTED = "Evicted"
PREEMPTED = "Preempted"
QUOTA_RESERVED = "QuotaReserved"
ADMITTED = "Admitted"
REQUEUED = "Requeued"
FINISHED = "Finished"

# apis/kueue/v1beta2/workload_types.go
REASON_PREEMPTED = "Preempted"
REASON_IN_CLUSTER_QUEUE = "InClusterQueue"
REASON_QUOTA_RESERVED = "QuotaReserved"
REASON_PENDING_EVALUATION = "PendingEvaluation"
REASON_WAITING_FOR_QUOTA = "WaitingForQuota"
REASON_WAITING_FOR_PREEMPTED = "WaitingForPreemptedWorkloads"
REASON_NO_RESERVATION = "NoReservation"
REASON_UNSATISFIED_CHECKS = "UnsatisfiedAdmissionChecks"
REASON_ADMITTED = "Admitted"
REASON_FAILED_TO_START = "FailedToStart"
REASON_SUCCEEDED = "Succeeded"
REASON_FAILED = "Failed"

CHECK_PENDING = "Pending"
CHECK_READY = "Ready"


def now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def find(conditions: list[Object] | None, type_: str) -> Object | None:
    return next((c for c in conditions or [] if c.get("type") == type_), None)


def is_true(obj: Object, type_: str) -> bool:
    found = find((obj.get("status") or {}).get("conditions"), type_)
    return found is not None and found.get("status") == "True"


def set_condition(
    wl: Object, type_: str, status: str, reason: str, message: str, *, at: str | None = None
) -> bool:
    """``meta.SetStatusCondition`` on ``wl.status.conditions``; True when anything changed."""
    conditions: list[Object] = wl.setdefault("status", {}).setdefault("conditions", [])
    generation = int((wl.get("metadata") or {}).get("generation") or 0)
    message = message[:32768]  # api.TruncateConditionMessage
    existing = find(conditions, type_)
    if existing is None:
        conditions.append(
            {
                "type": type_,
                "status": status,
                "observedGeneration": generation,
                "lastTransitionTime": at or now(),
                "reason": reason,
                "message": message,
            }
        )
        return True
    before = dict(existing)
    if existing.get("status") != status:
        existing["status"] = status
        existing["lastTransitionTime"] = at or now()
    existing["reason"] = reason
    existing["message"] = message
    existing["observedGeneration"] = generation
    return existing != before


def set_evicted(wl: Object, *, reason: str, message: str) -> None:
    """``prepareForEviction``: Evicted=True and every non-Pending check back to Pending with
    ``podSetUpdates`` dropped from Kueue's copy (``resetChecksOnEviction``)."""
    at = now()
    set_condition(wl, EVICTED, "True", reason, message, at=at)
    checks = (wl.get("status") or {}).get("admissionChecks") or []
    for i, check in enumerate(checks):
        if check.get("state") == CHECK_PENDING:
            continue
        reset: Object = {
            "name": check["name"],
            "state": CHECK_PENDING,
            "message": f"Reset to Pending after eviction. Previously: {check.get('state')}",
            "lastTransitionTime": at,
        }
        if check.get("requeueAfterSeconds") is not None:
            reset["requeueAfterSeconds"] = check["requeueAfterSeconds"]
        if check.get("state") == "Retry":
            reset["retryCount"] = int(check.get("retryCount") or 0) + 1
        checks[i] = reset


def count_eviction(wl: Object, reason: str) -> None:
    """``workloadEvictionStateInc``: ``status.schedulingStats.evictions[reason].count++``."""
    stats = wl.setdefault("status", {}).setdefault("schedulingStats", {})
    evictions: list[Object] = stats.setdefault("evictions", [])
    for entry in evictions:
        if entry.get("reason") == reason and not entry.get("underlyingCause"):
            entry["count"] = int(entry.get("count") or 0) + 1
            return
    evictions.append({"reason": reason, "underlyingCause": "", "count": 1})


def checks_ready(wl: Object) -> bool:
    checks = (wl.get("status") or {}).get("admissionChecks") or []
    return all(c.get("state") == CHECK_READY for c in checks)


def sync_admitted(wl: Object) -> bool:
    """``SyncAdmittedCondition``: Admitted follows QuotaReserved and the checks."""
    reserved = is_true(wl, QUOTA_RESERVED)
    ready = checks_ready(wl)
    if reserved and ready:
        return set_condition(wl, ADMITTED, "True", REASON_ADMITTED, "The workload is admitted")
    if not reserved:
        if find((wl.get("status") or {}).get("conditions"), ADMITTED) is None:
            return False
        return set_condition(
            wl, ADMITTED, "False", REASON_NO_RESERVATION, "The workload has no reservation"
        )
    return set_condition(
        wl,
        ADMITTED,
        "False",
        REASON_UNSATISFIED_CHECKS,
        "The workload has not all admission checks",
    )


def set_quota_reservation(wl: Object, admission: Object) -> None:
    """``SetQuotaReservation``: admission, QuotaReserved=True, and Evicted/Preempted (when present
    and True) flipped to False with reason QuotaReserved and ``Previously: <message>``."""
    status = wl.setdefault("status", {})
    status["admission"] = admission
    cq = admission["clusterQueue"]
    set_condition(
        wl, QUOTA_RESERVED, "True", REASON_QUOTA_RESERVED, f"Quota reserved in ClusterQueue {cq}"
    )
    for type_ in (EVICTED, PREEMPTED):
        previous = find(status.get("conditions"), type_)
        if previous is not None and previous.get("status") == "True":
            set_condition(
                wl,
                type_,
                "False",
                REASON_QUOTA_RESERVED,
                f"Previously: {previous.get('message', '')}",
            )


def unset_quota_reservation(wl: Object, *, reason: str, message: str) -> None:
    """``UnsetQuotaReservationWithCondition``: QuotaReserved=False, admission cleared, Admitted
    synced (False/NoReservation)."""
    status = wl.setdefault("status", {})
    set_condition(wl, QUOTA_RESERVED, "False", reason, message)
    status.pop("admission", None)
    sync_admitted(wl)
