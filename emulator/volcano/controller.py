"""The emulated vc-controller-manager's job controller (``pkg/controllers/job/``).

Acts as ``system:serviceaccount:volcano-system:volcano-controllers``. Per vcjob, one pass:

- ``initOnJobUpdate`` → ``createOrUpdatePodGroup``: the PodGroup ``<job>-<uid>`` exists;
- ``syncJob``: while the PodGroup is past ``Pending`` (the scheduler's enqueue), every missing
  ``<job>-<task>-<index>`` pod is created (same name again after a loss), and
  ``status.state.phase`` follows (``Pending`` → ``Running``);
- a pod object that disappears raises ``PodEvicted`` (``deletePod`` handler; not for pods the
  controller itself marked ``volcano.sh/controller-out-of-sync``); ``applyPolicies`` picks the
  action. ``RestartJob`` (``state/running.go`` → ``KillJob``): ``status.retryCount++``,
  ``status.version++``, phase ``Restarting``, every remaining pod patched with the out-of-sync
  annotation (JSONPatch, ``helpers.OutOfSyncJSONPatch``) and deleted with empty options, the
  PodGroup deleted; once no pod is left the job goes back to ``Pending`` and the PodGroup and
  pods are recreated (pods carry the new ``volcano.sh/job-version``); ``retryCount >=
  maxRetry`` (default 3) ends the job ``Failed``. The default ``SyncJob`` only recreates the
  missing pod.
Not copied: Completed/Failed task accounting, other actions (Abort/Terminate/Complete/
RestartTask), job plugins (svc/ssh), Commands, DAG.
"""

from __future__ import annotations

import contextlib
from typing import Any

from emulator.apiserver import server
from emulator.volcano import jobs, loop
from kontinue.kube import errors, resources

Object = dict[str, Any]
USER = "system:serviceaccount:volcano-system:volcano-controllers"
OUT_OF_SYNC = "volcano.sh/controller-out-of-sync"
JSON_PATCH = "application/json-patch+json"
MERGE = "application/merge-patch+json"


def _owner_uid(obj: Object) -> str | None:
    for ref in (obj.get("metadata") or {}).get("ownerReferences") or []:
        if (
            ref.get("controller")
            and ref.get("kind") == "Job"
            and ref.get("apiVersion") == jobs.BATCH
        ):
            return str(ref["uid"])
    return None


