"""The emulated batch/v1 Job controller: watches Jobs and pods, syncs one Job at a time.

Acts as ``system:serviceaccount:kube-system:job-controller`` (kube-controller-manager with
``--use-service-account-credentials``, as in tests/fixtures/admission 03, 06, 07, 30) and makes the
requests the real controller makes (kubernetes/kubernetes v1.36
``pkg/controller/job/job_controller.go``):

- pod CREATE with ``generateName`` from the template (``manageJob`` ->
  ``podControl.CreatePodsWithGenerateName``; recording 03);
- tracking-finalizer removal as a strategic-merge patch
  ``{"metadata": {"$deleteFromPrimitiveList/finalizers": [...]}}``
  (``removeTrackingFinalizerPatch``; it arrives as a pod UPDATE, recordings 06 and 30);
- pod DELETE without options, so the pod's own ``terminationGracePeriodSeconds`` applies
  (``podControl.DeletePod``; recording 07 shows the resolved grace 120);
- no pod created before the pod-failure backoff has passed (``manageJob``; 10 s after a failed
  pod finished, doubling: :mod:`emulator.jobs.backoff`; ``pod_failure_backoff`` sets the base,
  0 turns it off);
- ``jobs/status`` writes (``updateJobStatus``: ``UpdateStatus``, a PUT carrying the
  resourceVersion of the copy the sync started from). Here a merge patch with that
  ``metadata.resourceVersion``, so a status computed from a stale copy gets 409 Conflict and
  the Job is synced again from the newer copy — never written over a newer status (without the
  precondition, a sync that began before Kueue cleared ``startTime`` wrote it back, and Kueue's
  readmission patch of the template was refused as immutable).

Level-triggered: every Job or pod event enqueues the Job's key; a :class:`emulator.workqueue.
WorkQueue` serializes syncs per key (``processNextWorkItem``); the decision is
:mod:`emulator.jobs.planning` (pure). A pod that still carries the tracking finalizer but whose
Job is gone loses the finalizer (``syncOrphanPod``). The controller's own writes are put into its
caches at once (``informer.Informer.observe``), which is what client-go's expectations achieve:
a sync never acts twice on a state the watch has not delivered yet.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from typing import Any

from emulator import informer, workqueue
from emulator.apiserver import server, strategy
from emulator.jobs import accounting, backoff, planning
from kontinue import keys
from kontinue.kube import api as kube_api
from kontinue.kube import errors, resources

log = logging.getLogger("emulator.jobs")

Object = dict[str, Any]
Key = tuple[str, str, str]  # ("job" | "orphan", namespace, name)

CONFLICT_RETRY_SECONDS = 0.05
"""After a 409 on the status write. Upstream's rate limiter starts at 1 s
(``DefaultJobApiBackOff``); the newer Job's own watch event usually requeues it sooner."""

REMOVE_TRACKING_FINALIZER = {
    "metadata": {"$deleteFromPrimitiveList/finalizers": [keys.JOB_TRACKING_FINALIZER]}
}


