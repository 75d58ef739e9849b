"""``AdmissionCheck`` keys: keep ours ``Active`` (decision: :mod:`queue_bridge.admission_check`)."""

from __future__ import annotations

import logging

from kontinue.kube import resources
from queue_bridge import acting
from queue_bridge import admission_check as decisions
from queue_bridge.handlers import context

log = logging.getLogger("kontinue.bridge")


async def reconcile(ctx: context.Context, namespace: str, name: str) -> None:
    del namespace  # cluster-scoped
    if ctx.caches.admission_checks is None:
        return
    check = ctx.caches.admission_checks.get(name)
    if check is None or not decisions.ours(check):
        return
    body = decisions.active_body(check, now=ctx.clock())
    if body is not None:
        await acting.apply_status(ctx.applier, resources.ADMISSION_CHECKS, body)
        log.info("admission check %s marked Active", name)
