"""Eviction -> one Checkpoint -> members' real container states -> terminal phase -> finalizers.

The bridge runs as in a cluster (``queue_bridge.app.run``: caches, Lease, workers) through the
real kubernetes-asyncio client; the tests write what Kueue, the job controller and the kubelet
write (see conftest).
"""

from __future__ import annotations

from typing import Any

import pytest

from kontinue import keys
from kontinue.kube import resources
from kontinue.models import checkpoint, kueue
from queue_bridge import naming, reconciling
from tests import promlint
from tests.integration.bridge.conftest import NS, SAVED, Cluster, condition
from tests.waiting import eventually

Obj = dict[str, Any]


async def _evicted_running_job(cluster: Cluster, **pod_options: Any) -> tuple[Obj, Obj, list[Obj]]:
    await cluster.queues()
    job = await cluster.job()
    workload = await cluster.workload(job)
    pods = await cluster.pods(job, **pod_options)
    return job, workload, pods


async def test_eviction_makes_one_checkpoint_that_succeeds_when_every_member_saved(
    cluster: Cluster,
) -> None:
    job, workload, pods = await _evicted_running_job(cluster)
    bridge = await cluster.start_bridge()
    evicted = await cluster.evict(workload)

    async def created() -> bool:
        return len(await cluster.checkpoints()) == 1

    await eventually(created, what="Checkpoint created")
    # Kueue writes the Workload again during the same eviction (PodsReady, the second suspend):
    # the same eviction, so no second Checkpoint.
    conditions = [*evicted["status"]["conditions"]]
    conditions.append(condition("PodsReady", "False", "WaitForRecovery", "pods terminating"))
    status = {"admission": evicted["status"]["admission"], "conditions": conditions}
    await cluster.kueue_apply(workload["metadata"]["name"], status)

    cp = await cluster.one_checkpoint()
    wl = reconciling.workload_lineage(
        kueue.Workload.model_validate(
            await cluster.admin.get(resources.WORKLOADS, workload["metadata"]["name"], namespace=NS)
        )
    )
    assert wl is not None
    assert cp.spec.trigger.source is checkpoint.TriggerSource.KUEUE
    assert cp.spec.trigger.reason == "Preempted"
    assert cp.spec.trigger.message.startswith("InClusterQueue: Preempted to accommodate")
    assert cp.name == naming.checkpoint_name(
        wl, trigger=cp.spec.trigger, workload_uid=workload["metadata"]["uid"]
    )
    assert [(m.pod_name, m.pod_uid, m.node, m.index) for m in cp.spec.members] == [
        (p["metadata"]["name"], p["metadata"]["uid"], p["spec"]["nodeName"], i)
        for i, p in enumerate(pods)
    ]
    assert cp.spec.workload == workload["metadata"]["name"]
    assert cp.metadata.label(keys.CHECKPOINT_OWNER_UID_LABEL) == job["metadata"]["uid"]

    for pod in pods:
        await cluster.delete_pod(pod)

    async def in_progress() -> bool:
        return await cluster.phase() == "InProgress"

    await eventually(in_progress, what="InProgress once members are told to stop")
    for pod in pods:
        await cluster.terminate(pod)

    async def succeeded() -> bool:
        return await cluster.phase() == "Succeeded"

    await eventually(succeeded, what="Succeeded")
    cp = await cluster.one_checkpoint()
    assert [m.state for m in cp.status.members] == [checkpoint.MemberState.SAVED] * 2
    assert [m.exit_code for m in cp.status.members] == [143, 143]
    assert [m.bytes for m in cp.status.members] == [1024, 1024]
    assert all(
        m.path and m.path.endswith(p["metadata"]["uid"])
        for m, p in zip(cp.status.members, pods, strict=True)
    )  # noqa: E501
    assert cp.status.message == "2/2 members saved, 2048 bytes"

    async def released() -> bool:
        return not any([await cluster.pod_exists(p["metadata"]["name"]) for p in pods])

    await eventually(released, what="finalizers removed (pods gone)")

    async def told() -> bool:  # Events follow the writes they report
        for reason in (keys.EVENT_CHECKPOINT_STARTED, keys.EVENT_CHECKPOINT_SUCCEEDED):
            kinds = sorted(e["involvedObject"]["kind"] for e in await cluster.events(reason=reason))
            if kinds != ["Checkpoint", "Job", "Workload"]:
                return False
        return True

    await eventually(told, what="Started and Succeeded Events on Workload, Job, Checkpoint")
    assert len(await cluster.checkpoints()) == 1
    scraped = await bridge.scrape()
    assert promlint.problems(scraped) == []
    assert promlint.value(scraped, "kontinue_bridge_checkpoints", phase="Succeeded") == 1
    assert promlint.value(scraped, "kontinue_bridge_leader") == 1
    for phase in ("Pending", "InProgress", "Succeeded"):
        total = "kontinue_bridge_checkpoint_transitions_total"
        assert promlint.value(scraped, total, phase=phase) == 1, phase
    evictions = "kontinue_bridge_evictions_total"
    assert promlint.value(scraped, evictions, source="Kueue", reason="Preempted") == 1
    assert promlint.value(scraped, "kontinue_bridge_reaction_seconds_count", source="Kueue") == 1
    finalizers = "kontinue_bridge_finalizers_released_total"
    assert promlint.value(scraped, finalizers, reason="ResultRecorded") == 2
    saved = "kontinue_bridge_member_save_duration_seconds_count"
    assert promlint.value(scraped, saved, result="Saved") == 2
    assert promlint.value(scraped, "kontinue_bridge_member_save_size_bytes_sum") == 2048
    handover = "kontinue_bridge_handover_seconds_count"
    assert promlint.value(scraped, handover, stage="victims_exited") == 1
    assert promlint.value(scraped, "kontinue_bridge_queue_adds_total") > 0


