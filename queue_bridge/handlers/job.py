"""``Job`` keys: warn once per process about an opted-in Job whose preemptions count against
``backoffLimit`` (a finished Job's checkpoints are re-examined for expiry by the routing, which
requeues them on a Job event)."""

from __future__ import annotations

from kontinue import keys
from queue_bridge import deciding, job_safety
from queue_bridge.handlers import context


async def reconcile(ctx: context.Context, namespace: str, name: str) -> None:
    job = ctx.caches.jobs.get(name, namespace)
    if job is None or not job.metadata.uid or job.metadata.uid in ctx.warned_jobs:
        return
    workloads = ctx.caches.workloads_of_owner(job.metadata.uid)
    if not any(deciding.opt_in(ctx.caches, wl).opted_in for wl in workloads):
        return
    if job.metadata.annotation(keys.CHECKPOINT_OPT_OUT_ANNOTATION) == "false":
        return
    risk = job_safety.job_risk(job)
    ctx.warned_jobs.add(job.metadata.uid)
    if risk is not None:
        raw = context.reference(job, "batch/v1", "Job")
        await ctx.event(raw, keys.EVENT_UNSAFE_JOB, risk, "Warning")
