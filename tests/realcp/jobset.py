"""The JobSet controller, played against the real kube-apiserver for the real tier's JobSet test.

No JobSet controller runs on this tier (it is a Go binary of kubernetes-sigs/jobset); the JobSet
CRD is the upstream one (tests/fixtures/upstream/jobset/). :class:`Controller` does, for the
JobSets of one namespace, what kubernetes-sigs/jobset pkg/controllers/jobset_controller.go
``Reconcile`` does for a JobSet that neither fails nor completes, in its order:

- ``createJobs``: every missing child Job of every replicated Job, as ``constructJob`` builds it
  (tests/jobsets.py) with the JobSet as its controller owner (``SetControllerReference``);
- ``suspendJobs``: while the JobSet is suspended, every child Job not suspended gets
  ``suspend=true``;
- ``resumeJobsIfNecessary`` / ``resumeJob``: once it is not, every suspended child Job gets its
  ``status.startTime`` cleared (a status update) and then, in one update, the replicated Job's pod
  template labels, annotations and nodeSelector merged in (the template wins a shared key:
  ``collections.MergeMaps``), its tolerations and scheduling gates added, and ``suspend=false``
  — how Kueue's pod-set info (nodeSelector, queue labels) reaches the pods;
- ``calculateReplicatedJobStatuses``: ``status.replicatedJobsStatus`` (per replicated Job, child
  Jobs ready, succeeded, failed, suspended and ``active``: with an active pod, which Kueue's
  ``IsActive`` reads before it releases an evicted Workload's quota).

It polls (every :data:`PERIOD` seconds) instead of watching, and writes as the tier's admin (the
real controller runs as its ServiceAccount): neither changes what the job controller, Kueue and
Kontinue see. Not played: failure and success policies, restarts, startup order, DNS services.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
from pathlib import Path
from typing import Any

from emulator import owners
from emulator.kueue import jobsets as kueue_jobsets
from kontinue import keys
from kontinue.kube import api, errors, resources
from tests import jobsets
from tests.realcp import controlplane
from tests.realcp.conftest import crd_names

Obj = dict[str, Any]
JOBSETS = kueue_jobsets.JOBSETS
CRDS = Path(__file__).parents[1] / "fixtures" / "upstream" / "jobset" / "crds"
PERIOD = 0.5
MERGE = "application/merge-patch+json"


def install_crd(plane: controlplane.ControlPlane) -> None:
    """The upstream JobSet CRD, applied server-side and Established (idempotent)."""
    plane.kubectl("apply", "--server-side", "-f", str(CRDS))
    plane.wait_established(crd_names(CRDS))


def _merged_maps(base: Obj | None, extra: Obj | None) -> Obj:
    return {**(base or {}), **(extra or {})}


def _merged_lists(base: list[Obj] | None, extra: list[Obj] | None) -> list[Obj]:
    out = list(base or [])
    out += [item for item in extra or [] if item not in out]
    return out


def _suspended(job: Obj) -> bool:
    return bool((job.get("spec") or {}).get("suspend"))


def _condition(job: Obj, kind: str) -> bool:
    return any(
        c.get("type") == kind and c.get("status") == "True"
        for c in (job.get("status") or {}).get("conditions") or []
    )


def _finished(job: Obj) -> bool:
    return _condition(job, "Complete") or _condition(job, "Failed")


def _count(job: Obj, field: str) -> int:
    return int((job.get("status") or {}).get(field) or 0)


def _ready(job: Obj) -> bool:
    """All of the Job's pods ready or succeeded (parallelism, capped by completions)."""
    spec = job.get("spec") or {}
    pods = min(int(spec.get("parallelism", 1)), int(spec.get("completions", 1 << 30)))
    return _count(job, "succeeded") + _count(job, "ready") >= pods


