"""``Checkpoint`` keys: follow the members to a terminal phase (status subresource, merge
patch), Events on the transition, retention and owner expiry once terminal; requeued at the next
deadline so a pod stuck Terminating cannot stall it."""

from __future__ import annotations

import logging

from kontinue import keys
from kontinue.kube import errors
from kontinue.models import checkpoint, core
from queue_bridge import acting, deciding, kinds, lifecycle, reconciling
from queue_bridge.handlers import context

log = logging.getLogger("kontinue.bridge")


async def reconcile(ctx: context.Context, namespace: str, name: str) -> None:
    cp = ctx.caches.checkpoints.get(name, namespace)
    if cp is None or cp.status.phase is checkpoint.Phase.EXPIRED:
        return
    policy = deciding.policy_of(ctx.caches, cp)
    pods = [p for m in cp.spec.members if (p := ctx.caches.pod_by_uid(m.pod_uid))]
    config = ctx.config
    if not cp.status.phase.terminal:
        new = reconciling.next_status(
            cp,
            pods,
            policy=policy,
            now=ctx.clock(),
            margin=config.finalizer_margin_seconds,
            pending_timeout=config.pending_timeout_seconds,
        )
        if reconciling.status_changed(cp.status, new):
            raw = await acting.write_status(ctx.kube, cp, new)
            event = reconciling.transition_event(cp, new)
            if new.phase is not cp.status.phase:
                ctx.metrics.transitions.add(1, {"phase": new.phase.value})
                if new.phase.terminal:
                    ctx.metrics.checkpoint_finished(cp, pods, new)
                log.info(
                    "checkpoint phase checkpoint=%s/%s phase=%s message=%s",
                    namespace,
                    name,
                    new.phase.value,
                    new.message or "",
                )
            cp = checkpoint.load(raw)
            if event is not None:
                await ctx.tell(cp, raw, event)
        ctx.requeue_at(
            (kinds.CHECKPOINT, namespace, name),
            reconciling.next_deadline(
                cp,
                pods,
                margin=config.finalizer_margin_seconds,
                pending_timeout=config.pending_timeout_seconds,
            ),
        )
    if cp.status.phase is checkpoint.Phase.FAILED:
        cp = await _late_reports(ctx, cp, pods)
    if cp.status.phase.terminal:
        for cp_name, reason in deciding.doomed(ctx.caches, cp, policy=policy).items():
            target = ctx.caches.checkpoints.get(cp_name, cp.spec.lineage.namespace)
            if target is None or target.status.phase is checkpoint.Phase.EXPIRED:
                continue
            await _expire(ctx, target, reason)


async def _expire(ctx: context.Context, cp: checkpoint.Checkpoint, reason: str) -> None:
    status = cp.status.model_copy(
        update={"phase": checkpoint.Phase.EXPIRED, "message": f"expired: {reason}"}
    )
    try:
        raw = await acting.write_status(ctx.kube, cp, status)
    except errors.Conflict:
        # Changed since our cache saw it (often: another worker expired it first). Its own
        # watch event requeues it, and that reconcile decides again from the new state.
        log.debug("expiry of %s/%s raced a change; re-deciding", cp.metadata.namespace, cp.name)
        return
    ctx.metrics.transitions.add(1, {"phase": checkpoint.Phase.EXPIRED.value})
    log.info(
        "checkpoint expired checkpoint=%s/%s reason=%s", cp.metadata.namespace, cp.name, reason
    )
    await ctx.event(raw, keys.EVENT_CHECKPOINT_EXPIRED, f"{cp.name} expired: {reason}")


def _newer(ctx: context.Context, cp: checkpoint.Checkpoint) -> bool:
    """Another live set of the lineage triggered later: its state supersedes ``cp``'s."""
    return any(
        other.name != cp.name
        and other.metadata.namespace == cp.metadata.namespace
        and other.status.phase is not checkpoint.Phase.EXPIRED
        and other.spec.trigger.time > cp.spec.trigger.time
        for other in ctx.caches.checkpoints_of_owner(cp.spec.lineage.owner_uid)
    )


async def _late_reports(
    ctx: context.Context, cp: checkpoint.Checkpoint, pods: list[core.Pod]
) -> checkpoint.Checkpoint:
    """Upgrade a Failed set whose members' final statuses came late (lifecycle.late_status)."""
    new = lifecycle.late_status(cp, pods, superseded=_newer(ctx, cp))
    if new is None:
        return cp
    try:
        raw = await acting.write_status(ctx.kube, cp, new)
    except errors.Conflict:  # its own watch event requeues it
        return cp
    log.info(
        "checkpoint upgraded by a late report checkpoint=%s/%s phase=%s message=%s",
        cp.metadata.namespace,
        cp.name,
        new.phase.value,
        new.message or "",
    )
    if new.phase is not cp.status.phase:
        ctx.metrics.transitions.add(1, {"phase": new.phase.value})
    return checkpoint.load(raw)
