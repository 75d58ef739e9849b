"""The Workload Kueue builds for a ``batch/v1`` Job (pure).

Copies ``pkg/controller/jobframework/reconciler.go`` ``ConstructWorkload`` (owner reference with
``controller: true``, label ``kueue.x-k8s.io/job-uid``, ``spec.queueName`` from the Job's
``kueue.x-k8s.io/queue-name`` label), ``pkg/controller/jobs/job/job_controller.go`` ``PodSets``
(one pod set ``main`` of ``parallelism`` pods with the Job's pod template),
``pkg/controller/jobframework/workload_names.go`` (``job-<name>-<sha1[:5]>``) and
``pkg/util/priority`` (WorkloadPriorityClass from the ``kueue.x-k8s.io/priority-class`` label,
else the pod template's PriorityClass, else 0).
"""

from __future__ import annotations

import copy
import hashlib
from collections.abc import Callable, Mapping
from typing import Any

from emulator import owners
from emulator.kueue import quantity
from kontinue import keys

Object = dict[str, Any]

JOB_UID_LABEL = "kueue.x-k8s.io/job-uid"
POD_SET = "main"
_MAX_PREFIX = 253 - 1 - 5


def name_for(job_name: str, job_uid: str, *, kind: str = "Job", group: str = "batch") -> str:
    """``GetWorkloadNameForOwnerWithGVK`` (a batch/v1 Job unless ``kind``/``group`` say)."""
    digest = hashlib.sha1(f"{kind}\n{group}\n{job_name}\n{job_uid}".encode()).hexdigest()
    return f"{f'{kind.lower()}-{job_name}'[:_MAX_PREFIX]}-{digest[:5]}"


def queue_name(job: Object) -> str | None:
    return ((job.get("metadata") or {}).get("labels") or {}).get(keys.KUEUE_QUEUE_NAME_LABEL)


def priority(
    job: Object,
    *,
    workload_priority_classes: Mapping[str, Object],
    priority_classes: Mapping[str, Object],
) -> tuple[int, Object | None]:
    """(value, ``spec.priorityClassRef``) as Kueue resolves them for a Job."""
    labels = (job.get("metadata") or {}).get("labels") or {}
    wpc_name = labels.get(keys.KUEUE_PRIORITY_CLASS_LABEL)
    if wpc_name and wpc_name in workload_priority_classes:
        ref = {"group": keys.KUEUE_GROUP, "kind": "WorkloadPriorityClass", "name": wpc_name}
        return int(workload_priority_classes[wpc_name].get("value") or 0), ref
    spec = ((job.get("spec") or {}).get("template") or {}).get("spec") or {}
    pc_name = spec.get("priorityClassName")
    if pc_name and pc_name in priority_classes:
        ref = {"group": "scheduling.k8s.io", "kind": "PriorityClass", "name": pc_name}
        return int(priority_classes[pc_name].get("value") or 0), ref
    return 0, None


def pod_set_count(job: Object) -> int:
    spec = job.get("spec") or {}
    parallelism = spec.get("parallelism")
    return int(1 if parallelism is None else parallelism)


def for_job(job: Object, *, priority_value: int, priority_class_ref: Object | None) -> Object:
    """The Workload (no status) Kueue creates for ``job``."""
    meta = job["metadata"]
    template = copy.deepcopy((job.get("spec") or {}).get("template") or {})
    template_meta = template.setdefault("metadata", {})
    for field in ("labels", "annotations"):
        if not template_meta.get(field):
            template_meta.pop(field, None)
    spec: Object = {
        "active": True,
        "podSets": [{"name": POD_SET, "count": pod_set_count(job), "template": template}],
        "queueName": queue_name(job),
        "priority": priority_value,
    }
    if priority_class_ref is not None:
        spec["priorityClassRef"] = priority_class_ref
    return {
        "apiVersion": f"{keys.KUEUE_GROUP}/{keys.KUEUE_VERSION}",
        "kind": "Workload",
        "metadata": {
            "name": name_for(meta["name"], meta["uid"]),
            "namespace": meta["namespace"],
            "labels": {JOB_UID_LABEL: meta["uid"]},
            "ownerReferences": [owners.controller_ref(job)],
        },
        "spec": spec,
    }


def pod_set_requests(wl: Object) -> dict[str, quantity.Resources]:
    """Total requests per pod set: one pod's requests times ``count``."""
    out: dict[str, quantity.Resources] = {}
    for pod_set in (wl.get("spec") or {}).get("podSets") or []:
        per_pod = quantity.pod_requests((pod_set.get("template") or {}).get("spec") or {})
        count = int(pod_set.get("count") or 0)
        out[pod_set["name"]] = {name: value * count for name, value in per_pod.items()}
    return out


def priority_of(wl: Object) -> int:
    return int((wl.get("spec") or {}).get("priority") or 0)


def owner_job(wl: Object) -> Object | None:
    for ref in (wl.get("metadata") or {}).get("ownerReferences") or []:
        if (
            ref.get("kind") == "Job"
            and ref.get("apiVersion") == "batch/v1"
            and ref.get("controller")
        ):
            found: Object = ref
            return found
    return None


def owner_of(wl: Object, matches: Callable[[Object], bool]) -> Object | None:
    """The Workload's controller reference, if ``matches`` accepts it."""
    for ref in (wl.get("metadata") or {}).get("ownerReferences") or []:
        if ref.get("controller") and matches(ref):
            found: Object = ref
            return found
    return None
