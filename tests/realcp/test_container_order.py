"""Issue 20 item 1 on a real kube-apiserver v1.36.2 and job controller, with the real bridge and
webhook: the workload container is not the first one.

The Job's pod lists a helper before the trainer (as Istio's ``istio-proxy`` goes first with
``holdApplicationUntilProxyStarts``); the trainer is named by the annotation
``kontinue.dev/workload-containers``, or is the one container that requests an accelerator. The
pod is bound to a node no kubelet serves (tests/realcp/unserved_node.py) and evicted through the
real Eviction API; the test writes what the kubelet would: the trainer saved and exited 143 while
the helper, which ignores SIGTERM, still runs. The set is decided then — ``Succeeded`` — without
waiting for the helper, and its SIGKILL at the end of the grace period changes nothing.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from kontinue import keys
from kontinue.kube import api, resources
from tests.realcp import objects, processes, unserved_node

Obj = dict[str, Any]
GRACE = 30  # the helper would hold the set this long if it were waited for
SAVED = json.dumps({"kontinue": "saved", "step": 12, "bytes": 2048})


def _job(namespace: str, queue: str, node: str, rule: str) -> Obj:
    job = unserved_node.bound_job(namespace, queue, node, grace=GRACE)
    template = job["spec"]["template"]
    (trainer,) = template["spec"]["containers"]
    helper = {**trainer, "name": "helper", "image": "registry.example/helper:1"}
    if rule == "annotation":
        template["metadata"]["annotations"] = {keys.WORKLOAD_CONTAINERS_ANNOTATION: "trainer"}
    else:
        trainer["resources"] = {"limits": {keys.GPU_RESOURCE: "1"}}
    template["spec"]["containers"] = [helper, trainer]
    return job


async def _ready(program: processes.Program) -> bool:
    return processes.bridge_ready(program)


@pytest.mark.parametrize("rule", ["annotation", "accelerator"])
async def test_a_helper_listed_first_neither_fails_nor_holds_the_set(
    kontinue: processes.Installed, admin: api.Api, namespace: str, rule: str
) -> None:
    queue = await unserved_node.short_grace_queue(admin, namespace)
    await objects.claim(admin, namespace)
    await objects.until_plumbing(admin, namespace, queue)
    node = await unserved_node.node(admin)
    bridge = processes.start_bridge(kontinue)
    kontinue.programs["bridge"] = bridge
    try:
        await admin.create(resources.JOBS, _job(namespace, queue, node, rule), namespace=namespace)

        async def plumbed() -> bool:
            pods = await objects.pods(admin, namespace)
            return len(pods) == 1 and keys.CHECKPOINT_FINALIZER in (
                pods[0]["metadata"].get("finalizers") or []
            )

        await objects.until(plumbed, "the pod created and plumbed", seconds=60)
        (pod,) = await objects.pods(admin, namespace)
        assert [c["name"] for c in pod["spec"]["containers"]] == ["helper", "trainer"]
        started = unserved_node.now()
        running = {"running": {"startedAt": started}}
        await unserved_node.write_status(
            admin, pod, {"helper": running, "trainer": running}, "Running"
        )
        await objects.until(lambda: _ready(bridge), f"bridge ready\n{bridge.tail()}", seconds=60)
        await admin.evict(pod["metadata"]["name"], namespace=namespace)

        async def one_set() -> list[Obj]:
            items: list[Obj] = (await admin.list(resources.CHECKPOINTS, namespace=namespace))[
                "items"
            ]
            return items

        async def recorded() -> bool:
            return len(await one_set()) == 1

        await objects.until(recorded, f"the eviction recorded\n{bridge.tail()}", seconds=60)
        # The trainer saves and exits 143; the helper ignores SIGTERM and keeps running.
        saved = {
            "terminated": {
                "exitCode": 143,
                "reason": "Error",
                "message": SAVED,
                "startedAt": started,
                "finishedAt": unserved_node.now(),
            }
        }
        await unserved_node.write_status(
            admin, pod, {"helper": running, "trainer": saved}, "Running"
        )

        async def succeeded() -> bool:
            (cp,) = await one_set()
            return (cp.get("status") or {}).get("phase") == "Succeeded"

        await objects.until(succeeded, f"the set decided\n{bridge.tail()}", seconds=60)
        current = await admin.get(resources.PODS, pod["metadata"]["name"], namespace=namespace)
        helper_state = next(
            s["state"] for s in current["status"]["containerStatuses"] if s["name"] == "helper"
        )
        assert "running" in helper_state  # decided while the helper still ran
        (cp,) = await one_set()
        (member,) = cp["status"]["members"]
        assert (member["state"], member["exitCode"], member["step"]) == ("Saved", 143, 12)

        # The end of the grace period: the helper is SIGKILLed. Nothing changes.
        killed = {
            "terminated": {
                "exitCode": 137,
                "reason": "Error",
                "startedAt": started,
                "finishedAt": unserved_node.now(),
            }
        }
        await unserved_node.write_status(admin, pod, {"helper": killed, "trainer": saved}, "Failed")

        async def released() -> bool:
            got = await admin.get(resources.PODS, pod["metadata"]["name"], namespace=namespace)
            return keys.CHECKPOINT_FINALIZER not in (got["metadata"].get("finalizers") or [])

        await objects.until(released, "the bridge released its finalizer", seconds=60)
        (cp,) = await one_set()
        assert cp["status"]["phase"] == "Succeeded"
        assert cp["status"]["members"] == [member]
    finally:
        await admin.delete(resources.NODES, node)
