"""kube-scheduler preemption, the Eviction API (drain), the taint manager: ``DisruptionTarget``.

Each writes the pod condition ``DisruptionTarget=True`` with its reason before (or, for the
Eviction API, as part of) the graceful deletion. Recorded on a real v1.36.2 control plane
(tests/fixtures/bridge/pod-disruption-*.json; recorded admission requests 25, 32, 41, as
tests/fixtures/README.md lists):

- ``PreemptionByScheduler`` (source Scheduler): ``system:kube-scheduler`` on pods/status,
  before its DELETE;
- ``EvictionByEvictionAPI`` (source EvictionAPI): the apiserver itself, with the deletion;
- ``DeletionByTaintManager`` (source TaintManager): the taint-eviction controller on
  pods/status, before its DELETE.

An Eviction API eviction of a pod carrying ``kontinue.dev/move`` is one a user asked for with
``kubectl kontinue move``/``drain``/``defrag`` (kontinue/moving.py): its source is ``Manual``,
its reason ``Move``/``Drain``/``Defrag`` and its message says where the move goes.

Volcano's evictor writes ``PreemptionByScheduler`` too; such pods are left to
:mod:`queue_bridge.sources.volcano`, so one eviction is never reported by two sources.
One eviction of one pod is identified by the condition's ``lastTransitionTime``.
"""

from __future__ import annotations

from kontinue import keys, moving
from kontinue.models import base, checkpoint, core
from kontinue.models import policy as policy_model
from queue_bridge.sources import volcano

SOURCES = {
    keys.DISRUPTION_PREEMPTION_BY_SCHEDULER: checkpoint.TriggerSource.SCHEDULER,
    keys.DISRUPTION_EVICTION_BY_API: checkpoint.TriggerSource.EVICTION_API,
    keys.DISRUPTION_DELETION_BY_TAINT_MANAGER: checkpoint.TriggerSource.TAINT_MANAGER,
}


def _target(pod: core.Pod | None) -> base.Condition | None:
    if pod is None or pod.status is None:
        return None
    found = base.find_condition(pod.status.conditions, keys.POD_CONDITION_DISRUPTION_TARGET)
    return found if found is not None and found.status == "True" else None


def eviction(
    pod: core.Pod,
    *,
    previous: core.Pod | None,
    policy: policy_model.CheckpointPolicy,
    deleted_by: str | None = None,
) -> checkpoint.Trigger | None:
    """The trigger for a ``DisruptionTarget=True`` newly seen on ``pod``, else ``None``.

    ``None`` for a reason the policy does not list (or one this module does not know: the
    source must be named), a Volcano eviction, a pod that already Succeeded, a condition
    without ``lastTransitionTime``, and a repeat (``previous`` had the same condition time).
    """
    target = _target(pod)
    if target is None or target.reason not in policy.spec.triggers.disruption_reasons:
        return None
    source = SOURCES.get(target.reason)
    if source is None or volcano.is_volcano_eviction(pod, deleted_by=deleted_by):
        return None
    if pod.status is not None and pod.status.phase == "Succeeded":
        return None
    if target.last_transition_time is None:
        return None
    before = _target(previous)
    if before is not None and before.last_transition_time == target.last_transition_time:
        return None
    asked = moving.of(pod.metadata.annotations)
    if source is checkpoint.TriggerSource.EVICTION_API and asked is not None:
        return checkpoint.Trigger(
            source=checkpoint.TriggerSource.MANUAL,
            reason=asked.reason,
            message=asked.message,
            time=target.last_transition_time,
        )
    return checkpoint.Trigger(
        source=source,
        reason=target.reason,
        message=target.message or "",
        time=target.last_transition_time,
    )
