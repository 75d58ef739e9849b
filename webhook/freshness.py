"""A plumbed pod's restore plan from its lineage's Checkpoints as they are *now*.

The bridge may record a set moments before the job controller creates the replacement pod: its
``create`` was retried after 429s, its leader was replaced, every replica was down. The
webhook's Checkpoint watch cache (:mod:`webhook.caches`) trails the store by milliseconds to
seconds, so a plan from the cache alone can miss the newest set and restore an older one, or
cold-start (docs/security.md, "Soak findings", item 1). So at the CREATE of a pod the webhook
will plumb with a lineage, and only then, the lineage's Checkpoints are read live: one
namespace-scoped LIST selected by the label ``kontinue.dev/owner-uid`` the bridge puts on every
set it creates (queue_bridge/reconciling.py ``new_checkpoint``), bounded by
``KONTINUE_WEBHOOK_LIVE_READ_SECONDS``. A LIST without a resourceVersion is a consistent read
(kubernetes/kubernetes ``staging/src/k8s.io/apiserver/pkg/storage/cacher/delegator.go``
``GetList``), so it holds every set created before the pod's CREATE reached the webhook, on
either of the apiserver's two paths:

- with etcd 3.5.13+ or 3.4.31+ (what real clusters run; kubeadm refuses an external etcd older
  than 3.5.24), from the apiserver's watch cache: it first reads etcd's current revision R (a
  quorum read, so R is at least the revision of every set whose create had returned), then
  waits until the cache has seen every event up to R (when R is past the cache's last
  Checkpoint event, it asks etcd for a progress notification, at most every 100 ms:
  ``cacher/progress/watch_progress.go``); the list is then as of R or later. A cache that does
  not get there within 3 s makes the apiserver read etcd instead (``fallback="true"``), so the
  guarantee never depends on the cache. Cost: the same whatever the namespace holds, about what
  a ``resourceVersion=0`` list costs plus one small etcd read, and up to 100 ms of waiting
  when the revision moved elsewhere and another consistent read asked etcd just before;
- with an older etcd (``feature_support_checker.go``), from etcd, every Checkpoint of the
  namespace fetched and decoded before the label selector filters: 0.3 to 0.6 ms of apiserver
  time per Checkpoint in the namespace on a 2-core machine (docs/benchmarks.md). Asking for
  ``resourceVersion=<R>&resourceVersionMatch=NotOlderThan`` instead is no way around it there:
  without progress notifications the cache may wait for R until the 3 s limit and answer 504
  ("Too large resource version"), measured on etcd 3.4.23.

The read result is merged with the cache (:func:`merged`: per object the newer resourceVersion)
into a :class:`Fresh` view, and :func:`kontinue.restore_plan.plan` stays pure: it plans from
whatever view it is given. When the read fails or times out the plan uses the cache, as before,
and says so: a log line, an admission warning, and
``kontinue_webhook_live_reads_total{outcome="error"|"timeout"}``.

With the Checkpoints, and concurrently, the lineage's plumbed pods are listed (label
``kontinue.dev/lineage-hash``): a predecessor that stopped and that no set records yet holds the
replacement back a bounded time (:mod:`webhook.unrecorded`). Everything else the admission path
reads (queues, policies, nodes) still comes from the caches: those change at an administrator's
pace, not within an eviction.
"""

from __future__ import annotations

import asyncio
import datetime
import logging
from collections.abc import Iterable, Sequence

from opentelemetry import metrics

from kontinue import keys, optin
from kontinue import lineage as lineage_module
from kontinue.kube import api as kube_api
from kontinue.kube import errors as kube_errors
from kontinue.kube import resources
from kontinue.models import base, core, errors, kueue, volcano
from kontinue.models import checkpoint as checkpoint_model
from kontinue.models import policy as policy_model
from webhook import review, unrecorded
from webhook import state as state_module

logger = logging.getLogger("kontinue.webhook.freshness")

OK = "ok"
ERROR = "error"
TIMEOUT = "timeout"

Key = tuple[str, str]


