"""Objects and measurements the real-control-plane proofs share: Kueue queues, a claim, a
Pod Security "restricted" pod, and the apiserver's count of webhook requests."""

from __future__ import annotations

import asyncio
import re
import secrets
from typing import Any

from kontinue import keys
from kontinue.kube import api, interface, resources
from tests.realcp import controlplane

CLUSTER_QUEUES = resources.Resource(
    "kueue.x-k8s.io", "v1beta2", "clusterqueues", "ClusterQueue", namespaced=False
)
LOCAL_QUEUES = resources.Resource("kueue.x-k8s.io", "v1beta2", "localqueues", "LocalQueue")
METRIC = re.compile(r"^apiserver_admission_webhook_request_total\{(?P<labels>[^}]*)\} (?P<n>\S+)$")


def webhook_requests(plane: controlplane.ControlPlane) -> dict[str, float]:
    """Requests the apiserver sent, by webhook name (all operations and outcomes)."""
    counts: dict[str, float] = {}
    for line in plane.metrics().splitlines():
        match = METRIC.match(line)
        if match:
            name = re.search(r'name="([^"]*)"', match["labels"])
            assert name
            counts[name[1]] = counts.get(name[1], 0) + float(match["n"])
    return counts


def webhook_requests_since(
    plane: controlplane.ControlPlane, before: dict[str, float]
) -> dict[str, float]:
    """Requests the apiserver sent since ``before`` (:func:`webhook_requests`), by webhook
    name; webhooks it did not call are left out."""
    after = webhook_requests(plane)
    return {k: after[k] - before.get(k, 0) for k in after if after[k] != before.get(k, 0)}


async def until_plumbed_pods(admin: api.Api, namespace: str, count: int, what: str) -> None:
    """Wait until ``namespace`` holds ``count`` pods, every one plumbed (the lineage
    annotation the mutating webhook adds)."""

    async def plumbed() -> bool:
        found = await pods(admin, namespace)
        return len(found) == count and all(
            keys.LINEAGE_ANNOTATION in (p["metadata"].get("annotations") or {}) for p in found
        )

    await until(plumbed, what)


async def queues(admin: api.Api, namespace: str, *, opted_in: bool) -> str:
    """A ClusterQueue (opted in or not) and a LocalQueue for it in ``namespace``; its name."""
    name = f"cq-{secrets.token_hex(3)}"
    labels = {keys.ENABLED_LABEL: "true"} if opted_in else {}
    await admin.create(
        CLUSTER_QUEUES,
        {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "ClusterQueue",
            "metadata": {"name": name, "labels": labels},
            "spec": {"namespaceSelector": {}},
        },
    )
    await admin.create(
        LOCAL_QUEUES,
        {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "LocalQueue",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"clusterQueue": name},
        },
        namespace=namespace,
    )
    return name


def pod(namespace: str, *, queue: str | None) -> dict[str, Any]:
    labels = {"kueue.x-k8s.io/queue-name": queue} if queue else {}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"generateName": "p-", "namespace": namespace, "labels": labels},
        "spec": {
            "restartPolicy": "Never",
            # Pod Security "restricted" (Kontinue's own namespace enforces it).
            "securityContext": {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}},
            "containers": [
                {
                    "name": "trainer",
                    "image": "registry.example/trainer:1",
                    "securityContext": {
                        "allowPrivilegeEscalation": False,
                        "capabilities": {"drop": ["ALL"]},
                    },
                }
            ],
        },
    }


async def claim(admin: interface.Client, namespace: str, name: str = "kontinue") -> None:
    await admin.create(
        resources.PVCS,
        {
            "apiVersion": "v1",
            "kind": "PersistentVolumeClaim",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {
                "accessModes": ["ReadWriteMany"],
                "resources": {"requests": {"storage": "1Gi"}},
            },
        },
        namespace=namespace,
    )


async def until_plumbing(admin: api.Api, namespace: str, queue: str) -> None:
    """Wait until the webhook plumbs a Job of ``queue`` in ``namespace`` (a dry-run create):
    its watch caches then hold the opted-in queue and the namespace's claim. The webhook is
    another process, and a Job created right after its queue can reach it before the queue's
    watch event does: then it is, correctly, not opted in (a flake seen under load)."""

    async def plumbed() -> bool:
        probe = job(namespace, queue)
        probe["metadata"]["name"] = "plumbing-probe"
        dry = await admin.create(resources.JOBS, probe, namespace=namespace, dry_run=True)
        return bool(dry["spec"].get("podReplacementPolicy") == "Failed")

    await until(plumbed, f"the webhook plumbing Jobs of queue {queue} in {namespace}")


CALL_METRICS = re.compile(
    r"^(?P<metric>apiserver_admission_webhook_(request_total|rejection_count))"
    r"\{(?P<labels>[^}]*)\} (?P<n>\S+)$"
)


def webhook_calls(plane: controlplane.ControlPlane) -> dict[tuple[str, str], float]:
    """Calls (answered or failed) and rejections per (metric, webhook name): a webhook the
    apiserver never tried to call leaves both unchanged."""
    counts: dict[tuple[str, str], float] = {}
    for line in plane.metrics().splitlines():
        match = CALL_METRICS.match(line)
        if match:
            name = re.search(r'name="([^"]*)"', match["labels"])
            assert name
            key = (match["metric"], name[1])
            counts[key] = counts.get(key, 0) + float(match["n"])
    return counts


JOB_TRACKING = "batch.kubernetes.io/job-tracking"


def job(namespace: str, queue: str) -> dict[str, Any]:
    template = pod(namespace, queue=queue)
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": "train",
            "namespace": namespace,
            "labels": {"kueue.x-k8s.io/queue-name": queue},
        },
        "spec": {
            "parallelism": 2,
            "completions": 2,
            "completionMode": "Indexed",
            "backoffLimit": 0,
            "template": {
                "metadata": {"labels": template["metadata"]["labels"]},
                "spec": template["spec"],
            },
        },
    }


async def pods(admin: api.Api, namespace: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = (await admin.list(resources.PODS, namespace=namespace))["items"]
    return items


async def until(condition: Any, what: str, seconds: float = 30.0) -> None:
    """Poll the real API until ``condition()``; fail naming ``what`` after ``seconds``."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + seconds
    while not await condition():
        if loop.time() > deadline:
            raise AssertionError(f"not within {seconds} s: {what}")
        await asyncio.sleep(0.2)