class Controller:
    """``async with Controller(admin, namespace):`` plays the JobSet controller there."""

    def __init__(self, admin: api.Api, namespace: str) -> None:
        self.admin = admin
        self.namespace = namespace
        self._task: asyncio.Task[None] | None = None
        self.errors: list[str] = []

    async def __aenter__(self) -> Controller:
        self._task = asyncio.create_task(self._loop())
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def _loop(self) -> None:
        while True:
            pause = PERIOD
            try:
                listed = await self.admin.list(JOBSETS, namespace=self.namespace)
                for jobset in listed["items"]:
                    await self.reconcile(jobset)
            except (errors.Conflict, errors.NotFound) as exc:
                self.errors.append(str(exc))  # raced a write: the next poll sees it
            except (errors.TooManyRequests, errors.ServerError) as exc:
                # e.g. 429 "storage is (re)initializing" just after the CRD is installed: the
                # real controller's reconcile returns the error and controller-runtime requeues
                # it with backoff, so this one waits (at least the Retry-After) and polls again
                self.errors.append(str(exc))
                retry_after = getattr(exc, "retry_after", None)
                pause = max(PERIOD, retry_after or 0.0)
            await asyncio.sleep(pause)

    async def reconcile(self, jobset: Obj) -> None:
        meta = jobset["metadata"]
        listed = await self.admin.list(
            resources.JOBS,
            namespace=self.namespace,
            label_selector={keys.JOBSET_NAME_LABEL: meta["name"]},
        )
        children = {
            job["metadata"]["name"]: job
            for job in listed["items"]
            if job["metadata"]["labels"].get(keys.JOBSET_UID_LABEL) == meta["uid"]
        }
        templates = {}
        for replicated in jobset["spec"]["replicatedJobs"]:
            templates[replicated["name"]] = replicated["template"]["spec"]["template"]
            for index in range(int(replicated.get("replicas", 1))):
                name = jobsets.child_name(jobset, replicated["name"], index)
                if name not in children:
                    await self._create(jobset, replicated, index)
        for job in children.values():
            if _finished(job):
                continue
            if _suspended(jobset) and not _suspended(job):
                await self._patch(job, {"spec": {"suspend": True}})
            elif not _suspended(jobset) and _suspended(job):
                replicated = job["metadata"]["labels"][keys.JOBSET_REPLICATED_JOB_LABEL]
                await self._resume(job, templates[replicated])
        await self._status(jobset, list(children.values()))

    async def _create(self, jobset: Obj, replicated: Obj, index: int) -> None:
        job = jobsets.child_job(jobset, replicated, index)
        job["metadata"]["ownerReferences"] = [
            owners.controller_ref(jobset, api_version=kueue_jobsets.API_VERSION, kind="JobSet")
        ]
        with contextlib.suppress(errors.Conflict):
            await self.admin.create(resources.JOBS, job, namespace=self.namespace)

    async def _patch(self, job: Obj, patch: Obj, *, subresource: str = "") -> None:
        await self.admin.patch(
            resources.JOBS,
            job["metadata"]["name"],
            patch,
            content_type=MERGE,
            namespace=self.namespace,
            subresource=subresource,
        )

    async def _resume(self, job: Obj, template: Obj) -> None:
        if (job.get("status") or {}).get("startTime"):
            await self._patch(job, {"status": {"startTime": None}}, subresource="status")
        current = job["spec"]["template"]
        meta, spec = current.get("metadata") or {}, current.get("spec") or {}
        wanted_meta, wanted = template.get("metadata") or {}, template.get("spec") or {}
        patch = {
            "spec": {
                "suspend": False,
                "template": {
                    "metadata": {
                        "labels": _merged_maps(meta.get("labels"), wanted_meta.get("labels")),
                        "annotations": _merged_maps(
                            meta.get("annotations"), wanted_meta.get("annotations")
                        ),
                    },
                    "spec": {
                        "nodeSelector": _merged_maps(
                            spec.get("nodeSelector"), wanted.get("nodeSelector")
                        ),
                        "tolerations": _merged_lists(
                            spec.get("tolerations"), wanted.get("tolerations")
                        ),
                        "schedulingGates": _merged_lists(
                            spec.get("schedulingGates"), wanted.get("schedulingGates")
                        ),
                    },
                },
            }
        }
        await self._patch(job, copy.deepcopy(patch))

    async def _status(self, jobset: Obj, children: list[Obj]) -> None:
        statuses = []
        for replicated in jobset["spec"]["replicatedJobs"]:
            mine = [
                job
                for job in children
                if job["metadata"]["labels"].get(keys.JOBSET_REPLICATED_JOB_LABEL)
                == replicated["name"]
            ]
            running = [j for j in mine if not _finished(j)]
            statuses.append(
                {
                    "name": replicated["name"],
                    "ready": sum(1 for j in running if _ready(j)),
                    "succeeded": sum(1 for j in mine if _condition(j, "Complete")),
                    "failed": sum(1 for j in mine if _condition(j, "Failed")),
                    "active": sum(1 for j in running if _count(j, "active") > 0),
                    "suspended": sum(1 for j in running if _suspended(j)),
                }
            )
        if (jobset.get("status") or {}).get("replicatedJobsStatus") == statuses:
            return
        await self.admin.patch(
            JOBSETS,
            jobset["metadata"]["name"],
            {"status": {"replicatedJobsStatus": statuses}},
            content_type=MERGE,
            namespace=self.namespace,
            subresource="status",
        )
