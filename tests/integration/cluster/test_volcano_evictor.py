"""The emulated Volcano evictor against the API emulator: its identity, its writes, and the
upstream trap when its DELETE fails (volcano.md §1.8: the conditions are already persisted, so a
later eviction of the same pod writes nothing and never deletes)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from emulator.apiserver import server
from emulator.volcano import scheduler
from kontinue import keys
from kontinue.kube import resources

Obj = dict[str, Any]


@pytest.fixture
async def api() -> AsyncIterator[server.ApiServer]:
    async with server.ApiServer() as emulated:
        yield emulated


async def running_pod(api: server.ApiServer, name: str) -> Obj:
    admin = api.client("admin")
    pod = await admin.create(
        resources.PODS,
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "namespace": "default"},
            "spec": {
                "schedulerName": "volcano",
                "nodeName": "gpu-a",
                "terminationGracePeriodSeconds": 42,
                "containers": [{"name": "c", "image": "registry.example/c:v1"}],
            },
        },
    )
    pod["status"] = {
        "phase": "Running",
        "conditions": [
            {
                "type": "Ready",
                "status": "True",
                "lastProbeTime": None,
                "lastTransitionTime": "2026-01-01T00:00:00Z",
            }
        ],
    }
    updated: Obj = await admin.replace(resources.PODS, pod, subresource="status")
    return updated


async def test_eviction_writes_conditions_then_deletes_as_the_volcano_scheduler(
    api: server.ApiServer,
) -> None:
    pod = await running_pod(api, "victim")
    refused = api.faults.add(verb="delete", resource="pods", user=keys.VOLCANO_SCHEDULER_USER)
    evictor = scheduler.VolcanoScheduler(api)
    assert await evictor.evict(pod, reason="preempt", group=None) is False
    assert (
        refused.fired == 1
    )  # the DELETE came from system:serviceaccount:volcano-system:volcano-scheduler
    admin = api.client("admin")
    marked = await admin.get(resources.PODS, "victim", namespace="default")
    conditions = {c["type"]: c for c in marked["status"]["conditions"]}
    assert (conditions["Ready"]["status"], conditions["Ready"]["reason"]) == ("False", "Evict")
    assert conditions["Ready"]["message"] == "Pod is evicted, because of preempt"
    target = conditions[keys.POD_CONDITION_DISRUPTION_TARGET]
    assert (target["status"], target["reason"], target["message"]) == (
        "True",
        keys.DISRUPTION_PREEMPTION_BY_SCHEDULER,
        "volcano: preempting to accommodate a higher priority pod",
    )
    assert not marked["metadata"].get("deletionTimestamp")

    # the trap: the same conditions again are "no change", so nothing is written or deleted
    assert await evictor.evict(marked, reason="preempt", group=None) is False
    again = await admin.get(resources.PODS, "victim", namespace="default")
    assert again["metadata"]["resourceVersion"] == marked["metadata"]["resourceVersion"]
    assert not again["metadata"].get("deletionTimestamp")

    other = await running_pod(api, "second")
    assert await evictor.evict(other, reason="reclaim", group=None) is True
    deleting = await admin.get(resources.PODS, "second", namespace="default")
    assert deleting["metadata"]["deletionGracePeriodSeconds"] == 42  # the pod's own grace
    listed = (await admin.list(resources.EVENTS, namespace="default"))["items"]
    events = sorted(listed, key=lambda e: e["eventTime"])
    assert [
        (e["involvedObject"]["name"], e["type"], e["reason"], e["message"]) for e in events
    ] == [
        ("victim", "Warning", "Evict", "Pod is evicted, because of preempt"),
        ("victim", "Warning", "Evict", "Pod is evicted, because of preempt"),
        ("second", "Warning", "Evict", "Pod is evicted, because of reclaim"),
    ]
