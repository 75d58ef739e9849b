"""The checkpoint claim rule (webhook/claims.py) on a real kube-apiserver v1.36.2.

The ``kueue`` overlay's webhook runs as its ServiceAccount under the rendered RBAC (its claim
cache lists and watches PersistentVolumeClaims). In a namespace without the default policy's
claim ``kontinue``, an opted-in Job and the pod the real job controller creates for it are
admitted untouched — no volume naming a claim that does not exist, so nothing of ours keeps the
pod Pending — the real kubectl prints the webhook's warning, and a ``CheckpointVolumeMissing``
Warning Event lands on the Job. Once the claim exists, the next Job's pod is plumbed with it.
"""

from __future__ import annotations

import json
from typing import Any

from kontinue import keys
from kontinue.kube import api, resources
from tests.realcp import objects, processes

WARNING = 'no PersistentVolumeClaim "kontinue"'


def _job(namespace: str, queue: str, name: str) -> dict[str, Any]:
    body = objects.job(namespace, queue)
    body["metadata"]["name"] = name
    body["spec"].update(parallelism=1, completions=1)
    return body


async def test_without_the_claim_pods_are_left_untouched_and_a_warning_event_says_why(
    kontinue: processes.Installed, admin: api.Api, namespace: str
) -> None:
    plane = kontinue.plane
    queue = await objects.queues(admin, namespace, opted_in=True)

    async def warned_by_kubectl() -> bool:
        """The webhook knows the queue and the claim's absence: the real kubectl prints the
        admission warning of a server-side dry run."""
        done = plane.kubectl(
            "create", "--dry-run=server", "-f", "-", stdin=json.dumps(_job(namespace, queue, "x"))
        )
        return WARNING in done.stderr and f'namespace "{namespace}"' in done.stderr

    await objects.until(warned_by_kubectl, "kubectl printing the missing-claim warning", 40)

    job = await admin.create(
        resources.JOBS, _job(namespace, queue, "unclaimed"), namespace=namespace
    )
    assert job["spec"].get("podReplacementPolicy") != "Failed"
    assert "podFailurePolicy" not in job["spec"]
    assert not job["spec"]["template"]["spec"].get("initContainers")

    async def created() -> bool:
        return len(await objects.pods(admin, namespace)) == 1

    await objects.until(created, "the job controller's pod")
    (pod,) = await objects.pods(admin, namespace)
    meta, spec = pod["metadata"], pod["spec"]
    assert not any(k.startswith("kontinue.dev/") for k in meta.get("annotations") or {})
    assert keys.PLUMBED_LABEL not in (meta.get("labels") or {})
    assert keys.CHECKPOINT_FINALIZER not in (meta.get("finalizers") or [])
    assert not spec.get("initContainers")
    assert not [v for v in spec.get("volumes") or [] if "persistentVolumeClaim" in v]
    assert all(keys.ENV_CHECKPOINT_DIR not in str(c.get("env")) for c in spec["containers"])

    async def warning_events() -> list[dict[str, Any]]:
        listed = await admin.list(resources.EVENTS, namespace=namespace)
        return [e for e in listed["items"] if e["reason"] == keys.EVENT_CHECKPOINT_VOLUME_MISSING]

    async def warned_on_the_job() -> bool:
        return bool(await warning_events())

    await objects.until(warned_on_the_job, "the CheckpointVolumeMissing Event", 30)
    (event,) = await warning_events()
    assert event["type"] == "Warning"
    assert event["involvedObject"] == {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "name": "unclaimed",
        "namespace": namespace,
        "uid": job["metadata"]["uid"],
    }
    message = str(event["message"])
    assert f'namespace "{namespace}" has no PersistentVolumeClaim "kontinue"' in message
    assert 'CheckpointPolicy "default"' in message
    assert event["reportingComponent"] == "kontinue.dev/webhook"

    await objects.claim(admin, namespace)

    async def plumbed_again() -> bool:
        dry = await admin.create(
            resources.JOBS, _job(namespace, queue, "probe"), namespace=namespace, dry_run=True
        )
        return bool(dry["spec"].get("podReplacementPolicy") == "Failed")

    await objects.until(plumbed_again, "the webhook seeing the new claim", 30)
    second = await admin.create(
        resources.JOBS, _job(namespace, queue, "claimed"), namespace=namespace
    )
    assert second["spec"]["podReplacementPolicy"] == "Failed"

    async def second_pod() -> list[dict[str, Any]]:
        return [
            p
            for p in await objects.pods(admin, namespace)
            if p["metadata"]["labels"].get("job-name") == "claimed"
        ]

    async def second_created() -> bool:
        return bool(await second_pod())

    await objects.until(second_created, "the second Job's pod")
    (plumbed,) = await second_pod()
    assert keys.CHECKPOINT_FINALIZER in plumbed["metadata"]["finalizers"]
    claims = [
        v["persistentVolumeClaim"]["claimName"]
        for v in plumbed["spec"]["volumes"]
        if "persistentVolumeClaim" in v
    ]
    assert claims == ["kontinue"]