class JobController:
    """Run with ``await start()`` / ``await stop()``; ``syncs`` counts completed Job syncs."""

    def __init__(
        self,
        api: server.ApiServer,
        *,
        user: str = planning.JOB_CONTROLLER_USER,
        workers: int = 4,
        pod_failure_backoff: float = backoff.DEFAULT_SECONDS,
    ) -> None:
        self.pod_failure_backoff = pod_failure_backoff
        self.backoffs: dict[tuple[str, str], backoff.Record] = {}
        self.client = api.client(user)
        self.jobs = informer.Informer(self.client, resources.JOBS, on_change=self._job_changed)
        self.pods = informer.Informer(self.client, resources.PODS, on_change=self._pod_changed)
        self.queue: workqueue.WorkQueue[Key] = workqueue.WorkQueue(
            self._sync, workers=workers, name="job-controller"
        )
        self.syncs = 0
        self._tasks: list[asyncio.Task[None]] = []

    async def start(self) -> None:
        self._tasks = await informer.start([self.jobs, self.pods])
        self.queue.start()
        for job in self.jobs.items():
            self._job_changed("ADDED", job)

    async def stop(self) -> None:
        await self.queue.stop()
        await informer.stop(self._tasks)

    # --- events -> keys ----------------------------------------------------------------------

    def _job_changed(self, _kind: str, job: Object) -> None:
        meta = job["metadata"]
        self.queue.add(("job", meta["namespace"], meta["name"]))

    def _pod_changed(self, _kind: str, pod: Object) -> None:
        meta = pod["metadata"]
        owner = planning.owner_job(pod)
        if owner is None:
            return
        job = self.jobs.get(owner[0], meta["namespace"])
        if job is not None and job["metadata"]["uid"] == owner[1]:
            self.queue.add(("job", meta["namespace"], owner[0]))
        elif keys.JOB_TRACKING_FINALIZER in (meta.get("finalizers") or []):
            self.queue.add(("orphan", meta["namespace"], meta["name"]))

    # --- syncing -----------------------------------------------------------------------------

    async def _sync(self, key: Key) -> None:
        what, namespace, name = key
        if what == "orphan":
            await self._sync_orphan(namespace, name)
        else:
            await self._sync_job(namespace, name)
            self.syncs += 1

    def _owned(self, job: Object) -> list[Object]:
        uid = job["metadata"]["uid"]
        namespace = job["metadata"]["namespace"]
        return [
            p
            for p in self.pods.items()
            if p["metadata"].get("namespace") == namespace
            and (planning.owner_job(p) or ("", ""))[1] == uid
        ]

    async def _sync_orphan(self, namespace: str, name: str) -> None:
        """``syncOrphanPod``: a Job pod whose Job is gone keeps no tracking finalizer."""
        pod = self.pods.get(name, namespace)
        owner = planning.owner_job(pod) if pod else None
        if pod is None or owner is None:
            return
        try:
            job = await self.client.get(resources.JOBS, owner[0], namespace=namespace)
            if job["metadata"]["uid"] == owner[1]:
                return  # the Job exists after all: its own sync handles the pod
        except errors.NotFound:
            pass
        await self._remove_finalizer(pod)

    async def _remove_finalizer(self, pod: Object) -> None:
        meta = pod["metadata"]
        if keys.JOB_TRACKING_FINALIZER not in (meta.get("finalizers") or []):
            return
        try:
            updated = await self.client.patch(
                resources.PODS,
                meta["name"],
                REMOVE_TRACKING_FINALIZER,
                content_type=kube_api.STRATEGIC_MERGE_PATCH,
                namespace=meta["namespace"],
            )
        except errors.NotFound:
            return
        self.pods.observe(updated)

    async def _delete(self, pod: Object) -> None:
        meta = pod["metadata"]
        try:
            deleted = await self.client.delete(
                resources.PODS, meta["name"], namespace=meta["namespace"]
            )
        except errors.NotFound:
            return
        self.pods.observe(deleted)

    async def _sync_job(self, namespace: str, name: str) -> None:
        job = self.jobs.get(name, namespace)
        if job is None:
            self.backoffs.pop((namespace, name), None)  # removeBackoffRecord
            return
        pods = self._owned(job)
        if planning.is_finished(job):
            self.backoffs.pop((namespace, name), None)
            for pod in pods:  # leftover finalizers of a finished Job (trackJob... finishing)
                await self._remove_finalizer(pod)
            return
        try:
            decision = planning.decide(job, pods)
        except accounting.InvalidJob as error:
            log.warning("job %s/%s cannot be synced: %s", namespace, name, error)
            return
        by_name = {p["metadata"]["name"]: p for p in pods}
        decision = self._hold_back(namespace, name, decision, by_name)
        for pod_name in decision.remove_finalizers:
            await self._remove_finalizer(by_name[pod_name])
        for pod_name in decision.suspend:  # deleteJobPods: finalizer first, then DELETE
            await self._remove_finalizer(by_name[pod_name])
            await self._delete(by_name[pod_name])
        for pod_name in decision.delete:
            await self._delete(by_name[pod_name])
        for index in decision.create:
            body = planning.pod_from_template(job, index=index)
            created = await self.client.create(resources.PODS, body, namespace=namespace)
            self.pods.observe(created)
        status = planning.next_status(job, self._owned(job), decision, now=strategy.now())
        if not await self.write_status(job, status):
            # syncJob returns the conflict; processNextWorkItem requeues the key rate-limited
            self.queue.add_after(("job", namespace, name), CONFLICT_RETRY_SECONDS)

    def _hold_back(
        self, namespace: str, name: str, decision: planning.Decision, by_name: dict[str, Object]
    ) -> planning.Decision:
        """``manageJob``'s pod-failure backoff (:mod:`emulator.jobs.backoff`): no pod is created
        before it has passed; the Job is synced again when it has."""
        finished = [by_name[n] for n in decision.remove_finalizers]
        succeeded = [p for p in finished if (p.get("status") or {}).get("phase") == "Succeeded"]
        failed = [p for p in finished if (p.get("status") or {}).get("phase") != "Succeeded"]
        key = (namespace, name)
        record = backoff.next_record(self.backoffs.get(key, backoff.Record()), succeeded, failed)
        self.backoffs[key] = record
        wait = backoff.remaining(record, time.time(), default=self.pod_failure_backoff)
        if not decision.create or wait <= 0:
            return decision
        self.queue.add_after(("job", namespace, name), wait)
        return dataclasses.replace(decision, create=())

    async def write_status(self, job: Object, status: Object) -> bool:
        """The status write; False when the Job changed since ``job`` was read (409)."""
        old = job.get("status") or {}
        if status == old:
            return True
        patch: Object = {k: None for k in old if k not in status}
        patch.update(status)
        meta = job["metadata"]
        try:
            updated = await self.client.patch(
                resources.JOBS,
                meta["name"],
                {"metadata": {"resourceVersion": meta["resourceVersion"]}, "status": patch},
                content_type=kube_api.MERGE_PATCH,
                namespace=meta["namespace"],
                subresource="status",
            )
        except errors.NotFound:
            return True
        except errors.Conflict:
            log.info(
                "job %s/%s changed during its sync; syncing again", meta["namespace"], meta["name"]
            )
            return False
        self.jobs.observe(updated)
        return True
