"""Volcano: the scheduler's evictor marks, then deletes, each victim pod
(docs/cluster-emulation-queues.md).

The evictor (pkg/scheduler/cache/cache.go ``defaultEvictor.Evict``) patches the victim's status with
``Ready=False`` (reason ``Evict``, message ``Pod is evicted, because of <preempt|reclaim>``) and
``DisruptionTarget=True`` (reason ``PreemptionByScheduler``), emits an ``Evict`` Event, then
deletes the pod with its own grace period as ``system:serviceaccount:volcano-system:
volcano-scheduler`` (recorded: tests/fixtures/upstream/volcano/examples/
admissionreview-delete-victim-pod-by-vc-scheduler.json). The bridge sees the status patch first,
so detection happens before the DELETE; a DELETE admission review can confirm it by user.

One eviction of one pod is identified by the ``DisruptionTarget`` condition's
``lastTransitionTime``, the trigger's ``time``.

The kubelet owns ``Ready`` and rewrites it once the victim's containers stop, while
``DisruptionTarget`` stays: a pod scheduled by Volcano (``spec.schedulerName: volcano``; no
kube-scheduler profile schedules it, so none preempts it) or deleted by its scheduler, carrying
``DisruptionTarget=True``/``PreemptionByScheduler``, is Volcano's eviction even when ``Ready`` no
longer says ``Evict`` — otherwise a bridge that first looks at the pod after the kubelet's write
would record Volcano's eviction as kube-scheduler's. The trigger's message is ``Ready``'s ("Pod is
evicted, because of reclaim") while it is there, else ``DisruptionTarget``'s.
"""

from __future__ import annotations

import datetime

from kontinue import keys
from kontinue.models import base, checkpoint, core
from kontinue.models import policy as policy_model

EVICT_REASON = "Evict"
SCHEDULER_NAME = "volcano"


def _marks(pod: core.Pod) -> tuple[base.Condition | None, base.Condition] | None:
    """``(Ready, DisruptionTarget)``: ``DisruptionTarget`` as the evictor writes it, and
    ``Ready`` only while it still carries the evictor's ``Evict`` (else ``None``)."""
    conditions = pod.status.conditions if pod.status else None
    ready = base.find_condition(conditions, "Ready")
    target = base.find_condition(conditions, keys.POD_CONDITION_DISRUPTION_TARGET)
    if (
        target is None
        or target.status != "True"
        or target.reason != keys.DISRUPTION_PREEMPTION_BY_SCHEDULER
    ):
        return None
    if ready is None or ready.status != "False" or ready.reason != EVICT_REASON:
        return None, target
    return ready, target


def is_volcano_eviction(pod: core.Pod, *, deleted_by: str | None = None) -> bool:
    """Carries the evictor's marks and is Volcano's: scheduled by it, or deleted by it.

    ``deleted_by`` is a DELETE review's ``userInfo.username`` when the caller has one.
    """
    if _marks(pod) is None:
        return False
    return pod.spec.scheduler_name == SCHEDULER_NAME or deleted_by == keys.VOLCANO_SCHEDULER_USER


def eviction(
    pod: core.Pod,
    *,
    previous: core.Pod | None,
    policy: policy_model.CheckpointPolicy,
    deleted_by: str | None = None,
) -> checkpoint.Trigger | None:
    """The trigger for a Volcano eviction newly seen on ``pod``, else ``None``.

    ``None`` too when the policy does not list ``PreemptionByScheduler`` among its disruption
    reasons, when the pod already Succeeded (nothing to resume), and when ``previous`` already
    showed the same eviction (same ``DisruptionTarget`` ``lastTransitionTime``).
    """
    if not is_volcano_eviction(pod, deleted_by=deleted_by):
        return None
    if keys.DISRUPTION_PREEMPTION_BY_SCHEDULER not in policy.spec.triggers.disruption_reasons:
        return None
    if pod.status is not None and pod.status.phase == "Succeeded":
        return None
    marks = _marks(pod)
    assert marks is not None  # is_volcano_eviction checked them
    ready, target = marks
    when = _time(marks)
    if when is None:
        return None
    seen = _marks(previous) if previous is not None else None
    if seen is not None and _time(seen) == when:
        return None
    return checkpoint.Trigger(
        source=checkpoint.TriggerSource.VOLCANO,
        reason=target.reason or keys.DISRUPTION_PREEMPTION_BY_SCHEDULER,
        message=(ready.message if ready is not None else None) or target.message or "",
        time=when,
    )


def _time(marks: tuple[base.Condition | None, base.Condition]) -> datetime.datetime | None:
    ready, target = marks
    return target.last_transition_time or (ready.last_transition_time if ready else None)
