"""The emulated vc-controller-manager's job controller (volcano-sh/volcano
``pkg/controllers/job/``).

Acts as ``system:serviceaccount:volcano-system:volcano-controllers``. Copied:

- **Events** (``job_controller_handler.go``): a pod whose phase turns ``Failed`` raises
  ``PodFailed`` with the exit code of ``ContainerStatuses[0]`` (``updatePod``); a pod object
  that disappears raises ``PodEvicted`` (``deletePod``). A pod the controller itself marked
  ``volcano.sh/controller-out-of-sync`` raises neither (``OutOfSync``). Each request carries the
  pod's ``volcano.sh/job-version``; a request older than ``status.version`` is a ``SyncJob``
  (``applyPolicies``). A preempted pod that saves and exits 143 thus raises ``PodFailed`` first,
  while it terminates, and ``PodEvicted`` once it is gone (upstream issue #5885).
- **Policies**: :func:`emulator.volcano.jobs.action_for` (``applyPolicies``).
- **Actions** (``state/*.go``, ``job_controller_actions.go``):
  ``RestartJob`` (``KillJob``, ``PodRetainPhaseNone``; at the last retry, ``retryCount >=
  maxRetry - 1``, Failed/Succeeded pods are kept): ``retryCount++``, ``version++``, phase
  ``Restarting``, every pod patched with the out-of-sync annotation (JSONPatch,
  ``helpers.OutOfSyncJSONPatch``) and deleted with empty options, the PodGroup deleted;
  ``RestartTask``/``RestartPod`` (``KillTarget``): the same for the task's pods / the pod,
  ``retryCount++``, the PodGroup kept, no ``version++``; ``restartingUpdateStatus``:
  ``retryCount >= maxRetry`` (default 3) ends the job ``Failed``, else once ``total -
  terminating >= minAvailable`` the job is ``Pending`` again (the PodGroup and the pods are
  recreated, pods carrying the new ``volcano.sh/job-version``);
  ``TerminateJob``/``AbortJob``/``CompleteJob`` (``KillJob``, ``PodRetainPhaseSoft``): phase
  ``Terminating``/``Aborting``/``Completing``, every pod not Failed/Succeeded killed, then
  ``Terminated``/``Aborted``/``Completed`` once none is pending, running or terminating;
  ``SyncJob`` (``syncJob``): while the PodGroup is past ``Pending`` every missing
  ``<job>-<task>-<index>`` pod is created (same name again after a loss); pods being deleted
  count as terminating, never failed; when every pod has Succeeded or Failed the job is
  ``Completed`` if ``succeeded >= minAvailable`` else ``Failed`` (``state/running.go``);
  otherwise ``Running`` once ``minAvailable`` pods run.
Not copied: ``minSuccess``, task ``minAvailable`` checks, ``RestartPartition``, policy
``timeout``, job plugins (svc/ssh), Commands, DAG, ``TaskCompleted``/``TaskFailed`` events.
"""

from __future__ import annotations

import contextlib
import dataclasses
from typing import Any

from emulator.apiserver import server
from emulator.volcano import jobs, loop
from kontinue.kube import errors, resources

Object = dict[str, Any]
USER = "system:serviceaccount:volcano-system:volcano-controllers"
OUT_OF_SYNC = "volcano.sh/controller-out-of-sync"
JSON_PATCH = "application/json-patch+json"
MERGE = "application/merge-patch+json"
FINISHED = ("Failed", "Completed", "Terminated", "Aborted")
SOFT_KILLS = {
    "TerminateJob": ("Terminating", "Terminated"),
    "AbortJob": ("Aborting", "Aborted"),
    "CompleteJob": ("Completing", "Completed"),
}
ENDING = dict(SOFT_KILLS.values())


@dataclasses.dataclass(frozen=True)
class Request:
    """``apis.Request`` of one pod event."""

    job_uid: str
    task: str
    pod: str
    event: str
    exit_code: int
    version: int


def _owner_uid(obj: Object) -> str | None:
    for ref in (obj.get("metadata") or {}).get("ownerReferences") or []:
        if (
            ref.get("controller")
            and ref.get("kind") == "Job"
            and ref.get("apiVersion") == jobs.BATCH
        ):
            return str(ref["uid"])
    return None


def _phase(obj: Object) -> str:
    return str((obj.get("status") or {}).get("phase") or "")


def _exit_code(pod: Object) -> int:
    statuses = (pod.get("status") or {}).get("containerStatuses") or []
    terminated = ((statuses[0].get("state") or {}).get("terminated") or {}) if statuses else {}
    return int(terminated.get("exitCode") or 0)


def _deleting(pod: Object) -> bool:
    return bool(pod["metadata"].get("deletionTimestamp"))


