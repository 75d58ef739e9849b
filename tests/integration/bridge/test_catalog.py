"""The catalog the bridge keeps: retention, expiry with the owner, failed restores, and the
Warning on an opted-in Job whose preemptions would count against ``backoffLimit``."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from kontinue import keys
from kontinue.kube import api, resources
from tests.integration.bridge.conftest import NS, Cluster
from tests.waiting import eventually

Obj = dict[str, Any]


async def test_retention_keeps_the_newest_and_expiry_follows_the_deleted_job(
    cluster: Cluster,
) -> None:
    await cluster.policy("keep-one", {"retention": {"keep": 1}})
    await cluster.queues(policy="keep-one")
    job = await cluster.job()
    for minute, name in enumerate(["oldest", "older", "newest"]):
        await cluster.put_checkpoint(job, name, minute=minute, policy="keep-one")
    await cluster.put_checkpoint(job, "torn", minute=0, phase="Failed", policy="keep-one")
    await cluster.start_bridge()

    async def retained() -> bool:
        phases = {cp.name: cp.status.phase.value for cp in await cluster.checkpoints()}
        return phases == {
            "oldest": "Expired",
            "older": "Expired",
            "torn": "Expired",
            "newest": "Succeeded",
        }

    await eventually(retained, what="older checkpoints expired, newest kept")
    older = await cluster.get_checkpoint("older")
    assert older.status.message == "expired: retention: more than 1 newer checkpoints kept"

    async def told() -> bool:  # each Event follows its status write
        expired = await cluster.events(reason=keys.EVENT_CHECKPOINT_EXPIRED)
        return {e["involvedObject"]["name"] for e in expired} == {"oldest", "older", "torn"}

    await eventually(told, what="one CheckpointExpired Event per expired Checkpoint")

    await cluster.admin.delete(resources.JOBS, job["metadata"]["name"], namespace=NS)

    async def all_expired() -> bool:
        return {cp.status.phase.value for cp in await cluster.checkpoints()} == {"Expired"}

    await eventually(all_expired, what="the last checkpoint expired with its Job")
    newest = await cluster.get_checkpoint("newest")
    assert newest.status.message == "expired: owner Job train was deleted"


@pytest.mark.parametrize(
    ("exit_code", "reason"),
    [(4, "Error"), (1, "Error"), (137, "OOMKilled"), (128, "StartError")],
    ids=["torn", "crashed", "oom-killed", "not-startable"],
)
async def test_a_failed_restore_is_counted_once_on_the_checkpoint_it_tried(
    cluster: Cluster, exit_code: int, reason: str
) -> None:
    """Every non-zero end of the restore container counts (its own codes, a crash, an OOM kill,
    a command the image lacks), so ``attemptsBeforeFallback`` is reached whatever the failure."""
    await cluster.queues()
    job = await cluster.job()
    await cluster.put_checkpoint(job, "good", minute=1)
    (pod,) = await cluster.pods(job, n=1)
    # The restore init container ended non-zero; the pod failed.
    pod = await cluster.restoring_from(pod, "good")
    kubelet = cluster.emulated.client("system:node:node-1")
    failed = copy.deepcopy(pod)
    failed["status"] = {
        "phase": "Failed",
        "initContainerStatuses": [
            {
                "name": keys.RESTORE_INIT_CONTAINER,
                "ready": False,
                "restartCount": 0,
                "state": {
                    "terminated": {
                        "exitCode": exit_code,
                        "reason": reason,
                        "message": "checkpoint good is torn: MANIFEST.json missing",
                    }
                },
            }
        ],
        "containerStatuses": [
            {"name": "main", "ready": False, "restartCount": 0, "state": {"waiting": {}}}
        ],
    }
    await kubelet.replace(resources.PODS, failed, subresource="status")
    await cluster.start_bridge()

    async def counted() -> bool:
        return (await cluster.get_checkpoint("good")).status.failed_restores == 1

    await eventually(counted, what="failedRestores incremented")

    async def released() -> bool:
        current = await cluster.admin.get(resources.PODS, pod["metadata"]["name"], namespace=NS)
        return keys.CHECKPOINT_FINALIZER not in current["metadata"].get("finalizers", [])

    await eventually(released, what="the failed pod's finalizer removed")
    current = await cluster.admin.get(resources.PODS, pod["metadata"]["name"], namespace=NS)
    assert current["metadata"]["annotations"][keys.RESTORE_FAILURE_COUNTED_ANNOTATION] == "good"

    async def on_the_checkpoint() -> list[Obj]:  # Events are written after the release
        return [
            e
            for e in await cluster.events(reason=keys.EVENT_RESTORE_FAILED)
            if e["involvedObject"]["kind"] == "Checkpoint"
        ]

    await eventually(on_the_checkpoint, what="the RestoreFailed Event on the Checkpoint")
    (event,) = await on_the_checkpoint()
    assert event["type"] == "Warning"
    assert f"exited {exit_code}: checkpoint good is torn" in event["message"]

    # Any later change to the pod (here: a label) must not count the same failure again.
    await cluster.admin.patch(
        resources.PODS,
        pod["metadata"]["name"],
        {"metadata": {"labels": {"touched": "yes"}}},
        content_type=api.MERGE_PATCH,
        namespace=NS,
    )
    await cluster.bridges[0].controller.queue.join()
    assert (await cluster.get_checkpoint("good")).status.failed_restores == 1


async def test_an_opted_in_job_without_preemption_safety_gets_a_warning(cluster: Cluster) -> None:
    await cluster.queues()
    unsafe = await cluster.job("legacy", safe=False)
    safe = await cluster.job("plumbed")
    await cluster.workload(unsafe)
    await cluster.workload(safe)
    bridge = await cluster.start_bridge()

    async def warned() -> bool:
        return bool(await cluster.events(reason=keys.EVENT_UNSAFE_JOB))

    await eventually(warned, what="Warning on the unsafe Job")
    await bridge.controller.queue.join()
    (event,) = await cluster.events(reason=keys.EVENT_UNSAFE_JOB)
    assert event["involvedObject"]["name"] == "legacy"
    assert event["type"] == "Warning"
    assert "no podReplacementPolicy: Failed" in event["message"]
    assert "DisruptionTarget" in event["message"]