@pytest.mark.parametrize(
    ("exit_code", "message", "reason", "expected"),
    [
        (137, SAVED, "Error", "killed by SIGKILL (exit 137)"),
        (143, None, "Error", "no termination message (exit 143)"),
        (0, SAVED, "Completed", "exited 0 after eviction"),
        (137, SAVED, "OOMKilled", "OOMKilled (exit 137)"),
    ],
    ids=["sigkill", "no-message", "exit-0", "oom"],
)
async def test_one_failed_member_fails_the_set_with_its_reason(
    cluster: Cluster, exit_code: int, message: str | None, reason: str, expected: str
) -> None:
    _, workload, pods = await _evicted_running_job(cluster)
    await cluster.start_bridge()
    await cluster.evict(workload)

    async def created() -> bool:
        return len(await cluster.checkpoints()) == 1

    await eventually(created, what="Checkpoint created")
    for pod in pods:
        await cluster.delete_pod(pod)
    await cluster.terminate(pods[0])
    await cluster.terminate(pods[1], exit_code=exit_code, message=message, reason=reason)

    async def failed() -> bool:
        return await cluster.phase() == "Failed"

    await eventually(failed, what="Failed")
    cp = await cluster.one_checkpoint()
    first, second = cp.status.members
    assert first.state is checkpoint.MemberState.SAVED
    assert second.state is checkpoint.MemberState.FAILED
    assert second.reason is not None
    assert second.reason.startswith(expected), second.reason
    assert cp.status.message is not None
    assert expected in cp.status.message

    async def told() -> bool:
        found = await cluster.events(reason=keys.EVENT_CHECKPOINT_FAILED)
        return {e["involvedObject"]["kind"] for e in found} == {"Checkpoint", "Job", "Workload"}

    await eventually(told, what="CheckpointFailed on Workload, Job, Checkpoint")
    failed_events = await cluster.events(reason=keys.EVENT_CHECKPOINT_FAILED)
    assert all(e["type"] == "Warning" and expected in e["message"] for e in failed_events)

    async def released() -> bool:
        return not any([await cluster.pod_exists(p["metadata"]["name"]) for p in pods])

    await eventually(released, what="finalizers removed")


async def test_a_pod_stuck_terminating_fails_its_member_and_loses_the_finalizer(
    cluster: Cluster,
) -> None:
    _, workload, pods = await _evicted_running_job(cluster, n=1, grace=1)
    await cluster.start_bridge(finalizer_margin_seconds=1.0)
    await cluster.evict(workload)

    async def created() -> bool:
        return len(await cluster.checkpoints()) == 1

    await eventually(created, what="Checkpoint created")
    await cluster.delete_pod(pods[0])  # ... and the kubelet never reports back

    async def failed() -> bool:
        return await cluster.phase() == "Failed"

    await eventually(failed, within=15, what="Failed past grace + margin")
    cp = await cluster.one_checkpoint()
    assert cp.status.members[0].reason is not None
    assert cp.status.members[0].reason.startswith("still Terminating 1s after its grace period")

    async def no_finalizer() -> bool:
        pod = await cluster.admin.get(resources.PODS, pods[0]["metadata"]["name"], namespace=NS)
        return keys.CHECKPOINT_FINALIZER not in pod["metadata"].get("finalizers", [])

    await eventually(no_finalizer, what="finalizer removed from the stuck pod")


async def test_pods_that_end_without_an_eviction_never_keep_the_finalizer(
    cluster: Cluster,
) -> None:
    await cluster.queues()
    job = await cluster.job()
    await cluster.workload(job)
    completed, deleted = await cluster.pods(job)
    await cluster.start_bridge()
    # one runs to completion (never deleted), one is deleted by hand (no eviction anywhere)
    await cluster.terminate(completed, exit_code=0, message=None, reason="Completed", delete=False)
    await cluster.delete_pod(deleted)
    await cluster.terminate(deleted)

    async def released() -> bool:
        pod = await cluster.admin.get(resources.PODS, completed["metadata"]["name"], namespace=NS)
        return keys.CHECKPOINT_FINALIZER not in pod["metadata"].get(
            "finalizers", []
        ) and not await cluster.pod_exists(deleted["metadata"]["name"])

    await eventually(released, what="both finalizers removed")
    assert await cluster.checkpoints() == []


async def test_a_queue_that_did_not_opt_in_gets_no_checkpoint(cluster: Cluster) -> None:
    await cluster.queues(opted_in=False)
    job = await cluster.job()
    workload = await cluster.workload(job)
    pods = await cluster.pods(job)
    bridge = await cluster.start_bridge()
    await cluster.evict(workload)
    for pod in pods:
        await cluster.delete_pod(pod)
        await cluster.terminate(pod)

    async def released() -> bool:
        return not any([await cluster.pod_exists(p["metadata"]["name"]) for p in pods])

    await eventually(released, what="finalizers removed")
    await bridge.controller.queue.join()
    assert await cluster.checkpoints() == []
    assert await cluster.events(reason=keys.EVENT_CHECKPOINT_STARTED) == []
