"""Migration: label the pods the webhook plumbed before it labelled them.

The bridge's pod watch selects ``kontinue.dev/plumbed=true`` (queue_bridge/caches.py), which the
webhook sets on every pod it plumbs (webhook/plumbing.py). A pod plumbed by an older webhook
carries the lineage annotation and our finalizer but not the label, and the selected watch would
never see it: its eviction would not be checkpointed and its finalizer would stay until someone
removed it by hand.

So once per leadership the leader lists the pods **without** the label (``!kontinue.dev/plumbed``,
page by page, never holding the whole list) and gives the label to each one that carries our
lineage annotation or finalizer (:func:`needs_label`); the selected watch then delivers it like
any other plumbed pod. This runs beside the workers and readiness does not wait for it. It costs
one paged list of the cluster's unlabelled pods per leader start; once no such pod is left
(``kubectl get pods -A -l '!kontinue.dev/plumbed' -o json`` shows no ``kontinue.dev/lineage``
annotation), ``KONTINUE_ADOPT_UNLABELLED_PODS=false`` turns it off.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from kontinue import keys
from kontinue.kube import api as kube_api
from kontinue.kube import errors, resources

log = logging.getLogger("kontinue.bridge.adoption")

SELECTOR = f"!{keys.PLUMBED_LABEL}"
ATTEMPTS = 5
RETRY_SECONDS = 10.0


def needs_label(raw: dict[str, Any]) -> bool:
    """Whether a pod without our label was plumbed by the webhook (lineage annotation or our
    finalizer) and so belongs in the bridge's pod watch."""
    meta = raw.get("metadata") or {}
    if (meta.get("labels") or {}).get(keys.PLUMBED_LABEL) == keys.PLUMBED_VALUE:
        return False
    plumbed = keys.LINEAGE_ANNOTATION in (meta.get("annotations") or {})
    return plumbed or keys.CHECKPOINT_FINALIZER in (meta.get("finalizers") or [])


async def label_plumbed_pods(
    kube: kube_api.Api,
    *,
    page_size: int = 500,
    page_timeout: float = 60.0,
    attempts: int = ATTEMPTS,
    retry_seconds: float = RETRY_SECONDS,
) -> int:
    """Label every plumbed pod that lacks ``kontinue.dev/plumbed``; the number labelled.

    A failed list is tried again (``attempts`` in all, ``retry_seconds`` apart) from the start;
    a pod that is gone by the time it is patched is skipped.
    """
    labelled = 0
    for attempt in range(1, attempts + 1):
        try:
            async for page, _ in kube_api.list_pages(
                kube,
                resources.PODS,
                namespace=None,
                label_selector=SELECTOR,
                field_selector=None,
                page_size=page_size,
                page_timeout=page_timeout,
            ):
                for raw in page:
                    if needs_label(raw) and await _label(kube, raw):
                        labelled += 1
        except (errors.ApiError, TimeoutError) as exc:
            log.warning(
                "labelling pods plumbed before the label failed attempt=%d/%d: %s",
                attempt,
                attempts,
                exc,
            )
            if attempt < attempts:
                await asyncio.sleep(retry_seconds)
            continue
        log.info("labelled pods plumbed before the label pods=%d", labelled)
        return labelled
    return labelled


async def _label(kube: kube_api.Api, raw: dict[str, Any]) -> bool:
    meta = raw.get("metadata") or {}
    patch = {"metadata": {"labels": {keys.PLUMBED_LABEL: keys.PLUMBED_VALUE}}}
    try:
        await kube.merge_patch(
            resources.PODS, str(meta.get("name")), patch, namespace=meta.get("namespace")
        )
    except errors.NotFound:
        return False
    return True
