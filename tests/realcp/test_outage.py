"""Proof 5: a webhook outage on a real kube-apiserver v1.36.2 blocks nobody but forgers.

With ``kontinue-webhook`` stopped: (a) an opted-in pod is created unplumbed (the mutating
webhook fails open); (b) the real job controller's removal of ``batch.kubernetes.io/job-tracking``
from already-plumbed pods, a queue system's label update and the bridge's own removal of
``kontinue.dev/checkpoint`` (``queue_bridge.acting.remove_finalizer``, as the bridge's
ServiceAccount) all go through, so no pod stays Terminating — the validating webhook
(``failurePolicy: Fail``) is only sent a CREATE that carries Kontinue keys or an UPDATE that
changes a reserved annotation; (c) forging a reserved key is refused, during the outage (the
call fails) and with the webhook back (denied).
"""

from __future__ import annotations

import pytest

from kontinue import keys
from kontinue.kube import api, client, errors, resources
from kontinue.models import core
from queue_bridge import acting
from tests.realcp import objects, processes

JOB_TRACKING = objects.JOB_TRACKING


FORGED = {"metadata": {"annotations": {"kontinue.dev/restore-from": "other-team/train/uid"}}}


async def test_outage_blocks_no_update_and_no_unplumbed_pod(
    kontinue: processes.Installed, admin: api.Api, namespace: str
) -> None:
    queue = await objects.queues(admin, namespace, opted_in=True)
    await objects.claim(admin, namespace)
    await objects.until_plumbing(admin, namespace, queue)
    await admin.create(resources.JOBS, objects.job(namespace, queue), namespace=namespace)

    async def two_plumbed() -> bool:
        pods = await objects.pods(admin, namespace)
        return len(pods) == 2 and all(
            keys.CHECKPOINT_FINALIZER in (p["metadata"].get("finalizers") or []) for p in pods
        )

    await objects.until(two_plumbed, "the job controller's two pods, plumbed")
    plumbed = await objects.pods(admin, namespace)
    for pod in plumbed:
        assert JOB_TRACKING in pod["metadata"]["finalizers"]
        assert keys.LINEAGE_ANNOTATION in pod["metadata"]["annotations"]

    assert kontinue.programs["webhook"].stop() == 0  # the outage starts
    before = objects.webhook_calls(kontinue.plane)

    # (a) an opted-in pod is admitted unplumbed.
    lone = await admin.create(
        resources.PODS, objects.pod(namespace, queue=queue), namespace=namespace
    )
    assert keys.LINEAGE_ANNOTATION not in (lone["metadata"].get("annotations") or {})
    assert not lone["metadata"].get("finalizers")

    # (b) a queue system's update of a plumbed pod (a label, as Kueue's pod integration does).
    name = plumbed[0]["metadata"]["name"]
    await admin.merge_patch(
        resources.PODS,
        name,
        {"metadata": {"labels": {"kueue.x-k8s.io/managed": "true"}}},
        namespace=namespace,
    )
    # ... the real job controller, told to stop (Kueue suspends the Job), deletes the pods and
    # removes its job-tracking finalizer from each (an UPDATE of a plumbed pod).
    await admin.merge_patch(
        resources.JOBS, "train", {"spec": {"suspend": True}}, namespace=namespace
    )

    async def tracking_released() -> bool:
        pods = [
            p
            for p in await objects.pods(admin, namespace)
            if p["metadata"]["name"] != lone["metadata"]["name"]
        ]
        return all(
            p["metadata"].get("deletionTimestamp")
            and JOB_TRACKING not in (p["metadata"].get("finalizers") or [])
            for p in pods
        )

    await objects.until(tracking_released, "the job controller's finalizer removals")
    # ... and the bridge releases its own finalizer, as its ServiceAccount.
    bridge_client = await client.api_client_from_dict(
        kontinue.plane.kubeconfig(
            "bridge", token=processes.token(kontinue.plane, kontinue.namespace, "kontinue-bridge")
        )
    )
    try:
        bridge = api.Api(bridge_client, field_manager="kontinue-bridge")
        for pod in await objects.pods(admin, namespace):
            if pod["metadata"]["name"] != lone["metadata"]["name"]:
                assert await acting.remove_finalizer(bridge, core.Pod.model_validate(pod))
    finally:
        await bridge_client.close()

    async def gone() -> bool:
        return [p["metadata"]["name"] for p in await objects.pods(admin, namespace)] == [
            lone["metadata"]["name"]
        ]

    await objects.until(gone, "the plumbed pods deleted, none Terminating")
    # The validating webhook was never called for any of it (the mutating one was, for the
    # lone pod's CREATE, and failed open).
    after = objects.webhook_calls(kontinue.plane)
    validating = {k: v for k, v in after.items() if k[1] == "pods.validate.kontinue.dev"}
    assert validating == {k: v for k, v in before.items() if k[1] == "pods.validate.kontinue.dev"}

    # (c) forging a reserved key: refused while the webhook is down (the call fails) ...
    with pytest.raises(errors.ApiError) as refused:
        await admin.merge_patch(
            resources.PODS, lone["metadata"]["name"], FORGED, namespace=namespace
        )
    assert 'failed calling webhook "pods.validate.kontinue.dev"' in str(refused.value)
    # ... and denied once it is back.
    kontinue.programs["webhook"] = processes.start_webhook(kontinue)
    with pytest.raises(errors.ApiError) as denied:
        await admin.merge_patch(
            resources.PODS, lone["metadata"]["name"], FORGED, namespace=namespace
        )
    assert 'admission webhook "pods.validate.kontinue.dev" denied the request' in str(denied.value)
    assert "kontinue.dev/restore-from" in str(denied.value)