def wanted(
    request: review.AdmissionRequest, state: state_module.State, *, validating: bool = False
) -> checkpoint_model.Lineage | None:
    """The lineage whose Checkpoints are worth a live read for ``request``, else ``None``.

    Mutating: a pod CREATE that :func:`webhook.admission.mutate_pod` will plan a restore for
    (it opted in and has a controller). Validating (``validating``): a pod CREATE whose
    ``kontinue.dev/restore-from`` names a Checkpoint the cache does not hold: the mutating
    webhook may have just planned it from a live read, and the validating webhook checks that
    it exists (webhook/validation.py ``forged_reserved_keys``). Reads the labels, annotations
    and ownerReferences only; any doubt is ``None`` (the admission path then answers from the
    cache and reports the problem itself)."""
    if (
        request.operation != "CREATE"
        or request.sub_resource
        or request.kind.group != ""
        or request.kind.kind != "Pod"
    ):
        return None
    obj = request.object or {}
    meta = obj.get("metadata")
    if not isinstance(meta, dict):
        return None
    namespace = request.namespace or meta.get("namespace") or ""
    try:
        marks = optin.Marks.of(obj)
        if validating:
            named = marks.annotations.get(keys.RESTORE_FROM_ANNOTATION)
            if not isinstance(named, str) or state.checkpoint(namespace, named) is not None:
                return None
        elif not optin.decide(marks, namespace=namespace, state=state).opted_in:
            return None
        parsed = base.parse(base.ObjectMeta, meta)
        parsed.namespace = parsed.namespace or namespace
        return lineage_module.of_meta(parsed)
    except (errors.InvalidObject, ValueError):
        return None


def _version(obj: checkpoint_model.Checkpoint) -> int | None:
    raw = obj.metadata.resource_version or ""
    return int(raw) if raw.isascii() and raw.isdigit() else None


def merged(
    cached: Iterable[checkpoint_model.Checkpoint],
    live: Iterable[checkpoint_model.Checkpoint],
    *,
    owner_uid: str,
    listed_at: str,
) -> list[checkpoint_model.Checkpoint]:
    """The lineage's Checkpoints from the cache and a live list, each object at its newest.

    An object in both: the higher resourceVersion (the cache may have seen an update the list,
    issued a moment earlier, did not); when either is not a number, the list's. One only in the
    list: it. One only in the cache: kept, unless the list (version ``listed_at``) would have
    held it (it carries ``kontinue.dev/owner-uid: owner_uid``) and is not older than it: then it
    was deleted meanwhile. A set a user made without the label is thus still planned from.
    """
    found: dict[Key, checkpoint_model.Checkpoint] = {
        (c.metadata.namespace or "", c.name): c for c in live
    }
    listed = int(listed_at) if listed_at.isascii() and listed_at.isdigit() else None
    for cp in cached:
        key = (cp.metadata.namespace or "", cp.name)
        mine = _version(cp)
        other = found.get(key)
        if other is not None:
            theirs = _version(other)
            if mine is not None and theirs is not None and mine > theirs:
                found[key] = cp
            continue
        selected = cp.metadata.label(keys.CHECKPOINT_OWNER_UID_LABEL) == owner_uid
        if selected and listed is not None and mine is not None and mine <= listed:
            continue  # deleted since the cache saw it
        found[key] = cp
    return list(found.values())


