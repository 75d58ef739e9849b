"""Pure eviction detectors, one per source: ``kueue`` (Workload ``Evicted``), ``volcano``
(the scheduler's evictor), ``disruption`` (kube-scheduler preemption, Eviction API, taint manager).

Each turns a typed object (and the previous version the watch saw, when there is one) into a
``checkpoint.Trigger`` or ``None``. No I/O: the reconciler decides what to create from the result.
"""

from __future__ import annotations

from kontinue.models import checkpoint, core
from kontinue.models import policy as policy_model
from queue_bridge.sources import disruption, volcano


def pod_eviction(
    pod: core.Pod,
    *,
    previous: core.Pod | None,
    policy: policy_model.CheckpointPolicy,
    deleted_by: str | None = None,
) -> checkpoint.Trigger | None:
    """The trigger a pod update carries, from whichever pod-level source claims it.

    Volcano first: its evictor writes the same ``DisruptionTarget`` reason as kube-scheduler,
    and :mod:`~queue_bridge.sources.disruption` defers to it, so at most one source answers.
    """
    return volcano.eviction(
        pod, previous=previous, policy=policy, deleted_by=deleted_by
    ) or disruption.eviction(pod, previous=previous, policy=policy, deleted_by=deleted_by)
