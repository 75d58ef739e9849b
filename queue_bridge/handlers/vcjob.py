"""``VolcanoJob`` keys: warn once per process about an opted-in Volcano Job whose lifecycle
policies would turn checkpointed preemptions into its failure or end — one created before
Kontinue was installed or its queue opted in, which the webhook never rewrote
(:mod:`webhook.vcjob_plumbing`). The rule is :func:`kontinue.vcjob_policies.risks`: the Event
names each policy and what it does (``PodEvicted -> RestartJob`` uses one of ``maxRetry`` per
preemption, upstream issue #2560; ``PodFailed -> TerminateJob`` ends the job on the exit-143
``PodFailed`` a preemption raises first, upstream issue #5885)."""

from __future__ import annotations

from kontinue import keys, optin, vcjob_policies
from kontinue.models import base, volcano
from queue_bridge.handlers import context

FINISHED = ("Completed", "Failed", "Terminated", "Aborted")


def message(job: volcano.VolcanoJob) -> str | None:
    """The Warning's text for this vcjob, or ``None`` when preemptions are harmless to it."""
    spec = base.to_dict(job).get("spec") or {}
    found = vcjob_policies.risks(spec)
    if not found:
        return None
    return (
        "checkpointed preemptions of this Volcano Job would fail or end it (created before "
        "Kontinue or before its queue opted in?): "
        + "; ".join(found)
        + ". Recreate it to get Kontinue's policies (docs/webhook.md, Volcano Jobs)"
    )


async def reconcile(ctx: context.Context, namespace: str, name: str) -> None:
    cache = ctx.caches.vcjobs
    job = cache.get(name, namespace) if cache is not None else None
    if job is None or not job.metadata.uid or job.metadata.uid in ctx.warned_jobs:
        return
    phase = ((job.status or {}).get("state") or {}).get("phase")
    if phase in FINISHED:
        return
    decision = optin.volcano_queue_decision(job.spec.queue or "default", state=ctx.caches)
    if not decision.opted_in:
        return  # warned only once it opts in: the queue's change sweeps these keys
    if optin.opted_out(optin.Marks.from_meta(job.metadata)):
        return
    ctx.warned_jobs.add(job.metadata.uid)
    text = message(job)
    if text is not None:
        raw = context.reference(job, volcano.BATCH_API_VERSION, "Job")
        await ctx.event(raw, keys.EVENT_UNSAFE_VCJOB, text, "Warning")
