"""``Disruption`` keys (name: the lineage annotation value): pod-level disruptions of the
lineage's opted-in pods (kube-scheduler preemption, Eviction API, taint manager, Volcano) -> one
Checkpoint per eviction event, created or joined (:mod:`queue_bridge.disruptions`)."""

from __future__ import annotations

import logging

from kontinue import keys, lineage, moving
from kontinue.models import checkpoint, core
from kontinue.models import errors as model_errors
from queue_bridge import acting, deciding, disruptions, reconciling
from queue_bridge.handlers import context, creating

log = logging.getLogger("kontinue.bridge")


async def reconcile(ctx: context.Context, namespace: str, name: str) -> None:
    """Record the pod-level disruptions of the lineage whose annotation value is ``name``."""
    pods = ctx.caches.pods_of_lineage(namespace, name)
    if not pods:
        return
    try:
        owner = lineage.parse_annotation(name)
    except model_errors.InvalidObject:
        return
    async with ctx.lineage_lock(owner):
        taken = deciding.taken(ctx.caches, owner)
        found = [
            d for p in pods if (d := deciding.disrupted(ctx.caches, p, taken=taken)) is not None
        ]
        if not found:
            return
        groups = disruptions.group(
            found,
            checkpoints=ctx.caches.checkpoints_of_owner(owner.owner_uid),
            window=ctx.config.settle_seconds,
        )
        for group in groups:
            if group.existing is not None:
                await _join(ctx, group.existing, group.pods)
                continue
            members = reconciling.members_of(group.pods, owner=group.lineage)
            await creating.create(
                ctx,
                disruptions.eviction(group),
                members=members,
                workload=deciding.queue_object(ctx.caches, group.pods[0], group.lineage),
                annotations=_move_of(group),
            )


def _move_of(group: disruptions.Group) -> dict[str, str] | None:
    """A Manual eviction's move request, carried onto its Checkpoint for the webhook."""
    if group.trigger.source is not checkpoint.TriggerSource.MANUAL:
        return None
    asked = next((m for p in group.pods if (m := moving.of(p.metadata.annotations))), None)
    return {moving.ANNOTATION: asked.encode()} if asked is not None else None


async def _join(ctx: context.Context, cp: checkpoint.Checkpoint, pods: list[core.Pod]) -> None:
    members = disruptions.added_members(cp, pods)
    if len(members) == len(cp.spec.members):
        return
    raw = await acting.write_members(ctx.kube, cp, members)
    joined = cp.model_copy(update={"spec": cp.spec.model_copy(update={"members": members})})
    await ctx.visible(joined, raw)
    added = ", ".join(f"{m.pod_name}@{m.node or '?'}" for m in members[len(cp.spec.members) :])
    log.info("checkpoint joined checkpoint=%s/%s added=%s", cp.metadata.namespace, cp.name, added)
    event = f"Checkpoint {cp.name}: later victim(s) of the same eviction joined: {added}"
    await ctx.event(
        {**raw, "apiVersion": keys.API_VERSION, "kind": "Checkpoint"},
        keys.EVENT_CHECKPOINT_STARTED,
        event,
    )
