"""The in-process client: same pipeline, plain dicts, kontinue errors (for emulated controllers)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from emulator.apiserver import server
from kontinue.kube import api, errors, resources
from queue_bridge import recording
from tests.integration.emulator.conftest import pod


async def test_crud_and_errors(apiserver: server.ApiServer) -> None:
    kube = apiserver.client("system:serviceaccount:kube-system:job-controller")
    created = await kube.create(resources.PODS, pod("a"))
    assert created["metadata"]["resourceVersion"]
    with pytest.raises(errors.Conflict) as exists:
        await kube.create(resources.PODS, pod("a"))
    assert exists.value.already_exists
    got = await kube.get(resources.PODS, "a", namespace="default")
    got["metadata"]["labels"] = {"x": "1"}
    replaced = await kube.replace(resources.PODS, got)
    assert replaced["metadata"]["labels"] == {"x": "1"}
    with pytest.raises(errors.Conflict):
        await kube.replace(resources.PODS, got)  # got's resourceVersion is stale now
    patched = await kube.patch(
        resources.PODS,
        "a",
        {"status": {"phase": "Running"}},
        content_type=api.STRATEGIC_MERGE_PATCH,
        namespace="default",
        subresource="status",
    )
    assert patched["status"]["phase"] == "Running"
    listed = await kube.list(resources.PODS, namespace="default", label_selector={"x": "1"})
    assert [p["metadata"]["name"] for p in listed["items"]] == ["a"]
    # returned objects are copies: mutating one changes nothing stored
    listed["items"][0]["metadata"]["labels"]["x"] = "changed"
    assert (await kube.get(resources.PODS, "a", namespace="default"))["metadata"]["labels"] == {
        "x": "1"
    }
    with pytest.raises(errors.Invalid):
        await kube.create(resources.PODS, {"metadata": {"namespace": "default"}, "spec": {}})
    with pytest.raises(errors.NotFound):
        await kube.delete(resources.PODS, "missing", namespace="default")


async def test_an_emulated_kubelet_observes_graceful_deletion(
    apiserver: server.ApiServer, kube: api.Api
) -> None:
    """The kubelet watches its node's pods, sees deletionTimestamp, ends the pod, deletes it."""
    kubelet = apiserver.client("system:node:node-1")
    finished: list[str] = []

    async def kubelet_loop() -> None:
        async for event in kubelet.watch(
            resources.PODS, field_selector="spec.nodeName=node-1", allow_bookmarks=False
        ):
            obj: dict[str, Any] = event["object"]
            meta = obj["metadata"]
            if event["type"] == "DELETED":
                finished.append(meta["name"])
                return
            if meta.get("deletionTimestamp") and obj["status"].get("phase") != "Failed":
                await kubelet.patch(
                    resources.PODS,
                    meta["name"],
                    {"status": {"phase": "Failed"}},
                    content_type=api.STRATEGIC_MERGE_PATCH,
                    namespace=meta["namespace"],
                    subresource="status",
                )
                await kubelet.delete(
                    resources.PODS,
                    meta["name"],
                    namespace=meta["namespace"],
                    grace_period_seconds=0,
                    preconditions={"uid": meta["uid"]},
                )

    task = asyncio.create_task(kubelet_loop())
    await kube.create(resources.PODS, pod("victim"))
    await kube.delete(resources.PODS, "victim", namespace="default")
    await asyncio.wait_for(task, timeout=5)
    assert finished == ["victim"]


async def test_watch_errors_raise_like_the_product_api(apiserver: server.ApiServer) -> None:
    kube = apiserver.client()
    first = await kube.create(resources.PODS, pod("a"))
    await kube.create(resources.PODS, pod("b"))
    apiserver.compact()
    with pytest.raises(errors.Gone):
        async for _ in kube.watch(
            resources.PODS,
            namespace="default",
            resource_version=first["metadata"]["resourceVersion"],
        ):
            pass

    started = asyncio.Event()

    async def watch() -> None:
        async for _ in kube.watch(resources.PODS, namespace="default"):
            started.set()

    task = asyncio.create_task(watch())
    await asyncio.wait_for(started.wait(), timeout=5)
    apiserver.drop_watches()
    with pytest.raises(errors.ServerError, match="dropped"):
        await asyncio.wait_for(task, timeout=5)