class VolcanoJobController:
    def __init__(self, api: server.ApiServer) -> None:
        self.client = api.client(USER)
        self._evicted: list[tuple[str, str]] = []  # (job uid, task) of pods that disappeared
        self.loop = loop.Loop(
            self.client,
            (resources.VOLCANO_JOBS, resources.PODS, resources.PODGROUPS),
            self.sync,
            name="vc-controller",
            on_event=self._observe,
        )

    async def start(self) -> None:
        await self.loop.start()

    async def stop(self) -> None:
        await self.loop.stop()

    def _observe(self, kind: str, obj: Object) -> None:
        if kind != "DELETED" or obj.get("kind") != "Pod":
            return
        uid = _owner_uid(obj)
        annotations = (obj.get("metadata") or {}).get("annotations") or {}
        if uid is None or annotations.get(OUT_OF_SYNC) == "true":
            return
        self._evicted.append(
            (uid, str((obj["metadata"].get("labels") or {}).get("volcano.sh/task-spec")))
        )

    async def _items(self, resource: resources.Resource) -> list[Object]:
        items: list[Object] = (await self.client.list(resource))["items"]
        return items

    async def sync(self) -> None:
        vcjobs = await self._items(resources.VOLCANO_JOBS)
        pods = await self._items(resources.PODS)
        groups = {
            (g["metadata"]["namespace"], g["metadata"]["name"]): g
            for g in await self._items(resources.PODGROUPS)
        }
        evicted, self._evicted = self._evicted, []
        for job in vcjobs:
            mine = [p for p in pods if _owner_uid(p) == job["metadata"]["uid"]]
            for uid, task in evicted:
                if (
                    uid == job["metadata"]["uid"]
                    and jobs.action_for(job, task, "PodEvicted") == jobs.RESTART_JOB
                ):
                    job = await self._restart(job, mine, groups)
                    break
            await self._sync_job(job, mine, groups)

    async def _set_status(self, job: Object, status: Object) -> Object:
        updated: Object = await self.client.patch(
            resources.VOLCANO_JOBS,
            job["metadata"]["name"],
            {"status": status},
            content_type=MERGE,
            namespace=job["metadata"]["namespace"],
            subresource="status",
        )
        return updated

    async def _restart(
        self, job: Object, pods: list[Object], groups: dict[tuple[str, str], Object]
    ) -> Object:
        status = job.get("status") or {}
        retry = int(status.get("retryCount") or 0) + 1
        max_retry = int((job.get("spec") or {}).get("maxRetry") or 3)
        phase = "Failed" if retry >= max_retry else "Restarting"
        job = await self._set_status(
            job,
            {
                "retryCount": retry,
                "version": int(status.get("version") or 0) + 1,
                "state": {"phase": phase, "reason": "PodEvicted"},
            },
        )
        ns = job["metadata"]["namespace"]
        for pod in pods:
            if pod["metadata"].get("deletionTimestamp"):
                continue
            try:
                await self.client.patch(
                    resources.PODS,
                    pod["metadata"]["name"],
                    [
                        {
                            "op": "add",
                            "path": "/metadata/annotations/volcano.sh~1controller-out-of-sync",
                            "value": "true",
                        }
                    ],
                    content_type=JSON_PATCH,
                    namespace=ns,
                )
                await self.client.delete(resources.PODS, pod["metadata"]["name"], namespace=ns)
            except errors.NotFound:
                continue
        name = jobs.podgroup_name(job)
        if (ns, name) in groups:
            with contextlib.suppress(errors.NotFound):
                await self.client.delete(resources.PODGROUPS, name, namespace=ns)
            groups.pop((ns, name), None)
        return job

    async def _sync_job(
        self, job: Object, pods: list[Object], groups: dict[tuple[str, str], Object]
    ) -> None:
        ns = job["metadata"]["namespace"]
        phase = ((job.get("status") or {}).get("state") or {}).get("phase") or ""
        if phase in ("Failed", "Completed", "Terminated", "Aborted"):
            return
        if phase == "Restarting":
            if pods:
                return  # KillJob still under way
            job = await self._set_status(job, {"state": {"phase": "Pending"}})
            phase = "Pending"
        group = groups.get((ns, jobs.podgroup_name(job)))
        if group is None:
            with contextlib.suppress(errors.Conflict):
                await self.client.create(resources.PODGROUPS, jobs.podgroup_for(job))
            if not phase:
                await self._set_status(job, {"state": {"phase": "Pending"}})
            return
        if ((group.get("status") or {}).get("phase") or "Pending") == "Pending":
            return
        present = {p["metadata"]["name"] for p in pods}
        for task in (job.get("spec") or {}).get("tasks") or []:
            for index in range(int(task.get("replicas") or 0)):
                if jobs.pod_name(job, task["name"], index) not in present:
                    # Conflict: the old pod of that name is still terminating
                    with contextlib.suppress(errors.Conflict):
                        await self.client.create(resources.PODS, jobs.pod_for(job, task, index))
        running = sum(1 for p in pods if (p.get("status") or {}).get("phase") == "Running")
        wanted = "Running" if running >= jobs.min_available(job) else "Pending"
        if phase != wanted or (job.get("status") or {}).get("running") != running:
            await self._set_status(
                job,
                {
                    "state": {"phase": wanted},
                    "running": running,
                    "minAvailable": jobs.min_available(job),
                },
            )
