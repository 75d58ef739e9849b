"""``Pod`` keys: count a failed restore once; give a pod gated on an awaited set the set's
verdict and ungate it (kontinue/restore_plan.py ``verdict``); remove the
``kontinue.dev/checkpoint`` finalizer when the decision says so, or requeue at its recheck
time."""

from __future__ import annotations

import logging

from kontinue import keys
from kontinue.models import base, core
from queue_bridge import acting, deciding, kinds, reconciling
from queue_bridge.handlers import context, restores

log = logging.getLogger("kontinue.bridge")


async def reconcile(ctx: context.Context, namespace: str, name: str) -> None:
    pod = ctx.caches.pods.get(name, namespace)
    if pod is None:
        return
    await restores.observe(ctx, pod)
    if (failure := reconciling.failed_restore(pod)) is not None:
        await _count_restore_failure(ctx, pod, *failure)
        return  # the annotation write brings the pod back with a new version
    state = ctx.caches
    if (found := deciding.set_verdict(state, pod)) is not None and found.ready:
        if await acting.release_verdict_gate(
            ctx.kube, pod, member=found.member, wait_seconds=found.wait_seconds
        ):
            log.info("set verdict pod=%s/%s: %s", namespace, name, found.reason)
        return  # the patch brings the pod back with a new version
    decision = reconciling.finalizer(
        pod,
        checkpoints=state.checkpoints_of_pod(pod.metadata.uid or ""),
        eviction_pending=lambda: (
            deciding.eviction_pending(state, pod) or deciding.disruption_pending(state, pod)
        ),
        now=ctx.clock(),
        margin=ctx.config.finalizer_margin_seconds,
        settle=ctx.config.settle_seconds,
    )
    if decision.release:
        if await acting.remove_finalizer(ctx.kube, pod):
            ctx.metrics.finalizer_released(decision.reason)
            log.info("finalizer removed pod=%s/%s: %s", namespace, name, decision.reason)
    else:
        ctx.requeue_at((kinds.POD, namespace, name), decision.recheck_at)


async def _count_restore_failure(
    ctx: context.Context, pod: core.Pod, cp_name: str, reason: str
) -> None:
    # Mark first, count second: a crash in between loses one count (one more restore
    # attempt), never counts one failure twice (an early fallback to an older checkpoint).
    await acting.mark_restore_counted(ctx.kube, pod, cp_name)
    count = await acting.count_failed_restore(
        ctx.kube, namespace=pod.namespace, name=cp_name, reason=reason
    )
    if count is None:
        return
    cp = ctx.caches.checkpoints.get(cp_name, pod.namespace)
    message = f"restore of pod {pod.name} from {cp_name} failed ({count} so far): {reason}"
    if cp is not None:
        raw = {**base.to_dict(cp), "apiVersion": keys.API_VERSION, "kind": "Checkpoint"}
        await ctx.event(raw, keys.EVENT_RESTORE_FAILED, message, "Warning")
        job = ctx.job_dict(cp.spec.lineage)
        await ctx.event(job, keys.EVENT_RESTORE_FAILED, message, "Warning")
