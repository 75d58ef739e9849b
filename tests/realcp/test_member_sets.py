"""Issues 19 and 11 item 1 on a real kube-apiserver v1.36.2 with the real job controller.

The kueue overlay's webhook and bridge run as their console scripts under their ServiceAccounts
(tests/realcp/processes.py). The Indexed Job's pods are created by the real job controller, so
the completion index the member identity comes from is the one Kubernetes itself stamps; the
scheduling gate, the downward-API env the restore reads its verdict from, and the bridge's
verdict patch (annotations + gate removal in one JSON patch) are all judged by the real
apiserver's validation.
"""

from __future__ import annotations

import datetime
from typing import Any

import pytest

from kontinue import keys, lineage, restore_plan
from kontinue.kube import api, resources
from kontinue.models import base, checkpoint
from tests.realcp import objects, processes


async def _ready(program: processes.Program) -> bool:
    return processes.bridge_ready(program)


def _env(container: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {e["name"]: e for e in container.get("env") or []}


async def test_every_pod_of_an_indexed_job_gets_its_member_identity(
    kontinue: processes.Installed, admin: api.Api, namespace: str
) -> None:
    queue = await objects.queues(admin, namespace, opted_in=True)
    await objects.claim(admin, namespace)
    await objects.until_plumbing(admin, namespace, queue)
    await admin.create(resources.JOBS, objects.job(namespace, queue), namespace=namespace)

    await objects.until_plumbed_pods(admin, namespace, 2, "two plumbed pods")
    members = set()
    for pod in await objects.pods(admin, namespace):
        index = pod["metadata"]["annotations"][keys.JOB_COMPLETION_INDEX_ANNOTATION]
        for container in pod["spec"]["containers"]:
            assert _env(container)[keys.ENV_MEMBER]["value"] == f"index={index}"
        members.add(index)
    assert members == {"0", "1"}


def _set(
    namespace: str, owner: checkpoint.Lineage, name: str, minute: int, uids: list[str]
) -> dict[str, Any]:
    when = datetime.datetime(2026, 12, 3, 9, minute, tzinfo=datetime.UTC)
    return {
        "apiVersion": keys.API_VERSION,
        "kind": "Checkpoint",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "lineage": base.to_dict(owner),
            "trigger": {"source": "Kueue", "reason": "Preempted", "time": base.format_time(when)},
            "members": [
                {"podName": f"{name}-{i}", "podUid": uid, "identity": f"index={i}", "index": i}
                for i, uid in enumerate(uids)
            ],
        },
    }


@pytest.mark.timeout(300)
async def test_pods_wait_gated_for_a_saving_set_and_the_bridge_gives_the_verdict(
    kontinue: processes.Installed, admin: api.Api, namespace: str
) -> None:
    """A 2-member set of the Job is still InProgress when its pods are created: the real
    apiserver admits them gated, with the restore's wait path built from the downward API. The
    real bridge finds the set's members gone (they were evicted pods), fails it, and ungates
    each pod with the verdict "not restorable": both fall back to the older whole set."""
    queue = await objects.queues(admin, namespace, opted_in=True)
    await objects.claim(admin, namespace)
    await objects.until_plumbing(admin, namespace, queue)
    job = objects.job(namespace, queue)
    job["spec"]["suspend"] = True
    created = await admin.create(resources.JOBS, job, namespace=namespace)
    owner = checkpoint.Lineage(
        namespace=namespace,
        owner_kind="Job",
        owner_name=created["metadata"]["name"],
        owner_uid=created["metadata"]["uid"],
    )
    old_uids = ["0b1e6a52-0000-4000-8000-000000000000", "0b1e6a52-0000-4000-8000-000000000001"]
    new_uids = ["7c2d9f10-0000-4000-8000-000000000000", "7c2d9f10-0000-4000-8000-000000000001"]
    await admin.create(
        resources.CHECKPOINTS, _set(namespace, owner, "old", 1, old_uids), namespace=namespace
    )
    await admin.merge_patch(
        resources.CHECKPOINTS,
        "old",
        {"status": {"phase": "Succeeded"}},
        namespace=namespace,
        subresource="status",
    )
    await admin.create(
        resources.CHECKPOINTS, _set(namespace, owner, "saving", 2, new_uids), namespace=namespace
    )
    await admin.merge_patch(
        resources.CHECKPOINTS,
        "saving",
        {"status": {"phase": "InProgress"}},
        namespace=namespace,
        subresource="status",
    )

    async def webhook_sees_them() -> bool:  # its Checkpoint cache: a dry-run pod restores
        probe = objects.pod(namespace, queue=queue)
        probe["metadata"]["ownerReferences"] = [
            {
                "apiVersion": "batch/v1",
                "kind": "Job",
                "name": owner.owner_name,
                "uid": owner.owner_uid,
                "controller": True,
            }
        ]
        dry = await admin.create(resources.PODS, probe, namespace=namespace, dry_run=True)
        annotations = dry["metadata"].get("annotations") or {}
        return annotations.get(keys.RESTORE_FROM_ANNOTATION) == "saving"

    await objects.until(webhook_sees_them, "the webhook's cache holds both sets")
    await admin.merge_patch(
        resources.JOBS, owner.owner_name, {"spec": {"suspend": False}}, namespace=namespace
    )

    async def gated() -> bool:
        pods = await objects.pods(admin, namespace)
        return len(pods) == 2 and all(
            {"name": keys.SET_VERDICT_GATE} in (p["spec"].get("schedulingGates") or [])
            for p in pods
        )

    await objects.until(gated, "both pods created, gated on the set's verdict")
    own = lineage.lineage_dir(owner)
    for pod in await objects.pods(admin, namespace):
        index = int(pod["metadata"]["annotations"][keys.JOB_COMPLETION_INDEX_ANNOTATION])
        (init,) = pod["spec"]["initContainers"]
        env = _env(init)
        assert env[keys.ENV_VERDICT_MEMBER]["valueFrom"]["fieldRef"]["fieldPath"] == (
            f"metadata.annotations['{keys.RESTORE_MEMBER_ANNOTATION}']"
        )
        assert env[keys.ENV_WAIT_FOR]["value"].endswith(f"{own}/$({keys.ENV_VERDICT_MEMBER})")
        assert env[keys.ENV_RESTORE_SOURCE]["value"].endswith(f"{own}/{old_uids[index]}")
        assert pod["metadata"]["annotations"][keys.RESTORE_FROM_ANNOTATION] == "saving"

    bridge = processes.start_bridge(kontinue)
    kontinue.programs["bridge"] = bridge

    async def ungated() -> bool:
        pods = await objects.pods(admin, namespace)
        return len(pods) == 2 and not any(p["spec"].get("schedulingGates") for p in pods)

    try:  # a bridge starting on a loaded machine: imports, leader election, cache sync
        await objects.until(ungated, "the bridge's verdict", seconds=120)
    except AssertionError as failed:
        raise AssertionError(f"{failed}\nbridge log:\n{bridge.tail()}") from None
    saving = await admin.get(resources.CHECKPOINTS, "saving", namespace=namespace)
    assert saving["status"]["phase"] == "Failed"
    for pod in await objects.pods(admin, namespace):
        annotations = pod["metadata"]["annotations"]
        assert annotations[keys.RESTORE_MEMBER_ANNOTATION] == restore_plan.NOT_RESTORABLE
        assert annotations[keys.RESTORE_WAIT_ANNOTATION] == "0"


