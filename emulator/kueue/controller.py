"""The emulated Kueue controllers: I/O edge around the pure modules of this package.

One asyncio loop, woken by watches on Jobs, Workloads and the queue objects, runs one phase per
pass on fresh lists and returns as soon as a phase wrote something (the write's own watch event
starts the next pass). The phases are the upstream controllers:

1. job reconciler (``pkg/controller/jobframework/reconciler.go`` ``ReconcileGenericJob``):
   create the Workload; finish it when the Job finishes; on ``Evicted=True`` stop the Job
   (``pkg/controller/jobs/job/job_controller.go`` ``Stop``: suspend + ``kueue.x-k8s.io/stopping``,
   ``status.startTime=nil``, pod-set restore and annotation removal, Event ``Stopped``); once the
   stopped Job has ``status.active == 0`` release the quota (``Requeued=True`` for Preempted,
   ``QuotaReserved=False(PendingEvaluation)``, ``Admitted=False(NoReservation)``, admission
   cleared) in one status apply; when the Workload is Admitted and the Job suspended, start it
   (one patch: ``suspend=false`` + pod-set info, Event ``Started``; a merge conflict finishes the
   Workload with ``FailedToStart``); a running Job without admission is stopped. With
   ``jobsets=True`` the same steps for JobSets (emulator/kueue/jobsets.py): one pod set per
   replicated Job, stop = suspend the JobSet (its controller suspends the child Jobs), quota
   released once no replicated Job has an active child.
2. workload controller (``pkg/controller/core/workload_controller.go``): admission check states
   added as ``Pending`` for the ClusterQueue's checks (``syncAdmissionCheckConditions``);
   ``Admitted=True`` (Event ``Admitted``) once quota is reserved and every check is Ready.
3. scheduler (``pkg/scheduler/scheduler.go``, ``preemption/preemption.go``,
   ``pkg/workload/evict/evict.go``): per active ClusterQueue, ``quota.schedule``; preemptions
   are one status apply each (Preempted=True + Evicted=True + checks reset + eviction count) with
   Events ``EvictedDueToPreempted`` and ``Preempted`` on the victim and ``PreemptedWorkload`` on
   the preemptor; admissions set ``status.admission`` and ``QuotaReserved=True`` (flipping
   Evicted/Preempted to False ``Previously: …``) and Admitted when no check is pending.

Workload status is written as Kueue does (``pkg/workload/patching`` ``PatchAdmissionStatus``):
server-side apply on ``workloads/status``, field manager ``kueue-admission``, force, with the
whole status Kueue holds — so list entries another manager applied (an admission check's
``podSetUpdates``) survive Kueue dropping them, as measured on a real apiserver.

Timing copied from observation (docs/cluster-emulation-queues.md): the job controller
updates a suspended Job (clearing ``startTime``) about 50 ms after Kueue's suspend patch, before
Kueue's ``status.startTime=nil`` patch arrives, which therefore gets a 409 and makes Kueue redo
``Stop`` (a second suspend update and a second ``Stopped`` Event). The emulator waits up to
``stop_wait`` seconds for that job-controller update (only after a patch that flipped
``suspend``) before sending its status patch with the stale resourceVersion, so the conflict
and the retry happen against the real emulator rules.
Without a job controller (startTime never set) Stop is a single pass.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import dataclasses
import logging
from collections.abc import Awaitable, Callable, Iterable
from pathlib import Path
from typing import Any

import yaml

from emulator import informer
from emulator.apiserver import server
from emulator.kueue import conditions, events, podsets, quota, webhook, workloads
from emulator.kueue import jobsets as jobsets_module
from kontinue import keys
from kontinue.kube import errors, resources

Object = dict[str, Any]
log = logging.getLogger(__name__)

USER = "system:serviceaccount:kueue-system:kueue-controller-manager"
FIELD_MANAGER = "kueue-admission"
COMPONENT = "kueue-admission"
STOPPING_ANNOTATION = "kueue.x-k8s.io/stopping"
APPLY = "application/apply-patch+yaml"
MERGE = "application/merge-patch+json"
WORKLOAD_PRIORITY_CLASSES = resources.Resource(
    keys.KUEUE_GROUP,
    keys.KUEUE_VERSION,
    "workloadpriorityclasses",
    "WorkloadPriorityClass",
    namespaced=False,
)
_WATCHED = (
    resources.JOBS,
    resources.WORKLOADS,
    resources.CLUSTER_QUEUES,
    resources.LOCAL_QUEUES,
    resources.RESOURCE_FLAVORS,
    resources.ADMISSION_CHECKS,
    resources.PRIORITY_CLASSES,
    WORKLOAD_PRIORITY_CLASSES,
)
_STATUS_FIELDS = (
    "conditions",
    "admission",
    "admissionChecks",
    "requeueState",
    "schedulingStats",
    "accumulatedPastExecutionTimeSeconds",
)
_HUMAN_REASON = {conditions.REASON_IN_CLUSTER_QUEUE: "prioritization in the ClusterQueue"}


def install_crds(api: server.ApiServer, directory: Path) -> None:
    """Serve every CRD in ``directory`` (Kueue's ``config/components/crd/bases`` YAMLs)."""
    for path in sorted(directory.glob("*.yaml")):
        with path.open() as stream:
            for doc in yaml.load_all(stream, Loader=yaml.CSafeLoader):
                if doc and doc.get("kind") == "CustomResourceDefinition":
                    api.install_crd(doc)


def _by_name(items: Iterable[Object]) -> dict[str, Object]:
    return {o["metadata"]["name"]: o for o in items}


def _job_finished(job: Object) -> Object | None:
    for cond in (job.get("status") or {}).get("conditions") or []:
        if cond.get("type") in ("Complete", "Failed") and cond.get("status") == "True":
            found: Object = cond
            return found
    return None


def _preemption_message(preemptor: Object, reason: str, path: str) -> str:
    """``preemptionMessage`` (pkg/scheduler/preemption/preemption.go)."""
    uid = preemptor["metadata"].get("uid") or "UNKNOWN"
    job_uid = (
        (preemptor["metadata"].get("labels") or {}).get(workloads.JOB_UID_LABEL)
    ) or "UNKNOWN"
    return (
        f"Preempted to accommodate a workload (UID: {uid}, JobUID: {job_uid}) due to "
        f"{_HUMAN_REASON[reason]}; preemptor path: {path}; preemptee path: {path}"
    )


async def cancel_all(tasks: Iterable[asyncio.Task[Any]]) -> None:
    """Cancel ``tasks`` and wait for them, re-cancelling until they are done: on Python 3.11
    ``asyncio.wait_for`` (used by the API emulator's watch streams) can swallow a cancellation
    that races the awaited result (CPython gh-86296), which would leave a watch running."""
    pending = set(tasks)
    while pending:
        for task in pending:
            task.cancel()
        _, pending = await asyncio.wait(pending, timeout=0.1)


class _Snapshot:
    """Everything one pass decides on, listed fresh."""

    def __init__(self, lists: dict[str, list[Object]]) -> None:
        self.jobs = lists["jobs"]
        self.jobsets = lists.get("jobsets") or []
        self.workloads = lists["workloads"]
        self.cluster_queues = _by_name(lists["clusterqueues"])
        self.local_queues = {
            (o["metadata"]["namespace"], o["metadata"]["name"]): o for o in lists["localqueues"]
        }
        self.flavors = _by_name(lists["resourceflavors"])
        self.checks = _by_name(lists["admissionchecks"])
        self.priority_classes = _by_name(lists["priorityclasses"])
        self.workload_priority_classes = _by_name(lists["workloadpriorityclasses"])

    def cluster_queue_of(self, wl: Object) -> str | None:
        admission = (wl.get("status") or {}).get("admission") or {}
        if admission.get("clusterQueue"):
            return str(admission["clusterQueue"])
        lq = self.local_queues.get((wl["metadata"]["namespace"], wl["spec"].get("queueName")))
        return str(lq["spec"]["clusterQueue"]) if lq else None

    def active(self, cq: Object) -> bool:
        """``pkg/cache/scheduler/clusterqueue.go``: a ClusterQueue with a missing flavor or a
        missing/inactive AdmissionCheck admits nothing."""
        spec = cq.get("spec") or {}
        for group in spec.get("resourceGroups") or []:
            for flavor in group.get("flavors") or []:
                if flavor["name"] not in self.flavors:
                    return False
        for rule in (spec.get("admissionChecksStrategy") or {}).get("admissionChecks") or []:
            check = self.checks.get(rule["name"])
            if check is None or not conditions.is_true(check, "Active"):
                return False
        return True


@dataclasses.dataclass(frozen=True)
class _Generic:
    """What ``ReconcileGenericJob`` asks of a job (``jobframework.GenericJob``)."""

    obj: Object
    finished: tuple[bool, str] | None
    """``(succeeded, message)`` once the job finished."""
    suspended: bool
    active: bool
    """Pods still running (``IsActive``): an evicted Workload keeps its quota until none."""
    workload: Callable[[int, Object | None], Object]
    """The Workload to create, given the priority value and ``priorityClassRef``."""
    stop: Callable[[Object, str], Awaitable[None]]
    start: Callable[[Object], Awaitable[None]]
    priority_source: Object | None = None
    """What :func:`workloads.priority` reads, if not ``obj``."""


class Kueue:
    """``async with Kueue(api):`` runs the emulated Kueue (CRDs must be installed first)."""

    def __init__(
        self,
        api: server.ApiServer,
        *,
        stop_wait: float = 2.0,
        webhook_enabled: bool = True,
        jobsets: bool = False,
    ) -> None:
        """``jobsets``: also run the JobSet integration (emulator/kueue/jobsets.py; the JobSet
        CRD must be installed)."""
        self.api = api
        self.watched = (*_WATCHED, jobsets_module.JOBSETS) if jobsets else _WATCHED
        self.client = api.client(USER)
        self.stop_wait = stop_wait
        self._webhook = webhook.JobWebhook(api) if webhook_enabled else None
        self._dirty = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        self.passes = 0

    async def __aenter__(self) -> Kueue:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    async def start(self) -> None:
        if self._webhook is not None:
            await self._webhook.start()
        for resource in self.watched:
            self._tasks.append(asyncio.create_task(self._watch(resource)))
        self._tasks.append(asyncio.create_task(self._loop()))

    async def stop(self) -> None:
        await cancel_all(self._tasks)
        self._tasks.clear()
        if self._webhook is not None:
            await self._webhook.stop()

    # --- plumbing ------------------------------------------------------------------------------

    async def _watch(self, resource: resources.Resource) -> None:
        await informer.mark_on_change(
            self.client,
            resource,
            on_listed=self._dirty.set,
            on_event=lambda _kind, _obj: self._dirty.set(),
            what="emulated kueue",
        )

    async def _loop(self) -> None:
        while True:
            await self._dirty.wait()
            self._dirty.clear()
            await asyncio.sleep(0)  # in-process calls may never suspend: let the others run
            try:
                await self.reconcile()
            except asyncio.CancelledError:
                raise
            except (errors.Conflict, errors.NotFound) as exc:
                log.debug("emulated kueue pass raced a write (%s); retrying", exc)
                self._dirty.set()
                await asyncio.sleep(0.01)
            except Exception:  # a pass must never kill the controller; retried
                log.exception("emulated kueue pass failed")
                await asyncio.sleep(0.2)
                self._dirty.set()

    async def _list(self, resource: resources.Resource) -> list[Object]:
        try:
            items: list[Object] = (await self.client.list(resource))["items"]
            return items
        except errors.NotFound:
            return []

    async def _event(self, obj: Object, reason: str, message: str) -> None:
        await events.record(self.client, obj, reason=reason, message=message, component=COMPONENT)

    async def _apply_status(self, wl: Object) -> Object:
        status = wl.get("status") or {}
        body = {
            "apiVersion": f"{keys.KUEUE_GROUP}/{keys.KUEUE_VERSION}",
            "kind": "Workload",
            "metadata": {"name": wl["metadata"]["name"], "namespace": wl["metadata"]["namespace"]},
            "status": {k: copy.deepcopy(status[k]) for k in _STATUS_FIELDS if k in status},
        }
        applied: Object = await self.client.patch(
            resources.WORKLOADS,
            wl["metadata"]["name"],
            body,
            content_type=APPLY,
            namespace=wl["metadata"]["namespace"],
            subresource="status",
            field_manager=FIELD_MANAGER,
            force=True,
        )
        return applied

    # --- one pass ------------------------------------------------------------------------------

    async def reconcile(self) -> None:
        """One pass: the first phase that writes ends it."""
        self.passes += 1
        names = (
            "jobs",
            "workloads",
            "clusterqueues",
            "localqueues",
            "resourceflavors",
            "admissionchecks",
            "priorityclasses",
            "workloadpriorityclasses",
            "jobsets",
        )[: len(self.watched)]
        listed = await asyncio.gather(*(self._list(r) for r in self.watched))
        snap = _Snapshot(dict(zip(names, listed, strict=True)))
        if await self._jobs(snap):
            return
        if await self._workloads(snap):
            return
        await self._schedule(snap)

    # --- 1. job reconciler ---------------------------------------------------------------------

    async def _jobs(self, snap: _Snapshot) -> bool:
        by_owner: dict[str, Object] = {}
        for wl in snap.workloads:
            owner = workloads.owner_job(wl) or workloads.owner_of(wl, jobsets_module.is_jobset_ref)
            if owner is not None:
                by_owner[owner["uid"]] = wl
        wrote = False
        for job in snap.jobs:
            if workloads.queue_name(job) is None:
                continue
            wrote |= await self._job(job, by_owner.get(job["metadata"]["uid"]), snap)
        for jobset in snap.jobsets:
            if workloads.queue_name(jobset) is None:
                continue
            wrote |= await self._jobset(jobset, by_owner.get(jobset["metadata"]["uid"]), snap)
        return wrote

    async def _stop_jobset(self, jobset: Object, wl: Object, message: str) -> None:
        patch = jobsets_module.stop_patch(jobset, wl)
        meta = jobset["metadata"]
        await self.client.patch(
            jobsets_module.JOBSETS,
            meta["name"],
            patch,
            content_type=MERGE,
            namespace=meta["namespace"],
        )
        await self._event(jobset, "Stopped", message)

    async def _start_jobset(self, jobset: Object, wl: Object, snap: _Snapshot) -> None:
        meta = jobset["metadata"]
        try:
            infos = podsets.for_start(wl, flavors=snap.flavors, local_queue=wl["spec"]["queueName"])
            patch = jobsets_module.start_patch(jobset, infos)
        except (podsets.Conflict, KeyError) as exc:
            conditions.set_condition(
                wl, conditions.FINISHED, "True", conditions.REASON_FAILED_TO_START, str(exc)
            )
            await self._apply_status(wl)
            return
        await self.client.patch(
            jobsets_module.JOBSETS,
            meta["name"],
            patch,
            content_type=MERGE,
            namespace=meta["namespace"],
        )
        cq = wl["status"]["admission"]["clusterQueue"]
        await self._event(jobset, "Started", f"Admitted by clusterQueue {cq}")

    async def _job(self, job: Object, wl: Object | None, snap: _Snapshot) -> bool:
        meta = job["metadata"]
        finished = _job_finished(job)
        stopping = (meta.get("annotations") or {}).get(STOPPING_ANNOTATION) == "true"
        ok = finished is not None and finished["type"] == "Complete"
        message = "Job finished successfully" if ok else str((finished or {}).get("message") or "")
        return await self._generic(
            _Generic(
                obj=job,
                finished=None if finished is None else (ok, message),
                suspended=bool((job.get("spec") or {}).get("suspend")) and not stopping,
                active=int((job.get("status") or {}).get("active") or 0) > 0,
                workload=lambda value, ref: workloads.for_job(
                    job, priority_value=value, priority_class_ref=ref
                ),
                stop=lambda wl, message: self._stop(job, wl, message),
                start=lambda wl: self._start(job, wl, snap),
            ),
            wl,
            snap,
        )

    async def _jobset(self, jobset: Object, wl: Object | None, snap: _Snapshot) -> bool:
        """A JobSet (emulator/kueue/jobsets.py): no ``startTime`` or ``stopping`` handling,
        which the JobSet controller does for its child Jobs."""
        done = jobsets_module.finished(jobset)
        return await self._generic(
            _Generic(
                obj=jobset,
                finished=None
                if done is None
                else (done["type"] == "Completed", str(done.get("message") or "")),
                suspended=bool(jobset["spec"].get("suspend")),
                active=jobsets_module.is_active(jobset),
                workload=lambda value, ref: jobsets_module.for_jobset(
                    jobset, priority_value=value, priority_class_ref=ref
                ),
                stop=lambda wl, message: self._stop_jobset(jobset, wl, message),
                start=lambda wl: self._start_jobset(jobset, wl, snap),
                priority_source=jobsets_module.as_job(jobset),
            ),
            wl,
            snap,
        )

    async def _generic(self, job: _Generic, wl: Object | None, snap: _Snapshot) -> bool:
        """``ReconcileGenericJob`` for one Job or JobSet and its Workload (if any)."""
        meta = job.obj["metadata"]
        if wl is None:
            if job.finished is not None:
                return False
            value, ref = workloads.priority(
                job.priority_source or job.obj,
                workload_priority_classes=snap.workload_priority_classes,
                priority_classes=snap.priority_classes,
            )
            created = await self.client.create(resources.WORKLOADS, job.workload(value, ref))
            await self._event(
                job.obj,
                "CreatedWorkload",
                f"Created Workload: {meta['namespace']}/{created['metadata']['name']}",
            )
            return True
        if conditions.is_true(wl, conditions.FINISHED):
            return False
        if job.finished is not None:
            ok, message = job.finished
            conditions.set_condition(
                wl,
                conditions.FINISHED,
                "True",
                conditions.REASON_SUCCEEDED if ok else conditions.REASON_FAILED,
                message,
            )
            await self._apply_status(wl)
            return True
        evicted = conditions.find(
            wl["status"].get("conditions") if wl.get("status") else None, conditions.EVICTED
        )
        if evicted is not None and evicted.get("status") == "True":
            if not job.suspended:
                await job.stop(wl, str(evicted.get("message") or ""))
                return True
            if conditions.is_true(wl, conditions.QUOTA_RESERVED) and not job.active:
                await self._release(wl, evicted)
                return True
            return False
        if conditions.is_true(wl, conditions.ADMITTED):
            if job.suspended:
                await job.start(wl)
                return True
            return False
        if not job.suspended and not conditions.is_true(wl, conditions.QUOTA_RESERVED):
            await job.stop(wl, "Not admitted by cluster queue")
            return True
        return False

    async def _await_job_controller(self, job: Object) -> None:
        version = job["metadata"]["resourceVersion"]
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.stop_wait
        while loop.time() < deadline:
            current = await self.client.get(
                resources.JOBS, job["metadata"]["name"], namespace=job["metadata"]["namespace"]
            )
            if current["metadata"]["resourceVersion"] != version:
                return
            await asyncio.sleep(0.01)

    async def _stop(self, job: Object, wl: Object, message: str) -> None:
        name, ns = job["metadata"]["name"], job["metadata"]["namespace"]
        for _ in range(10):
            flips = not (job.get("spec") or {}).get("suspend")
            job = await self.client.patch(
                resources.JOBS,
                name,
                {
                    "metadata": {"annotations": {STOPPING_ANNOTATION: "true"}},
                    "spec": {"suspend": True},
                },
                content_type=MERGE,
                namespace=ns,
            )
            await self._event(job, "Stopped", message)
            if (job.get("status") or {}).get("startTime"):
                if flips:  # the job controller reacts to the flip before this patch lands
                    await self._await_job_controller(job)
                try:
                    job = await self.client.patch(
                        resources.JOBS,
                        name,
                        {
                            "metadata": {"resourceVersion": job["metadata"]["resourceVersion"]},
                            "status": {"startTime": None},
                        },
                        content_type=MERGE,
                        namespace=ns,
                        subresource="status",
                    )
                except errors.Conflict:
                    job = await self.client.get(resources.JOBS, name, namespace=ns)
                    continue
            break
        template = (job.get("spec") or {}).get("template") or {}
        original = next(
            (
                ps.get("template") or {}
                for ps in wl["spec"]["podSets"]
                if ps["name"] == workloads.POD_SET
            ),
            {},
        )
        restored = podsets.with_info(template, podsets.of_template(original))
        patch = {"spec": {"template": podsets.template_patch(template, restored)}}
        patch["metadata"] = {"annotations": {STOPPING_ANNOTATION: None}}
        await self.client.patch(resources.JOBS, name, patch, content_type=MERGE, namespace=ns)

    async def _release(self, wl: Object, evicted: Object) -> None:
        reason, message = str(evicted.get("reason")), str(evicted.get("message") or "")
        if reason in (conditions.REASON_PREEMPTED, "NodeFailures"):
            conditions.set_condition(wl, conditions.REQUEUED, "True", reason, message)
        conditions.unset_quota_reservation(
            wl, reason=conditions.REASON_PENDING_EVALUATION, message=message
        )
        # Upstream this is the same server-side apply as every other status write, omitting
        # ``admission``. The API emulator's apply leaves husks of removed list-map items behind
        # (``admission: {podSetAssignments: [{flavors: {}, ...}]}``), so this one write is a JSON
        # merge patch that nulls ``admission`` — same single write, same resulting object.
        await self.client.patch(
            resources.WORKLOADS,
            wl["metadata"]["name"],
            {"status": {"conditions": wl["status"]["conditions"], "admission": None}},
            content_type=MERGE,
            namespace=wl["metadata"]["namespace"],
            subresource="status",
            field_manager=FIELD_MANAGER,
        )

    async def _start(self, job: Object, wl: Object, snap: _Snapshot) -> None:
        name, ns = job["metadata"]["name"], job["metadata"]["namespace"]
        template = (job.get("spec") or {}).get("template") or {}
        try:
            infos = podsets.for_start(wl, flavors=snap.flavors, local_queue=wl["spec"]["queueName"])
            merged = podsets.merged_template(template, infos[workloads.POD_SET])
        except (podsets.Conflict, KeyError) as exc:
            conditions.set_condition(
                wl, conditions.FINISHED, "True", conditions.REASON_FAILED_TO_START, str(exc)
            )
            await self._apply_status(wl)
            return
        patch = {"spec": {"suspend": False, "template": podsets.template_patch(template, merged)}}
        job = await self.client.patch(resources.JOBS, name, patch, content_type=MERGE, namespace=ns)
        cq = wl["status"]["admission"]["clusterQueue"]
        await self._event(job, "Started", f"Admitted by clusterQueue {cq}")

    # --- 2. workload controller ----------------------------------------------------------------

    def _checks_for(self, wl: Object, cq: Object) -> list[str]:
        rules = ((cq.get("spec") or {}).get("admissionChecksStrategy") or {}).get(
            "admissionChecks"
        ) or []
        admission = (wl.get("status") or {}).get("admission") or {}
        assigned = {
            f
            for a in admission.get("podSetAssignments") or []
            for f in (a.get("flavors") or {}).values()
        }
        return [
            r["name"]
            for r in rules
            if not r.get("onFlavors") or (assigned and assigned & set(r["onFlavors"]))
        ]

    def _sync_checks(self, wl: Object, cq: Object) -> bool:
        wanted = self._checks_for(wl, cq)
        status = wl.setdefault("status", {})
        current = status.get("admissionChecks") or []
        names = [c["name"] for c in current]
        if sorted(names) == sorted(wanted):
            return False
        kept = [c for c in current if c["name"] in wanted]
        for name in wanted:
            if name not in names:
                kept.append(
                    {
                        "name": name,
                        "state": conditions.CHECK_PENDING,
                        "message": "",
                        "lastTransitionTime": conditions.now(),
                    }
                )
        status["admissionChecks"] = kept
        return True

    async def _workloads(self, snap: _Snapshot) -> bool:
        wrote = False
        for wl in snap.workloads:
            if conditions.is_true(wl, conditions.FINISHED):
                continue
            cq_name = snap.cluster_queue_of(wl)
            cq = snap.cluster_queues.get(cq_name or "")
            if cq is None:
                continue
            changed = self._sync_checks(wl, cq)
            admitting = False
            if conditions.is_true(wl, conditions.QUOTA_RESERVED) and not conditions.is_true(
                wl, conditions.ADMITTED
            ):
                admitting = conditions.checks_ready(wl)
                changed |= conditions.sync_admitted(wl)
            if changed:
                applied = await self._apply_status(wl)
                if admitting:
                    await self._event(
                        applied,
                        "Admitted",
                        f"Admitted by ClusterQueue {cq_name}, wait time since reservation was 0s",
                    )
                wrote = True
        return wrote

    # --- 3. scheduler --------------------------------------------------------------------------

    async def _schedule(self, snap: _Snapshot) -> None:
        for cq_name, cq in sorted(snap.cluster_queues.items()):
            if not snap.active(cq):
                continue
            mine = [wl for wl in snap.workloads if snap.cluster_queue_of(wl) == cq_name]
            admitted = [wl for wl in mine if quota.holds_quota(wl)]
            pending = [
                wl
                for wl in mine
                if not conditions.is_true(wl, conditions.QUOTA_RESERVED)
                and not conditions.is_true(wl, conditions.FINISHED)
                and (wl.get("spec") or {}).get("active", True) is not False
            ]
            decision = quota.schedule(cq, flavors=snap.flavors, pending=pending, admitted=admitted)
            for victim, preemptor in decision.preempt:
                await self._preempt(victim, preemptor, cq_name)
            for wl, admission in decision.admit:
                await self._admit(wl, admission, cq)
            for wl, reason, message in decision.waiting:
                if conditions.set_condition(
                    wl, conditions.QUOTA_RESERVED, "False", reason, message
                ):
                    await self._apply_status(wl)

    async def _preempt(self, victim: Object, preemptor: Object, cq_name: str) -> None:
        reason = conditions.REASON_IN_CLUSTER_QUEUE
        message = _preemption_message(preemptor, reason, f"/{cq_name}")
        conditions.set_condition(victim, conditions.PREEMPTED, "True", reason, message)
        conditions.set_evicted(victim, reason=conditions.REASON_PREEMPTED, message=message)
        conditions.count_eviction(victim, conditions.REASON_PREEMPTED)
        applied = await self._apply_status(victim)
        await self._event(applied, "EvictedDueToPreempted", message)
        mine, theirs = workloads.priority_of(preemptor), workloads.priority_of(victim)
        await self._event(
            applied,
            "Preempted",
            f"{message}; preemptor effective priority: {mine} (base: {mine}, boost: 0); "
            f"preemptee effective priority: {theirs} (base: {theirs}, boost: 0)",
        )
        victim_meta = victim["metadata"]
        await self._event(
            preemptor,
            "PreemptedWorkload",
            f"Preempted workload {victim_meta['namespace']}/{victim_meta['name']} "
            f"(UID: {victim_meta['uid']}) in ClusterQueue {cq_name}; preemptor effective "
            f"priority: {mine} (base: {mine}, boost: 0); preemptee effective priority: "
            f"{theirs} (base: {theirs}, boost: 0)",
        )

    async def _admit(self, wl: Object, admission: Object, cq: Object) -> None:
        cq_name = cq["metadata"]["name"]
        conditions.set_quota_reservation(wl, admission)
        self._sync_checks(wl, cq)
        conditions.sync_admitted(wl)
        applied = await self._apply_status(wl)
        await self._event(
            applied,
            "QuotaReserved",
            f"Quota reserved in ClusterQueue {cq_name}, wait time since queued was 0s",
        )
        if conditions.is_true(applied, conditions.ADMITTED):
            await self._event(
                applied,
                "Admitted",
                f"Admitted by ClusterQueue {cq_name}, wait time since reservation was 0s",
            )


@contextlib.asynccontextmanager
async def running(api: server.ApiServer, **options: Any) -> Any:
    async with Kueue(api, **options) as kueue:
        yield kueue
