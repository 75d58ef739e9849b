"""The AdmissionCheck controller ``kontinue.dev/restore`` against the emulator's server-side apply.

What Kueue does around it is written by the test as Kueue writes it (server-side apply on
``workloads/status`` as ``kueue-admission``): the check added as ``Pending``, the reset to
``Pending`` on eviction (Kueue's apply carries no podSetUpdates), the next quota reservation.
"""

from __future__ import annotations

from typing import Any

from kontinue import keys
from kontinue.kube import resources
from tests.integration.bridge.conftest import NS, Cluster
from tests.waiting import eventually

Obj = dict[str, Any]
CHECK = "kontinue-restore"
A100 = "NVIDIA-A100-SXM4-80GB"


async def _check(cluster: Cluster, workload: Obj) -> Obj:
    current = await cluster.admin.get(
        resources.WORKLOADS, workload["metadata"]["name"], namespace=NS
    )
    (entry,) = [c for c in current["status"]["admissionChecks"] if c["name"] == CHECK]
    return dict(entry)


async def _setup(cluster: Cluster, *, flavor_labels: dict[str, str] | None = None) -> Obj:
    await cluster.admin.create(
        resources.ADMISSION_CHECKS,
        {
            "apiVersion": resources.ADMISSION_CHECKS.api_version,
            "kind": "AdmissionCheck",
            "metadata": {"name": CHECK},
            "spec": {"controllerName": keys.KUEUE_ADMISSION_CHECK_CONTROLLER},
        },
    )
    await cluster.admin.create(
        resources.RESOURCE_FLAVORS,
        {
            "apiVersion": resources.RESOURCE_FLAVORS.api_version,
            "kind": "ResourceFlavor",
            "metadata": {"name": "gpu"},
            "spec": {"nodeLabels": flavor_labels} if flavor_labels else {},
        },
    )
    await cluster.admin.create(
        resources.NODES,
        {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": "gpu-node", "labels": {keys.GPU_PRODUCT_LABEL: A100}},
        },
    )
    node = await cluster.admin.get(resources.NODES, "gpu-node")
    node["status"] = {"conditions": [{"type": "Ready", "status": "True"}]}
    await cluster.admin.replace(resources.NODES, node, subresource="status")
    await cluster.policy("steer", {"admissionCheck": {"enabled": True}})
    await cluster.queues(policy="steer")
    return await cluster.job()


async def test_active_then_ready_with_an_explicit_empty_list_for_a_cold_start(
    cluster: Cluster,
) -> None:
    job = await _setup(cluster)
    workload = await cluster.workload(job, checks=[CHECK])
    await cluster.start_bridge()

    async def active() -> bool:
        check = await cluster.admin.get(resources.ADMISSION_CHECKS, CHECK)
        conditions = (check.get("status") or {}).get("conditions") or []
        return any(c["type"] == "Active" and c["status"] == "True" for c in conditions)

    await eventually(active, what="AdmissionCheck Active")

    async def ready() -> bool:
        return bool((await _check(cluster, workload))["state"] == "Ready")

    await eventually(ready, what="check Ready")
    entry = await _check(cluster, workload)
    assert entry["podSetUpdates"] == []  # written explicitly, not left out
    assert entry["message"].startswith("cold start")


async def test_restore_is_steered_then_a_stale_annotation_is_cleared_on_the_next_admission(
    cluster: Cluster,
) -> None:
    job = await _setup(cluster)
    await cluster.put_checkpoint(job, "good", minute=1, policy="steer", gpu_product=A100)
    workload = await cluster.workload(job, checks=[CHECK])
    bridge = await cluster.start_bridge()

    async def ready() -> bool:
        return bool((await _check(cluster, workload))["state"] == "Ready")

    await eventually(ready, what="check Ready with a restore")
    entry = await _check(cluster, workload)
    assert entry["podSetUpdates"] == [
        {
            "name": "main",
            "annotations": {keys.RESTORE_FROM_ANNOTATION: "good"},
            "nodeSelector": {keys.GPU_PRODUCT_LABEL: A100},
        }
    ]

    # The checkpoint turns unusable (restores kept failing); then an eviction and readmission.
    await cluster.admin.patch(
        resources.CHECKPOINTS,
        "good",
        {"status": {"failedRestores": 5}},
        content_type="application/merge-patch+json",
        namespace=NS,
        subresource="status",
    )

    def seen() -> bool:  # the bridge's watch cache has the patch (it lags under load)
        cp = bridge.controller.caches.checkpoints.get("good", NS)
        return cp is not None and cp.status.failed_restores == 5

    await eventually(seen, what="the bridge's cache sees failedRestores")
    await cluster.evict(workload)
    stale = await _check(cluster, workload)
    assert stale["state"] == "Pending"
    # Kueue's reset cannot drop list entries another manager owns (kueue.md, last section):
    assert stale.get("podSetUpdates") == entry["podSetUpdates"]
    await cluster.readmit(workload)

    await eventually(ready, what="check Ready again")
    entry = await _check(cluster, workload)
    assert entry["podSetUpdates"] == []
    assert "cold start" in entry["message"]


async def test_a_key_the_flavor_sets_is_never_sent_again(cluster: Cluster) -> None:
    job = await _setup(cluster, flavor_labels={keys.GPU_PRODUCT_LABEL: A100})
    await cluster.put_checkpoint(job, "good", minute=1, policy="steer", gpu_product=A100)
    workload = await cluster.workload(job, checks=[CHECK])
    await cluster.start_bridge()

    async def ready() -> bool:
        return bool((await _check(cluster, workload))["state"] == "Ready")

    await eventually(ready, what="check Ready")
    entry = await _check(cluster, workload)
    assert entry["podSetUpdates"] == [
        {"name": "main", "annotations": {keys.RESTORE_FROM_ANNOTATION: "good"}}
    ]


async def test_the_check_stays_pending_while_the_newest_checkpoint_is_saving(
    cluster: Cluster,
) -> None:
    job = await _setup(cluster)
    await cluster.put_checkpoint(job, "good", minute=1, policy="steer")
    workload = await cluster.workload(job, checks=[CHECK])
    pods = await cluster.pods(job, n=1)
    await cluster.start_bridge()
    await cluster.evict(workload)
    await cluster.delete_pod(pods[0])

    async def saving() -> bool:
        return any(cp.status.phase.value == "InProgress" for cp in await cluster.checkpoints())

    await eventually(saving, what="the eviction's Checkpoint InProgress")
    await cluster.readmit(workload)

    async def waiting() -> bool:
        entry = await _check(cluster, workload)
        return bool(
            entry["state"] == "Pending" and entry["message"].startswith("waiting for Checkpoint")
        )

    await eventually(waiting, what="Pending with a message while saving")
    await cluster.terminate(pods[0])

    async def ready() -> bool:
        return bool((await _check(cluster, workload))["state"] == "Ready")

    await eventually(ready, what="Ready once the save is terminal")
    entry = await _check(cluster, workload)
    (update,) = entry["podSetUpdates"]
    newest = [cp.name for cp in await cluster.checkpoints() if cp.name != "good"]
    assert update["annotations"] == {keys.RESTORE_FROM_ANNOTATION: newest[0]}