async def test_watch_timeout_ends_the_iteration(apiserver: server.ApiServer) -> None:
    kube = apiserver.client()
    events = [
        e async for e in kube.watch(resources.PODS, timeout_seconds=0.3, allow_bookmarks=False)
    ]
    assert events == []


async def test_priority_class_admission(apiserver: server.ApiServer) -> None:
    kube = apiserver.client()
    body = pod("a")
    body["spec"]["priorityClassName"] = "high"
    with pytest.raises(errors.Forbidden, match="no PriorityClass with name high was found"):
        await kube.create(resources.PODS, body)
    await kube.create(
        resources.PRIORITY_CLASSES,
        {"metadata": {"name": "high"}, "value": 1000000, "preemptionPolicy": "Never"},
    )
    created = await kube.create(resources.PODS, body)
    assert created["spec"]["priority"] == 1000000
    assert created["spec"]["preemptionPolicy"] == "Never"


async def test_eviction_through_the_in_process_client(apiserver: server.ApiServer) -> None:
    kube = apiserver.client()
    await kube.create(resources.PODS, pod("a"))
    await kube.evict(resources.PODS, "a", namespace="default", grace_period_seconds=5)
    evicted = await kube.get(resources.PODS, "a", namespace="default")
    assert evicted["metadata"]["deletionGracePeriodSeconds"] == 5
    assert [c["type"] for c in evicted["status"]["conditions"]] == ["DisruptionTarget"]
    await kube.create(resources.PODS, pod("unbound", node=None))
    await kube.evict(resources.PODS, "unbound", namespace="default")
    with pytest.raises(errors.NotFound):
        await kube.get(resources.PODS, "unbound", namespace="default")


async def test_binding_assigns_the_node_once(apiserver: server.ApiServer, kube: api.Api) -> None:
    scheduler = apiserver.client("system:kube-scheduler")
    await kube.create(resources.PODS, pod("a", node=None))
    await kube.api_client.call_api(
        "/api/v1/namespaces/default/pods/a/binding",
        "POST",
        header_params={"Content-Type": "application/json", "Accept": "application/json"},
        body={
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": {"name": "a"},
            "target": {"apiVersion": "v1", "kind": "Node", "name": "node-1"},
        },
        response_types_map={201: "object"},
        auth_settings=["BearerToken"],
        _return_http_data_only=True,
    )
    bound = await kube.get(resources.PODS, "a", namespace="default")
    assert bound["spec"]["nodeName"] == "node-1"
    assert [(c["type"], c["status"]) for c in bound["status"]["conditions"]] == [
        ("PodScheduled", "True")
    ]
    with pytest.raises(errors.Conflict, match='already assigned to node "node-1"'):
        await scheduler.bind(resources.PODS, "a", node="node-2", namespace="default")


@pytest.mark.parametrize("which", ["http", "in-process"])
async def test_one_recorder_runs_on_either_client(
    apiserver: server.ApiServer, kube: api.Api, which: str
) -> None:
    """Both clients satisfy kontinue.kube.interface.Client: the bridge's Event recorder (typed
    against the interface) records and aggregates a repeated Event through either."""
    client = kube if which == "http" else apiserver.client()
    await client.create(resources.NAMESPACES, {"metadata": {"name": "research"}})
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "scavenger-0", "namespace": "research", "uid": "u-1"},
    }
    recorder = recording.Recorder(client, instance="bridge-a")
    for _ in range(2):
        await recorder.record(job, reason="CheckpointStarted", message="2 members")
    listed = await client.list(resources.EVENTS, namespace="research")
    assert [(e["reason"], e["count"]) for e in listed["items"]] == [("CheckpointStarted", 2)]