class VolcanoJobController:
    def __init__(self, api: server.ApiServer) -> None:
        self.client = api.client(USER)
        self._requests: list[Request] = []
        self._phases: dict[str, str] = {}  # pod uid -> last phase seen (the informer's oldPod)
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
        if obj.get("kind") != "Pod":
            return
        uid = _owner_uid(obj)
        meta = obj.get("metadata") or {}
        annotations = meta.get("annotations") or {}
        task = annotations.get("volcano.sh/task-spec")
        if uid is None or task is None:
            return
        pod_uid = str(meta.get("uid"))
        old = self._phases.pop(pod_uid, None) if kind == "DELETED" else self._phases.get(pod_uid)
        if kind != "DELETED":
            self._phases[pod_uid] = _phase(obj)
        if annotations.get(OUT_OF_SYNC) == "true":
            return  # OutOfSync: the controller's own kill
        version = int(annotations.get("volcano.sh/job-version") or 0)
        name = str(meta.get("name"))
        if kind == "DELETED":
            self._requests.append(Request(uid, task, name, "PodEvicted", 0, version))
        elif _phase(obj) == "Failed" and old != "Failed":
            self._requests.append(Request(uid, task, name, "PodFailed", _exit_code(obj), version))

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
        requests, self._requests = self._requests, []
        for job in vcjobs:
            mine = [p for p in pods if _owner_uid(p) == job["metadata"]["uid"]]
            for request in requests:
                if request.job_uid != job["metadata"]["uid"]:
                    continue
                status = job.get("status") or {}
                action = jobs.SYNC_JOB
                if request.version >= int(status.get("version") or 0):
                    action = jobs.action_for(job, request.task, request.event, request.exit_code)
                job = await self._execute(job, action, request, mine, groups)
            await self._sync_job(job, mine, groups)

    async def _execute(
        self,
        job: Object,
        action: str,
        request: Request,
        pods: list[Object],
        groups: dict[tuple[str, str], Object],
    ) -> Object:
        phase = ((job.get("status") or {}).get("state") or {}).get("phase") or "Pending"
        if phase not in ("Pending", "Running") or action == jobs.SYNC_JOB:
            return job  # finishing states kill on every sync anyway (state/*.go)
        if action == jobs.RESTART_JOB:
            return await self._restart(job, pods, groups)
        if action in ("RestartTask", "RestartPod"):
            targets = [
                p
                for p in pods
                if (p["metadata"].get("annotations") or {}).get("volcano.sh/task-spec")
                == request.task
                and (action == "RestartTask" or p["metadata"]["name"] == request.pod)
            ]
            status = job.get("status") or {}
            await self._kill(job, targets)
            return await self._set_status(
                job,
                {
                    "retryCount": int(status.get("retryCount") or 0) + 1,
                    "state": {"phase": "Restarting"},
                },
            )
        if action in SOFT_KILLS:
            await self._kill(job, [p for p in pods if _phase(p) not in ("Failed", "Succeeded")])
            return await self._set_status(job, {"state": {"phase": SOFT_KILLS[action][0]}})
        return job

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

    async def _kill(self, job: Object, pods: list[Object]) -> None:
        """``killPods``: the out-of-sync JSONPatch, then a DELETE with empty options."""
        ns = job["metadata"]["namespace"]
        for pod in pods:
            if _deleting(pod):
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

    async def _restart(
        self,
        job: Object,
        pods: list[Object],
        groups: dict[tuple[str, str], Object],
    ) -> Object:
        status = job.get("status") or {}
        retry = int(status.get("retryCount") or 0)
        max_retry = int((job.get("spec") or {}).get("maxRetry") or 3)
        last = retry >= max_retry - 1  # the last retry keeps Failed/Succeeded pods
        doomed = [p for p in pods if not (last and _phase(p) in ("Failed", "Succeeded"))]
        await self._kill(job, doomed)
        job = await self._set_status(
            job,
            {
                "retryCount": retry + 1,
                "version": int(status.get("version") or 0) + 1,
                "state": {"phase": "Restarting"},
            },
        )
        ns = job["metadata"]["namespace"]
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
        status = job.get("status") or {}
        phase = (status.get("state") or {}).get("phase") or ""
        if phase in FINISHED:
            return
        if phase in ENDING:
            alive = [p for p in pods if _phase(p) not in ("Failed", "Succeeded")]
            await self._kill(job, alive)
            if not alive:
                await self._set_status(job, {"state": {"phase": ENDING[phase]}})
            return
        total = sum(int(t.get("replicas") or 0) for t in (job.get("spec") or {}).get("tasks") or [])
        if phase == "Restarting":
            max_retry = int((job.get("spec") or {}).get("maxRetry") or 3)
            if int(status.get("retryCount") or 0) >= max_retry:
                await self._set_status(job, {"state": {"phase": "Failed"}})
                return
            terminating = sum(1 for p in pods if _deleting(p))
            if total - terminating < jobs.min_available(job):
                return  # restartingUpdateStatus: still killing
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
        live = [p for p in pods if not _deleting(p)]
        running = sum(1 for p in live if _phase(p) == "Running")
        succeeded = sum(1 for p in live if _phase(p) == "Succeeded")
        failed = sum(1 for p in live if _phase(p) == "Failed")
        if total and succeeded + failed == total:
            wanted = "Completed" if succeeded >= jobs.min_available(job) else "Failed"
        else:
            wanted = "Running" if running >= jobs.min_available(job) else "Pending"
        counts = {"running": running, "succeeded": succeeded, "failed": failed}
        if phase != wanted or any(status.get(k) != v for k, v in counts.items()):
            await self._set_status(
                job,
                {"state": {"phase": wanted}, **counts, "minAvailable": jobs.min_available(job)},
            )
