"""Kueue's writes to a Workload, by hand, for the tiers that run the bridge without the emulated
Kueue (tests/integration/bridge/conftest.py, benchmarks/bench_bridge.py).

Kueue creates a Job's Workload (controller ownerReference to the Job, one pod set per role) and
writes its status by server-side apply on ``workloads/status`` as field manager
``kueue-admission``, force (kueue ``pkg/workload/workload.go`` ``ApplyAdmissionStatus``). A
preemption is one such apply: ``Evicted=True`` (reason ``Preempted``) and ``Preempted=True``
(reason ``InClusterQueue``), admission kept (kueue ``pkg/workload/evict/evict.go``
``SetEvictedCondition``, ``pkg/scheduler/preemption/preemption.go``). The emulated Kueue
(emulator/kueue/controller.py) makes the same writes from its own decisions.
"""

from __future__ import annotations

from typing import Any

from emulator import owners
from emulator.apiserver import server
from kontinue.kube import api, resources
from kontinue.models import base

Obj = dict[str, Any]
USER = "system:serviceaccount:kueue-system:kueue-controller-manager"
FIELD_MANAGER = "kueue-admission"
PREEMPTION_MESSAGE = (
    "Preempted to accommodate a workload (UID: 9a9a, JobUID: 8b8b) due to prioritization in "
    "the ClusterQueue"
)


def condition(type_: str, status: str, reason: str, message: str) -> Obj:
    """A Workload condition as Kueue writes it (observedGeneration 1, now)."""
    return {
        "type": type_,
        "status": status,
        "reason": reason,
        "message": message,
        "lastTransitionTime": base.format_time(base.now()),
        "observedGeneration": 1,
    }


def workload_name(job_name: str) -> str:
    """``job-<name>-<hash>``, the shape of kueue ``GetWorkloadNameForOwnerWithGVK``."""
    return f"job-{job_name}-3f1a2"


def workload(job: Obj, *, namespace: str, queue: str, count: int, template: Obj) -> Obj:
    """The Workload of the batch/v1 Job ``job``: one pod set ``main`` of ``count`` pods."""
    return {
        "apiVersion": resources.WORKLOADS.api_version,
        "kind": "Workload",
        "metadata": {
            "name": workload_name(job["metadata"]["name"]),
            "namespace": namespace,
            "ownerReferences": [owners.controller_ref(job)],
        },
        "spec": {
            "queueName": queue,
            "podSets": [{"name": "main", "count": count, "template": template}],
        },
    }


def admitted(*, cluster_queue: str, count: int) -> Obj:
    """The status of an admission: quota reserved in ``cluster_queue`` for ``count`` GPU pods."""
    return {
        "admission": {
            "clusterQueue": cluster_queue,
            "podSetAssignments": [
                {"name": "main", "count": count, "flavors": {"nvidia.com/gpu": "gpu"}}
            ],
        },
        "conditions": [
            condition(
                "QuotaReserved", "True", "QuotaReserved", f"Quota reserved in {cluster_queue}"
            ),
            condition("Admitted", "True", "Admitted", "The workload is admitted"),
        ],
    }


def evicted(conditions: list[Obj], *, reason: str = "Preempted") -> list[Obj]:
    """``conditions`` after a preemption: Evicted=True and Preempted=True replace any earlier."""
    kept = [c for c in conditions if c["type"] not in ("Evicted", "Preempted")]
    return [
        *kept,
        condition("Evicted", "True", reason, PREEMPTION_MESSAGE),
        condition("Preempted", "True", "InClusterQueue", PREEMPTION_MESSAGE),
    ]


def readmitted(conditions: list[Obj], *, cluster_queue: str) -> list[Obj]:
    """``conditions`` after Kueue reserves quota again for an evicted Workload: QuotaReserved and
    Admitted True, and Evicted / Preempted kept but reset to False, reason ``QuotaReserved``,
    message ``Previously: ...`` (kueue ``pkg/workload/workload.go`` ``SetQuotaReservation``)."""
    reset = [
        condition(c["type"], "False", "QuotaReserved", "Previously: " + c["message"])
        for c in conditions
        if c["type"] in ("Evicted", "Preempted")
    ]
    return [
        condition("QuotaReserved", "True", "QuotaReserved", f"Quota reserved in {cluster_queue}"),
        condition("Admitted", "True", "Admitted", "The workload is admitted"),
        *reset,
    ]


async def apply_status(kueue: server.Client, name: str, namespace: str, status: Obj) -> Obj:
    """Kueue's status write: server-side apply on ``workloads/status``, forced."""
    return await kueue.patch(
        resources.WORKLOADS,
        name,
        {
            "apiVersion": resources.WORKLOADS.api_version,
            "kind": "Workload",
            "metadata": {"name": name, "namespace": namespace},
            "status": status,
        },
        content_type=api.APPLY_PATCH,
        namespace=namespace,
        subresource="status",
        field_manager=FIELD_MANAGER,
        force=True,
    )