class Reader:
    """Reads one lineage's Checkpoints (and, with ``pods``, its plumbed pods: a predecessor no
    set records yet, webhook/unrecorded.py) through the webhook's API client, within
    ``seconds``."""

    def __init__(
        self,
        api: kube_api.Api,
        *,
        seconds: float,
        pods: bool = False,
        meter: metrics.Meter | None = None,
    ) -> None:
        self.api = api
        self.seconds = seconds
        self.pods = pods
        self._reads = (
            meter.create_counter(
                "kontinue_webhook_live_reads",
                description="Live reads at a plumbed pod's CREATE, by what was read "
                "(checkpoints, pods) and outcome (ok, error, timeout: the plan then used the "
                "watch cache, or did not look for an unrecorded predecessor)",
            )
            if meter is not None
            else None
        )

    def _count(self, outcome: str, what: str = "checkpoints") -> None:
        if self._reads is not None:
            self._reads.add(1, {"read": what, "outcome": outcome})

    async def read(
        self, lineage: checkpoint_model.Lineage
    ) -> tuple[list[checkpoint_model.Checkpoint], str]:
        """The lineage's labelled Checkpoints in its namespace and the list's resourceVersion.
        Raises :class:`TimeoutError` or :class:`kontinue.kube.errors.ApiError`."""
        async with asyncio.timeout(self.seconds):
            page = await self.api.list(
                resources.CHECKPOINTS,
                namespace=lineage.namespace,
                label_selector={keys.CHECKPOINT_OWNER_UID_LABEL: lineage.owner_uid},
            )
        found = []
        for raw in page.get("items") or []:
            try:
                found.append(base.parse(checkpoint_model.Checkpoint, raw))
            except errors.InvalidObject as exc:
                # The watch cache drops it too (kontinue/kube/watching.py): never planned from.
                logger.warning("live read: invalid Checkpoint skipped: %s", exc)
        return found, str((page.get("metadata") or {}).get("resourceVersion") or "")

    async def read_pods(self, lineage: checkpoint_model.Lineage) -> list[core.Pod] | None:
        """The lineage's Failed pods the bridge has not released yet (label
        ``kontinue.dev/lineage-hash``, which the webhook adds and the bridge drops with its
        finalizer; field ``status.phase=Failed``: an evicted pod that saved exits 143), or
        ``None`` when they could not be read (logged, counted): then no predecessor is looked
        for. Small whatever the Job's size: running pods and released ones are not listed."""
        try:
            async with asyncio.timeout(self.seconds):
                page = await self.api.list(
                    resources.PODS,
                    namespace=lineage.namespace,
                    label_selector={keys.CHECKPOINT_LINEAGE_LABEL: lineage.hash},
                    field_selector="status.phase=Failed",
                )
            found = [base.parse(core.Pod, raw) for raw in page.get("items") or []]
        except Exception as exc:  # any failure: plan as before this read existed
            outcome = TIMEOUT if isinstance(exc, TimeoutError) else ERROR
            self._count(outcome, "pods")
            logger.warning(
                "live read of pods failed (%s) lineage=%s: %r", outcome, lineage.key, exc
            )
            return None
        self._count(OK, "pods")
        return found

    async def view(
        self, request: review.AdmissionRequest, state: state_module.State, *, path: str
    ) -> state_module.State:
        """``state``, with the lineage of a pod CREATE worth it (:func:`wanted`; ``path``
        ``/validate`` for the validating webhook) read live; ``state`` itself for every other
        request. Never raises: a failed read is the cache's view with a warning."""
        try:
            lineage = wanted(request, state, validating=path != "/mutate")
        except Exception:  # a bug here must not cost the pod its plumbing
            logger.exception("live read: could not name the pod's lineage uid=%s", request.uid)
            return state
        if lineage is None:
            return state
        cached = state.checkpoints_of(lineage)
        mutating = path == "/mutate"
        pods = asyncio.ensure_future(self.read_pods(lineage)) if self.pods and mutating else None
        try:
            live, listed_at = await self.read(lineage)
        except TimeoutError:
            outcome, why = TIMEOUT, f"no answer in {self.seconds:g}s"
        except kube_errors.ApiError as exc:
            outcome, why = ERROR, str(exc)
        except Exception as exc:  # an unexpected answer: the cache, as before this read existed
            logger.exception("live read failed lineage=%s", lineage.key)
            outcome, why = ERROR, repr(exc)
        else:
            self._count(OK)
            return Fresh(
                state,
                lineage,
                merged(cached, live, owner_uid=lineage.owner_uid, listed_at=listed_at),
                pods=await pods if pods is not None else None,
                read_at=datetime.datetime.now(datetime.UTC),
            )
        if pods is not None:
            pods.cancel()
            await asyncio.gather(pods, return_exceptions=True)
        return self._stale(state, lineage, cached, outcome, why)

    def _stale(
        self,
        state: state_module.State,
        lineage: checkpoint_model.Lineage,
        cached: Sequence[checkpoint_model.Checkpoint],
        outcome: str,
        why: str,
    ) -> state_module.State:
        self._count(outcome)
        logger.warning(
            "live read of Checkpoints failed (%s), planning from the watch cache lineage=%s: %s",
            outcome,
            lineage.key,
            why,
        )
        note = (
            "kontinue: the restore was planned from the webhook's cache (the live read of "
            f"{lineage.key}'s Checkpoints failed: {outcome}); a set recorded in the last moments "
            "may have been missed"
        )
        return Fresh(state, lineage, list(cached), notes=(note,))


