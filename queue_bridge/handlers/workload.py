"""``Workload`` keys: an eviction in force on an opted-in Workload -> create its Checkpoint
(once: deterministic name, ``AlreadyExists`` is success); our AdmissionCheck's answer."""

from __future__ import annotations

import logging

from kontinue.kube import resources
from kontinue.models import errors as model_errors
from kontinue.models import kueue
from queue_bridge import acting, admission_check, deciding, reconciling
from queue_bridge.handlers import context, creating

log = logging.getLogger("kontinue.bridge")


async def reconcile(ctx: context.Context, namespace: str, name: str) -> None:
    workload = ctx.caches.workloads.get(name, namespace)
    if workload is None:
        return
    decision = deciding.opt_in(ctx.caches, workload)
    try:
        found = reconciling.eviction(workload, decision=decision)
    except model_errors.InvalidObject as exc:
        log.error("workload=%s/%s cannot be read: %s", namespace, name, exc)
        found = None
    if found is not None and ctx.caches.checkpoints.get(found.name, namespace) is None:
        async with ctx.lineage_lock(found.lineage):
            await _create_checkpoint(ctx, workload, found)
    if ctx.caches.admission_checks is not None:
        await _answer_check(ctx, workload, decision)


async def _create_checkpoint(
    ctx: context.Context, workload: kueue.Workload, found: reconciling.Eviction
) -> None:
    pods = ctx.caches.lineage_pods(found.lineage)
    taken = deciding.taken(ctx.caches, found.lineage)
    members = reconciling.members_of(pods, owner=found.lineage, taken=taken)
    if not members:
        log.info(
            "eviction without running pods, no checkpoint workload=%s/%s reason=%s",
            workload.namespace,
            workload.name,
            found.trigger.reason,
        )
        return
    await creating.create(ctx, found, members=members, workload=workload.name)


async def _answer_check(
    ctx: context.Context, workload: kueue.Workload, decision: reconciling.OptIn
) -> None:
    checks = ctx.caches.admission_checks
    assert checks is not None
    names = [ac.name for ac in checks.items() if admission_check.ours(ac)]
    states = admission_check.our_check_states(workload, check_names=names)
    if not states or admission_check.ready_to_answer(workload) is not None:
        return
    owner = reconciling.workload_lineage(workload)
    for state in states:
        if state.state != admission_check.PENDING:
            continue
        answer = admission_check.answer(
            workload,
            owner=owner,
            policy=decision.policy if decision.opted_in else None,
            checkpoints=ctx.caches.checkpoints_of_owner(owner.owner_uid) if owner else [],
            nodes=ctx.caches.gpu_nodes.items(),
            flavor=ctx.caches.flavor,
        )
        body = admission_check.apply_body(
            workload, check_name=state.name, result=answer, current=state, now=ctx.clock()
        )
        if body is not None:
            log.info(
                "admission check workload=%s/%s check=%s state=%s: %s",
                workload.namespace,
                workload.name,
                state.name,
                answer.state,
                answer.message,
            )
            await acting.apply_status(ctx.applier, resources.WORKLOADS, body)
