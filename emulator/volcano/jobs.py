"""What the vc-controller builds from a ``batch.volcano.sh/v1alpha1`` Job (pure).

Copies ``pkg/controllers/job/job_controller_util.go`` ``createJobPod`` (name
``<job>-<task>-<index>``; labels ``volcano.sh/job-name``, ``volcano.sh/job-namespace``,
``volcano.sh/queue-name``, ``volcano.sh/task-spec``, ``volcano.sh/task-index``; annotations the
same plus ``volcano.sh/template-uid``, ``volcano.sh/job-version``, ``volcano.sh/job-retry-count``
and ``scheduling.k8s.io/group-name``; a controller owner reference; ``schedulerName`` from the
Job), ``job_controller_actions.go`` ``createOrUpdatePodGroup`` (PodGroup ``<job>-<job uid>``,
``minMember`` = ``minAvailable``, queue and priority class from the Job) and
``job_controller_util.go`` ``applyPolicies`` (task policies first, then job policies, an event
or exit-code match; the default action is SyncJob). Matches
tests/fixtures/upstream/volcano/examples (the recorded victim pod of
admissionreview-delete-victim-pod-by-vc-scheduler.json).
"""

from __future__ import annotations

import copy
from typing import Any

from emulator import owners
from kontinue import keys

Object = dict[str, Any]
BATCH = f"{keys.VOLCANO_BATCH_GROUP}/v1alpha1"
SCHEDULING = f"{keys.VOLCANO_SCHEDULING_GROUP}/v1beta1"
SYNC_JOB = "SyncJob"
RESTART_JOB = "RestartJob"


def podgroup_name(job: Object) -> str:
    return f"{job['metadata']['name']}-{job['metadata']['uid']}"


def _owner(job: Object) -> Object:
    return owners.controller_ref(job, api_version=BATCH)


def min_available(job: Object) -> int:
    spec = job.get("spec") or {}
    if spec.get("minAvailable") is not None:
        return int(spec["minAvailable"])
    return sum(int(t.get("replicas") or 0) for t in spec.get("tasks") or [])


def podgroup_for(job: Object) -> Object:
    spec = job.get("spec") or {}
    pg_spec: Object = {"minMember": min_available(job), "queue": spec.get("queue") or "default"}
    if spec.get("priorityClassName"):
        pg_spec["priorityClassName"] = spec["priorityClassName"]
    return {
        "apiVersion": SCHEDULING,
        "kind": "PodGroup",
        "metadata": {
            "name": podgroup_name(job),
            "namespace": job["metadata"]["namespace"],
            "ownerReferences": [_owner(job)],
            "annotations": {},
        },
        "spec": pg_spec,
        "status": {"phase": "Pending"},
    }


def pod_name(job: Object, task: str, index: int) -> str:
    return f"{job['metadata']['name']}-{task}-{index}"


def pod_for(job: Object, task: Object, index: int) -> Object:
    meta, spec = job["metadata"], job.get("spec") or {}
    status = job.get("status") or {}
    template = copy.deepcopy(task.get("template") or {})
    tmeta = template.get("metadata") or {}
    queue = spec.get("queue") or "default"
    labels = dict(tmeta.get("labels") or {})
    labels.update(
        {
            keys.VOLCANO_JOB_NAME_LABEL: meta["name"],
            "volcano.sh/job-namespace": meta["namespace"],
            keys.VOLCANO_QUEUE_NAME_ANNOTATION: queue,
            "volcano.sh/task-spec": task["name"],
            "volcano.sh/task-index": str(index),
        }
    )
    annotations = dict(tmeta.get("annotations") or {})
    annotations.update(
        {
            keys.VOLCANO_PODGROUP_ANNOTATION: podgroup_name(job),
            keys.VOLCANO_JOB_NAME_LABEL: meta["name"],
            "volcano.sh/job-retry-count": str(int(status.get("retryCount") or 0)),
            "volcano.sh/job-version": str(int(status.get("version") or 0)),
            keys.VOLCANO_QUEUE_NAME_ANNOTATION: queue,
            "volcano.sh/task-index": str(index),
            "volcano.sh/task-spec": task["name"],
            "volcano.sh/template-uid": f"{meta['name']}-{task['name']}",
        }
    )
    pod_spec = template.get("spec") or {}
    pod_spec["schedulerName"] = spec.get("schedulerName") or "volcano"
    if spec.get("priorityClassName") and not pod_spec.get("priorityClassName"):
        pod_spec["priorityClassName"] = spec["priorityClassName"]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": pod_name(job, task["name"], index),
            "namespace": meta["namespace"],
            "labels": labels,
            "annotations": annotations,
            "ownerReferences": [_owner(job)],
        },
        "spec": pod_spec,
    }


def action_for(job: Object, task_name: str, event: str, exit_code: int = 0) -> str:
    """``applyPolicies``: the task's policies, then the job's; in each list the first policy
    naming ``event`` (or ``*``) or whose ``exitCode`` equals ``exit_code`` (never 0) wins;
    ``SyncJob`` when none does. (``timeout`` delays and ``PodPending`` are not copied.)"""
    spec = job.get("spec") or {}
    tasks = [t for t in spec.get("tasks") or [] if t.get("name") == task_name]
    for policies in (
        [p for t in tasks for p in t.get("policies") or []],
        spec.get("policies") or [],
    ):
        for policy in policies:
            events = list(policy.get("events") or [])
            if policy.get("event"):
                events.append(policy["event"])
            if events and (event in events or "*" in events):
                return str(policy.get("action") or SYNC_JOB)
            code = policy.get("exitCode")
            if code is not None and code != 0 and code == exit_code:
                return str(policy.get("action") or SYNC_JOB)
    return SYNC_JOB