class Fresh:
    """A :class:`~webhook.state.State`: ``base`` with one lineage's Checkpoints replaced by
    ``checkpoints`` (a live read merged with the cache), and ``notes`` (warnings about the view
    itself) for the admission answer."""

    def __init__(
        self,
        base_state: state_module.State,
        lineage: checkpoint_model.Lineage,
        checkpoints: Sequence[checkpoint_model.Checkpoint],
        *,
        notes: Sequence[str] = (),
        pods: Sequence[core.Pod] | None = None,
        read_at: datetime.datetime | None = None,
    ) -> None:
        self.base = base_state
        self.lineage = lineage
        self.fresh = [
            c
            for c in checkpoints
            # the object's own namespace, as every State answers (State.checkpoints_of)
            if c.metadata.namespace == lineage.namespace and c.spec.lineage == lineage
        ]
        self.notes: Sequence[str] = tuple(notes)
        self.pods = pods
        """The lineage's plumbed pods read with the Checkpoints (``None``: not read)."""
        self.read_at = read_at

    def checkpoints_of(
        self, lineage: checkpoint_model.Lineage
    ) -> Sequence[checkpoint_model.Checkpoint]:
        if lineage == self.lineage:
            return self.fresh
        return self.base.checkpoints_of(lineage)

    def checkpoint(self, namespace: str, name: str) -> checkpoint_model.Checkpoint | None:
        if namespace == self.lineage.namespace:
            for cp in self.fresh:
                if cp.name == name:
                    return cp
        return self.base.checkpoint(namespace, name)

    def nodes(self) -> Sequence[core.Node]:
        return self.base.nodes()

    def claim_exists(self, namespace: str, name: str) -> bool | None:
        return self.base.claim_exists(namespace, name)

    def cluster_queue(self, name: str) -> kueue.ClusterQueue | None:
        return self.base.cluster_queue(name)

    def local_queue(self, namespace: str, name: str) -> kueue.LocalQueue | None:
        return self.base.local_queue(namespace, name)

    def volcano_queue(self, name: str) -> volcano.Queue | None:
        return self.base.volcano_queue(name)

    def pod_group(self, namespace: str, name: str) -> volcano.PodGroup | None:
        return self.base.pod_group(namespace, name)

    def policy(self, name: str) -> policy_model.CheckpointPolicy | None:
        return self.base.policy(name)


def notes_of(state: object) -> Sequence[str]:
    """Warnings a view carries about itself (:class:`Fresh` after a failed read), else none."""
    return state.notes if isinstance(state, Fresh) else ()


def held(
    state: state_module.State, lineage: checkpoint_model.Lineage, *, hold: float
) -> unrecorded.Hold:
    """Whether a pod of ``lineage`` waits for a predecessor no set records yet
    (:mod:`webhook.unrecorded`), from a view whose pods were read; else nothing is held."""
    if (
        not isinstance(state, Fresh)
        or state.lineage != lineage
        or state.pods is None
        or state.read_at is None
        or hold <= 0
    ):
        return unrecorded.Hold()
    found = unrecorded.victims(
        state.pods, state.checkpoints_of(lineage), owner=lineage, now=state.read_at
    )
    return unrecorded.decide(found, now=state.read_at, hold=hold)
