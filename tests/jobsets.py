"""The child Jobs the JobSet controller creates, for the tests that play that controller.

Copies kubernetes-sigs/jobset pkg/controllers/jobset_controller.go: ``constructJob`` (the child's
name ``<jobset>-<replicatedJob>-<jobIndex>`` from ``placement.GenJobName``, its labels and
annotations from the replicated Job's template, its spec from the template's, ``suspend`` from
the JobSet's) and ``labelAndAnnotateObject`` (the same labels and annotations on the Job and on
its pod template; keys from api/jobset/v1alpha2/jobset_types.go and pkg/constants/constants.go).
Not copied: exclusive placement, the coordinator, DNS hostnames, volume claim policies, the
``RestartJob`` feature's per-Job restart attempt. The owner reference is not stamped here: upstream
``createJobs`` adds it (``SetControllerReference``) to a JobSet that exists; the soak's JobSet
shape (tests/soak/shapes.py) has none, the real tier's does (tests/realcp/jobset.py).
"""

from __future__ import annotations

import copy
import hashlib
from typing import Any

from kontinue import keys

Obj = dict[str, Any]
DEFAULT_GROUP = "default"
"""``ReplicatedJob.groupName``'s default (``+kubebuilder:default=default``)."""


def _replicas(jobset: Obj, *, group: str | None = None) -> list[tuple[str, int]]:
    return [
        (str(rj["name"]), int(rj.get("replicas", 1)))
        for rj in jobset["spec"]["replicatedJobs"]
        if group is None or rj.get("groupName", DEFAULT_GROUP) == group
    ]


def _before(replicas: list[tuple[str, int]], name: str, job_index: int) -> int:
    """``globalJobIndex`` / ``groupJobIndex``: the Jobs of the replicated Jobs listed earlier."""
    total = 0
    for rj, count in replicas:
        if rj == name:
            return total + job_index
        total += count
    raise ValueError(f"no replicated Job {name!r}")


def child_name(jobset: Obj, replicated: str, job_index: int) -> str:
    """``placement.GenJobName``."""
    return f"{jobset['metadata']['name']}-{replicated}-{job_index}"


def marks(jobset: Obj, replicated: Obj, job_index: int) -> dict[str, str]:
    """What ``labelAndAnnotateObject`` sets, both as labels and as annotations."""
    meta = jobset["metadata"]
    name = str(replicated["name"])
    group = str(replicated.get("groupName", DEFAULT_GROUP))
    everyone, in_group = _replicas(jobset), _replicas(jobset, group=group)
    key = f"{meta['namespace']}/{child_name(jobset, name, job_index)}"
    return {
        keys.JOBSET_NAME_LABEL: str(meta["name"]),
        keys.JOBSET_UID_LABEL: str(meta["uid"]),
        keys.JOBSET_REPLICATED_JOB_LABEL: name,
        "jobset.sigs.k8s.io/restart-attempt": str((jobset.get("status") or {}).get("restarts", 0)),
        "jobset.sigs.k8s.io/replicatedjob-replicas": str(replicated.get("replicas", 1)),
        "jobset.sigs.k8s.io/global-replicas": str(sum(n for _, n in everyone)),
        keys.JOBSET_JOB_INDEX_LABEL: str(job_index),
        "jobset.sigs.k8s.io/job-key": hashlib.sha1(key.encode()).hexdigest(),
        "jobset.sigs.k8s.io/job-global-index": str(_before(everyone, name, job_index)),
        "jobset.sigs.k8s.io/group-name": group,
        "jobset.sigs.k8s.io/group-replicas": str(sum(n for _, n in in_group)),
        "jobset.sigs.k8s.io/job-group-index": str(_before(in_group, name, job_index)),
    }


def _stamp(meta: Obj, stamped: dict[str, str]) -> None:
    meta["labels"] = {**(meta.get("labels") or {}), **stamped}
    meta["annotations"] = {**(meta.get("annotations") or {}), **stamped}


def child_job(jobset: Obj, replicated: Obj, job_index: int) -> Obj:
    """``constructJob``: the child Job of ``replicated`` (an entry of ``spec.replicatedJobs``)."""
    template = replicated["template"]
    template_meta = template.get("metadata") or {}
    job: Obj = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": child_name(jobset, str(replicated["name"]), job_index),
            "namespace": jobset["metadata"]["namespace"],
            "labels": dict(template_meta.get("labels") or {}),
            "annotations": dict(template_meta.get("annotations") or {}),
        },
        "spec": copy.deepcopy(template["spec"]),
    }
    stamped = marks(jobset, replicated, job_index)
    _stamp(job["metadata"], stamped)
    _stamp(job["spec"]["template"].setdefault("metadata", {}), stamped)
    job["spec"]["suspend"] = bool(jobset["spec"].get("suspend"))
    return job
