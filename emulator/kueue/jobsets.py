"""Kueue's JobSet integration: the JobSet as a ``GenericJob`` (pure).

Copies kubernetes-sigs/kueue pkg/controller/jobs/jobset/jobset_controller.go: ``PodSets`` (one pod
set per replicated Job, named after it, of ``replicas x min(parallelism, completions)`` pods with
its pod template), ``IsSuspended`` / ``Suspend`` (``spec.suspend``), ``IsActive`` (a
``status.replicatedJobsStatus`` entry with ``active > 0``, which the JobSet controller writes),
``Finished`` (condition ``Completed`` or ``Failed``), ``RunWithPodSetsInfo`` (``suspend=false``
and ``podset.Merge`` into each replicated Job's pod template: the JobSet controller copies them
to its child Jobs when it resumes them) and ``RestorePodSetsInfo``. The Workload's name is
``GetWorkloadNameForOwnerWithGVK`` of the JobSet GVK (pkg/controller/jobframework/
workload_names.go). Not copied: topology requests, reclaimable pods, MultiKueue.

Opt-in: ``Kueue(api, jobsets=True)`` (emulator/kueue/controller.py); the JobSet CRD must be
installed, and something must play the JobSet controller (the real tier's
tests/realcp/jobset.py).
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

from emulator import owners
from emulator.kueue import podsets, workloads
from kontinue import keys
from kontinue.kube import resources

Object = dict[str, Any]
API_VERSION = f"{keys.JOBSET_GROUP}/v1alpha2"
JOBSETS = resources.Resource(keys.JOBSET_GROUP, "v1alpha2", "jobsets", "JobSet")


def is_jobset_ref(ref: Object) -> bool:
    """``isJobSet``: a controller reference to a JobSet."""
    version = str(ref.get("apiVersion", ""))
    return bool(ref.get("kind") == "JobSet" and version.startswith(f"{keys.JOBSET_GROUP}/v1"))


def _pods_per_job(replicated: Object) -> int:
    """``podsCountPerReplica``: parallelism (default 1), capped by completions."""
    spec = replicated["template"]["spec"]
    parallelism = int(spec.get("parallelism", 1))
    completions = int(spec.get("completions", parallelism))
    return min(parallelism, completions)


def pod_template(replicated: Object) -> Object:
    return dict(replicated["template"]["spec"]["template"])


def for_jobset(jobset: Object, *, priority_value: int, priority_class_ref: Object | None) -> Object:
    """The Workload (no status) Kueue creates for ``jobset``."""
    meta = jobset["metadata"]
    pod_sets = []
    for replicated in jobset["spec"]["replicatedJobs"]:
        template = copy.deepcopy(pod_template(replicated))
        template_meta = template.setdefault("metadata", {})
        for field in ("labels", "annotations"):
            if not template_meta.get(field):
                template_meta.pop(field, None)
        count = int(replicated.get("replicas", 1)) * _pods_per_job(replicated)
        pod_sets.append({"name": replicated["name"], "count": count, "template": template})
    spec: Object = {
        "active": True,
        "podSets": pod_sets,
        "queueName": workloads.queue_name(jobset),
        "priority": priority_value,
    }
    if priority_class_ref is not None:
        spec["priorityClassRef"] = priority_class_ref
    return {
        "apiVersion": f"{keys.KUEUE_GROUP}/{keys.KUEUE_VERSION}",
        "kind": "Workload",
        "metadata": {
            "name": workloads.name_for(
                meta["name"], meta["uid"], kind="JobSet", group=keys.JOBSET_GROUP
            ),
            "namespace": meta["namespace"],
            "labels": {workloads.JOB_UID_LABEL: meta["uid"]},
            "ownerReferences": [
                owners.controller_ref(jobset, api_version=API_VERSION, kind="JobSet")
            ],
        },
        "spec": spec,
    }


def as_job(jobset: Object) -> Object:
    """The JobSet as :func:`emulator.kueue.workloads.priority` reads a Job: its labels, and the
    first replicated Job's pod template (``ExtractPriority`` takes the first pod set's)."""
    first = jobset["spec"]["replicatedJobs"][0]
    return {"metadata": jobset["metadata"], "spec": {"template": pod_template(first)}}


def is_active(jobset: Object) -> bool:
    return any(
        int(status.get("active") or 0) > 0
        for status in (jobset.get("status") or {}).get("replicatedJobsStatus") or []
    )


def finished(jobset: Object) -> Object | None:
    """``Finished``: the ``Completed`` or ``Failed`` condition, ``True``."""
    for cond in (jobset.get("status") or {}).get("conditions") or []:
        if cond.get("type") in ("Completed", "Failed") and cond.get("status") == "True":
            found: Object = cond
            return found
    return None


def _with_templates(jobset: Object, template_of: Callable[[str, Object], Object]) -> list[Object]:
    replicated_jobs = [copy.deepcopy(rj) for rj in jobset["spec"]["replicatedJobs"]]
    for replicated in replicated_jobs:
        spec = replicated["template"]["spec"]
        spec["template"] = template_of(replicated["name"], spec["template"])
    return replicated_jobs


def start_patch(jobset: Object, infos: dict[str, podsets.Info]) -> Object:
    """``RunWithPodSetsInfo``: one merge patch (lists are replaced whole, as an Update would).
    Raises :class:`emulator.kueue.podsets.Conflict`, or ``KeyError`` for a pod set without info.
    """
    replicated_jobs = _with_templates(
        jobset, lambda name, template: podsets.merged_template(template, infos[name])
    )
    return {"spec": {"suspend": False, "replicatedJobs": replicated_jobs}}


def stop_patch(jobset: Object, wl: Object) -> Object:
    """``Suspend`` + ``RestorePodSetsInfo`` from the Workload's pod-set templates."""
    original = {ps["name"]: ps.get("template") or {} for ps in wl["spec"]["podSets"]}
    replicated_jobs = _with_templates(
        jobset,
        lambda name, template: podsets.with_info(
            template, podsets.of_template(original.get(name) or {})
        ),
    )
    return {"spec": {"suspend": True, "replicatedJobs": replicated_jobs}}
