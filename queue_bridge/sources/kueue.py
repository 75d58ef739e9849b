"""Kueue: a Workload's ``Evicted=True`` is the trigger (kueue ``pkg/workload/evict/evict.go``;
docs/cluster-emulation-queues.md).

Kueue sets ``Evicted=True`` (reason ``Preempted``, ``PodsReadyTimeout``, ``ClusterQueueStopped``,
…) and, for preemption, ``Preempted=True`` (reason ``InClusterQueue``, ``InCohort…``) in one patch;
one reconcile later it suspends the Job and the Job controller deletes the pods. Both conditions
stay ``True`` until the next quota reservation flips them to ``False`` (reason ``QuotaReserved``).

One eviction is identified by the ``Evicted`` condition's ``lastTransitionTime``: Kueue's later
writes during the same eviction (the second suspend update, ``Requeued``, ``QuotaReserved=False``)
keep it, and the next eviction, after a readmission, has a new one. The trigger's ``time`` is that
timestamp, so :mod:`queue_bridge.naming` gives every sighting of one eviction the same name.
"""

from __future__ import annotations

from kontinue import keys
from kontinue.models import base, checkpoint, errors, kueue
from kontinue.models import policy as policy_model


def _evicted(workload: kueue.Workload) -> base.Condition | None:
    condition = base.find_condition(workload.conditions, keys.KUEUE_CONDITION_EVICTED)
    return condition if condition is not None and condition.status == "True" else None


def eviction(
    workload: kueue.Workload,
    *,
    previous: kueue.Workload | None,
    policy: policy_model.CheckpointPolicy,
) -> checkpoint.Trigger | None:
    """The trigger for a new ``Evicted=True`` of a reason the policy lists, else ``None``.

    ``previous`` is the version the watch delivered before this one. When it already showed the
    same eviction (same ``lastTransitionTime``), this is a repeat and the answer is ``None``.
    Pass ``previous=None`` on a (re)list: a level-triggered reconcile then gets the trigger of the
    eviction in force, whose deterministic Checkpoint name makes creating it again harmless.

    Raises :class:`~kontinue.models.errors.InvalidObject` for an ``Evicted=True`` without a
    ``lastTransitionTime`` (Kueue always sets it; without it one eviction cannot be told from
    the next).
    """
    evicted = _evicted(workload)
    if evicted is None or evicted.reason not in policy.spec.triggers.kueue_eviction_reasons:
        return None
    if evicted.last_transition_time is None:
        index = workload.conditions.index(evicted)
        raise errors.InvalidObject(
            "Workload",
            [
                errors.FieldError(
                    f"status.conditions[{index}].lastTransitionTime",
                    "Evicted=True without it: one eviction cannot be told from the next",
                )
            ],
        )
    before = _evicted(previous) if previous is not None else None
    if before is not None and before.last_transition_time == evicted.last_transition_time:
        return None
    message = evicted.message or ""
    preempted = base.find_condition(workload.conditions, keys.KUEUE_CONDITION_PREEMPTED)
    if preempted is not None and preempted.status == "True" and preempted.reason:
        message = f"{preempted.reason}: {message}" if message else preempted.reason
    return checkpoint.Trigger(
        source=checkpoint.TriggerSource.KUEUE,
        reason=evicted.reason or keys.KUEUE_CONDITION_EVICTED,
        message=message,
        time=evicted.last_transition_time,
    )
