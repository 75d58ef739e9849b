"""A failed restore never counts against ``backoffLimit`` (issue 11 item 5), on the real
kube-apiserver and job controller v1.36.2.

The Job is plumbed by the webhook's own pure function (webhook/job_plumbing.py ``plumb_job``),
so what is proven is exactly what the webhook writes: the real apiserver accepts the rule
``Ignore onExitCodes {containerName: kontinue-restore, NotIn [0]}`` only because the template
carries the restore container's stand-in (pkg/apis/batch/validation), and the real job
controller matches it against the init container's status (pkg/controller/job
pod_failure_policy.go). There is no kubelet here: the test writes the pod's final status as a
kubelet does when an init container of a ``restartPolicy: Never`` pod fails (phase Failed, the
init container terminated, the main container still waiting).
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from kontinue import keys
from kontinue import restore as restore_program
from kontinue.kube import api, errors, resources
from tests.realcp import objects
from tests.unit.webhook import support
from webhook import job_plumbing

Obj = dict[str, Any]


def _job(namespace: str) -> Obj:
    job: Obj = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "train", "namespace": namespace},
        "spec": {
            "backoffLimit": 0,
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [{"name": "trainer", "image": "registry.example/t:v1"}],
                }
            },
        },
    }
    plan = job_plumbing.plumb_job(job, image="registry.example/kontinue:v1")
    return support.apply_patch(job, plan.patch)


def _failed_in_restore(pod: Obj, exit_code: int, reason: str) -> Obj:
    failed = copy.deepcopy(pod)
    failed["status"] = {
        "phase": "Failed",
        "initContainerStatuses": [
            {
                "name": keys.RESTORE_INIT_CONTAINER,
                "image": "registry.example/kontinue:v1",
                "imageID": "",
                "ready": False,
                "restartCount": 0,
                "state": {
                    "terminated": {
                        "exitCode": exit_code,
                        "reason": reason,
                        "startedAt": "2026-12-03T10:00:00Z",
                        "finishedAt": "2026-12-03T10:00:01Z",
                    }
                },
            }
        ],
        "containerStatuses": [
            {
                "name": "trainer",
                "image": "registry.example/t:v1",
                "imageID": "",
                "ready": False,
                "restartCount": 0,
                "state": {"waiting": {"reason": "PodInitializing"}},
            }
        ],
    }
    return failed


async def test_the_rule_needs_the_stand_in_in_the_template(admin: api.Api, namespace: str) -> None:
    job = _job(namespace)
    job["spec"]["template"]["spec"].pop("initContainers")
    with pytest.raises(errors.Invalid, match="must be one of the container or initContainer"):
        await admin.create(resources.JOBS, job, namespace=namespace)


async def _next_pod(admin: api.Api, namespace: str, seen: set[str], what: str) -> Obj:
    found: list[Obj] = []

    async def a_new_pod() -> bool:
        pods = await objects.pods(admin, namespace)
        found[:] = [p for p in pods if p["metadata"]["uid"] not in seen]
        return bool(found)

    # The first pod at once; each replacement after the job controller's pod-failure backoff
    # (about 10 s, then 20 s), which ignored failures still add to.
    await objects.until(a_new_pod, what, seconds=90)
    return found[0]


async def _accounted(admin: api.Api, namespace: str, name: str, what: str) -> None:
    async def no_tracking_finalizer() -> bool:
        current = await admin.get(resources.PODS, name, namespace=namespace)
        return keys.JOB_TRACKING_FINALIZER not in (current["metadata"].get("finalizers") or [])

    await objects.until(no_tracking_finalizer, what)


async def test_failed_restores_never_fail_a_job_with_backoff_limit_0(
    admin: api.Api, namespace: str
) -> None:
    created = await admin.create(resources.JOBS, _job(namespace), namespace=namespace)
    assert created["spec"]["podFailurePolicy"]["rules"][1] == restore_program.POD_FAILURE_RULE
    seen: set[str] = set()
    # a torn checkpoint (4), then out of memory (137); each replacement comes after the job
    # controller's backoff (10 s, 20 s, ...), so two keep the tier short
    for exit_code, reason in ((4, "Error"), (137, "OOMKilled")):
        pod = await _next_pod(admin, namespace, seen, f"a pod to fail with exit {exit_code}")
        seen.add(pod["metadata"]["uid"])
        await admin.replace(
            resources.PODS, _failed_in_restore(pod, exit_code, reason), subresource="status"
        )
        name = pod["metadata"]["name"]
        await _accounted(admin, namespace, name, f"the job controller accounting exit {exit_code}")
        job = await admin.get(resources.JOBS, "train", namespace=namespace)
        status = job.get("status") or {}
        assert not status.get("failed"), status
        assert not any(c["type"] == "Failed" for c in status.get("conditions") or []), status

    await _next_pod(admin, namespace, seen, "a replacement after two failed restores")


async def test_without_the_rule_one_failed_restore_ends_the_job(
    admin: api.Api, namespace: str
) -> None:
    """The control: the same Job without Kontinue's restore rule and stand-in fails at once."""
    job = _job(namespace)
    job["spec"]["template"]["spec"].pop("initContainers")
    job["spec"]["podFailurePolicy"]["rules"].remove(restore_program.POD_FAILURE_RULE)
    await admin.create(resources.JOBS, job, namespace=namespace)
    pod = await _next_pod(admin, namespace, set(), "the Job's first pod")
    failed = _failed_in_restore(pod, 4, "Error")
    failed["status"]["initContainerStatuses"][0]["name"] = "fetch"  # any init container
    await admin.replace(resources.PODS, failed, subresource="status")

    async def job_failed() -> bool:
        current = await admin.get(resources.JOBS, "train", namespace=namespace)
        conditions = (current.get("status") or {}).get("conditions") or []
        return any(c["type"] == "Failed" and c["status"] == "True" for c in conditions)

    await objects.until(job_failed, "the Job Failed (BackoffLimitExceeded)")
