"""The Job controller's pod-failure backoff: when the next replacement pod may be created (pure).

Ported from kubernetes/kubernetes v1.36 ``pkg/controller/job/backoff_utils.go``
(``newBackoffRecord``, ``getFinishedTime``, ``getRemainingTimeForFailuresCount``) and its use in
``pkg/controller/job/job_controller.go`` ``manageJob``: while fewer pods are active than wanted,
no pod is created until ``DefaultJobPodFailureBackOff`` (10 s) after the last failed pod finished,
doubled for each further failure since the last success, at most ``MaxJobPodFailureBackOff``
(10 min). A failure counts here whatever the ``podFailurePolicy`` makes of it: a pod preempted by
kube-scheduler and *ignored* by an ``Ignore`` rule on ``DisruptionTarget`` still delays its
replacement by 10 s (measured on a real v1.36.2 control plane:
tests/realcp/test_kueue_flow.py). Pods deleted for a suspension lose their tracking finalizer
first, are never "new finished pods", and delay nothing.

The record is in memory, per Job key, as upstream's ``backoffStore`` (forgotten when the Job is
finished or deleted); times are wall-clock seconds, from the pods' second-resolution timestamps.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

from kontinue.models import base

DEFAULT_SECONDS = 10.0  # DefaultJobPodFailureBackOff
MAX_SECONDS = 600.0  # MaxJobPodFailureBackOff


@dataclasses.dataclass(frozen=True)
class Record:
    """``backoffRecord``: failures since the last success, and when the last one finished."""

    failures: int = 0
    last_failure: float | None = None


def _seconds(value: str | None) -> float | None:
    if not value:
        return None
    return base.parse_time(value).timestamp()


def finished_time(pod: Mapping[str, Any]) -> float:
    """``getFinishedTime``: the latest container ``finishedAt`` when every container terminated,
    else ``Ready=False``'s transition, else ``deletionTimestamp - grace``, else creation."""
    status = pod.get("status") or {}
    meta = pod.get("metadata") or {}
    ends = []
    statuses = status.get("containerStatuses") or []
    for container in statuses:
        terminated = (container.get("state") or {}).get("terminated") or {}
        ends.append(_seconds(terminated.get("finishedAt")))
    if statuses and all(end is not None for end in ends):
        return max(end for end in ends if end is not None)
    for condition in status.get("conditions") or []:
        if condition.get("type") == "Ready" and condition.get("status") == "False":
            when = _seconds(condition.get("lastTransitionTime"))
            if when is not None:
                return when
    deleted = _seconds(meta.get("deletionTimestamp"))
    if deleted is not None:
        return deleted - float(meta.get("deletionGracePeriodSeconds") or 0)
    return _seconds(meta.get("creationTimestamp")) or 0.0


def next_record(
    old: Record, succeeded: Sequence[Mapping[str, Any]], failed: Sequence[Mapping[str, Any]]
) -> Record:
    """``newBackoffRecord``: ``old`` after this sync's newly finished pods."""
    if not succeeded and not failed:
        return old
    failed_times = sorted(finished_time(p) for p in failed)
    if not succeeded:
        return Record(old.failures + len(failed_times), failed_times[-1])
    last_success = max(finished_time(p) for p in succeeded)
    after = [t for t in failed_times if t > last_success]
    return Record(len(after), after[-1] if after else None)


def remaining(
    record: Record,
    now: float,
    *,
    default: float = DEFAULT_SECONDS,
    maximum: float = MAX_SECONDS,
) -> float:
    """``getRemainingTimeForFailuresCount``: seconds until a replacement may be created."""
    if record.failures == 0 or record.last_failure is None:
        return 0.0
    delay = default
    for _ in range(1, record.failures):
        delay *= 2
        if delay >= maximum:
            delay = maximum
            break
    elapsed = now - record.last_failure
    return 0.0 if delay < elapsed else delay - elapsed
