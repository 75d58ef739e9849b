"""How an opted-in pod started — restored, cold start, failed restore — counted once in
``kontinue_restores_total``; a restore is told on its Job as a ``Restored`` Event, and joins
the eviction's trace (queue_bridge/instruments.py). The webhook tells ``ColdStart`` itself,
with the restore plan's reason, when it admits the pod (webhook/observing.py).

The webhook decides (the restore plan, kontinue/restore_plan.py) and writes the outcome on the
pod (``kontinue.dev/restore-from`` or ``kontinue.dev/cold-start-reason``); the restore init
container carries it out. The bridge reads both from the pod and reports them, once per pod
(queue_bridge/instruments.py ``Metrics.pod_seen``). Events are aggregated by
queue_bridge/recording.py: one Event per Job and message, its ``count`` bumped per pod, so a
100-pod Job restored from one checkpoint gives one ``Restored`` Event with count 100.
A failed restore is told by the pod handler (``RestoreFailed``, with its count).
"""

from __future__ import annotations

from kontinue import keys, lineage
from kontinue.models import core, errors
from kontinue.models.policy import Consistency
from queue_bridge import deciding, instruments
from queue_bridge.handlers import context


async def observe(ctx: context.Context, pod: core.Pod) -> None:
    """Count the pod's restore outcome (once) and tell its Job."""
    name = pod.metadata.annotation(keys.RESTORE_FROM_ANNOTATION)
    source = ctx.caches.checkpoints.get(name, pod.namespace) if name else None
    counted = ctx.metrics.pod_seen(pod, source)
    if counted is None:
        return
    result, _ = counted
    try:
        owner = lineage.of_pod(pod)
    except errors.InvalidObject:
        owner = None
    job = ctx.job_dict(owner) if owner is not None else None
    if result == instruments.RESTORED:
        decision = deciding.pod_decision(ctx.caches, pod)
        rule = decision.policy.spec.restore.consistency if decision.policy else None
        whose = "rank 0's member" if rule is Consistency.SHARED else "each its own member"
        how = f" ({whose}, consistency {rule.value})" if rule is not None else ""
        await ctx.event(job, keys.EVENT_RESTORED, f"pods restored from checkpoint {name}{how}")