async def test_pods_drained_before_they_ever_ran_are_carried_forward(
    kontinue: processes.Installed, admin: api.Api, namespace: str
) -> None:
    """Issue 19 item 2 on the real apiserver: no scheduler runs, so the Job's pods are Pending
    when a drain (the real Eviction API, which adds ``DisruptionTarget``) takes them. The real
    bridge records both members ``CarriedForward`` (they never started their main container):
    the set Succeeds instead of failing, and the replacements know they have nothing to restore."""
    queue = await objects.queues(admin, namespace, opted_in=True)
    await objects.claim(admin, namespace)
    await objects.until_plumbing(admin, namespace, queue)
    bridge = processes.start_bridge(kontinue)
    kontinue.programs["bridge"] = bridge
    await admin.create(resources.JOBS, objects.job(namespace, queue), namespace=namespace)

    async def pending() -> bool:
        pods = await objects.pods(admin, namespace)
        return len(pods) == 2 and all(
            keys.CHECKPOINT_FINALIZER in p["metadata"]["finalizers"] for p in pods
        )

    await objects.until(pending, "two plumbed, pending pods")
    first = await objects.pods(admin, namespace)
    await objects.until(lambda: _ready(bridge), f"bridge ready\n{bridge.tail()}", seconds=60)
    for pod in first:
        await admin.evict(pod["metadata"]["name"], namespace=namespace)

    async def sets() -> list[checkpoint.Checkpoint]:
        items = (await admin.list(resources.CHECKPOINTS, namespace=namespace))["items"]
        return [checkpoint.load(item) for item in items]

    async def recorded() -> bool:
        # A pod that never ran is recorded at once, so the second drain may find the first set
        # already terminal and start its own: one or two sets, both pods recorded.
        found = await sets()
        members = [m for cp in found for m in cp.spec.members]
        return len(members) == 2 and all(cp.status.phase.terminal for cp in found)

    await objects.until(recorded, f"the drained pods recorded\n{bridge.tail()}", seconds=60)
    found = await sets()
    assert sorted(m.identity for cp in found for m in cp.spec.members) == ["index=0", "index=1"]
    for cp in found:
        assert cp.status.phase is checkpoint.Phase.SUCCEEDED, cp.status
        assert {r.state for r in cp.status.members} == {checkpoint.MemberState.CARRIED_FORWARD}
        assert "carried forward" in (cp.status.message or "")

    gone = {p["metadata"]["uid"] for p in first}

    async def replaced() -> bool:
        pods = [p for p in await objects.pods(admin, namespace) if p["metadata"]["uid"] not in gone]
        return len(pods) == 2

    await objects.until(replaced, "the job controller replaced both pods", seconds=60)
    for pod in await objects.pods(admin, namespace):
        if pod["metadata"]["uid"] in gone:
            continue
        reason = pod["metadata"]["annotations"][keys.COLD_START_REASON_ANNOTATION]
        assert "carried forward (never ran)" in reason, reason
