"""Creating a Checkpoint, for both paths (a Workload's eviction, pod-level disruptions)."""

from __future__ import annotations

import logging

from opentelemetry import trace

from kontinue import catalog, keys, tracing
from kontinue.models import base, checkpoint
from queue_bridge import acting, reconciling
from queue_bridge.handlers import context

log = logging.getLogger("kontinue.bridge")


async def create(
    ctx: context.Context,
    found: reconciling.Eviction,
    *,
    members: list[checkpoint.Member],
    workload: str | None,
    annotations: dict[str, str] | None = None,
) -> None:
    """Create the Checkpoint of ``found``, its metric, log and Event (``AlreadyExists``: done)."""
    c = ctx.caches
    first = c.pod_by_uid(members[0].pod_uid)
    node = c.gpu_node(members[0].node) if members[0].node else None
    try:
        fingerprint = catalog.fingerprint_of(first, node) if first else checkpoint.Fingerprint()
    except ValueError as exc:
        log.warning("fingerprint of %s: %s", members[0].pod_name, exc)
        fingerprint = checkpoint.Fingerprint()
    cp = reconciling.new_checkpoint(
        workload=workload,
        found=found,
        members=members,
        fingerprint=fingerprint,
        annotations=annotations,
    )
    # One trace per eviction (kontinue/tracing.py): it starts at the eviction's own time and
    # travels on the Checkpoint, so the saves and the restores join it.
    tracer = ctx.metrics.tracer
    attributes: dict[str, str | int] = {
        "kontinue.checkpoint": cp.name,
        "kontinue.checkpoint.members": len(members),
        "kontinue.trigger.source": found.trigger.source.value,
        "kontinue.trigger.reason": found.trigger.reason,
        "k8s.namespace.name": cp.metadata.namespace or "",
    }
    eviction = tracer.start_span(
        tracing.EVICTION, attributes=attributes, start_time=tracing.nanos(found.trigger.time)
    )
    cp.metadata.annotations = {
        **(cp.metadata.annotations or {}),
        keys.TRACEPARENT_ANNOTATION: tracing.traceparent(eviction),
        keys.CREATED_AT_ANNOTATION: base.format_micro_time(ctx.clock()),
    }
    try:
        with tracer.start_as_current_span(
            tracing.CHECKPOINT_CREATE,
            context=trace.set_span_in_context(eviction),
            attributes={"kontinue.checkpoint": cp.name},
        ) as creating:
            raw = await acting.create_checkpoint(ctx.kube, cp)
            creating.set_attribute("kontinue.checkpoint.existed", raw is None)
    finally:
        eviction.end()
    if raw is None:
        return
    await ctx.visible(cp, raw)
    latency = (ctx.clock() - found.trigger.time).total_seconds()
    ctx.metrics.checkpoint_created(found.trigger, latency)
    log.info(
        "checkpoint created checkpoint=%s/%s members=%d source=%s reason=%s",
        cp.metadata.namespace,
        cp.name,
        len(members),
        found.trigger.source.value,
        found.trigger.reason,
    )
    event = (keys.EVENT_CHECKPOINT_STARTED, reconciling.started_message(cp), "Normal")
    await ctx.tell(cp, raw, event)
