"""Watch over HTTP: resume from a resourceVersion, bookmarks, 410, timeouts, the drop switch."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from kubernetes_asyncio import client as k8s
from kubernetes_asyncio import watch as k8s_watch

from emulator.apiserver import server
from kontinue.kube import api, errors, resources
from tests.integration.emulator.conftest import pod
from tests.waiting import eventually


async def collect(
    kube: api.Api,
    *,
    count: int,
    types: tuple[str, ...] = ("ADDED", "MODIFIED", "DELETED"),
    **kwargs: Any,
) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = []

    async def run() -> None:
        async for event in kube.watch(resources.PODS, namespace="default", **kwargs):
            if event["type"] in types:
                events.append(event)
                if len(events) == count:
                    return

    await asyncio.wait_for(run(), timeout=10)
    return events


async def test_watch_from_a_list_resource_version_sees_every_later_change(kube: api.Api) -> None:
    await kube.create(resources.PODS, pod("before"))
    listed = await kube.list(resources.PODS, namespace="default")
    rv = listed["metadata"]["resourceVersion"]
    await kube.create(resources.PODS, pod("a"))
    await kube.merge_patch(
        resources.PODS, "a", {"metadata": {"labels": {"x": "1"}}}, namespace="default"
    )
    await kube.delete(resources.PODS, "a", namespace="default", grace_period_seconds=0)

    events = await collect(kube, count=3, resource_version=rv)
    assert [(e["type"], e["object"]["metadata"]["name"]) for e in events] == [
        ("ADDED", "a"),
        ("MODIFIED", "a"),
        ("DELETED", "a"),
    ]
    versions = [int(e["object"]["metadata"]["resourceVersion"]) for e in events]
    assert versions == sorted(versions)
    assert versions[0] > int(rv)


async def test_watch_without_resource_version_starts_with_the_current_state(kube: api.Api) -> None:
    await kube.create(resources.PODS, pod("a"))
    await kube.create(resources.PODS, pod("b"))
    events = await collect(kube, count=2)
    assert sorted(e["object"]["metadata"]["name"] for e in events) == ["a", "b"]
    assert {e["type"] for e in events} == {"ADDED"}


async def test_bookmarks_carry_the_current_resource_version(kube: api.Api) -> None:
    created = await kube.create(resources.PODS, pod("a"))
    (bookmark,) = await collect(
        kube, count=1, types=("BOOKMARK",), resource_version=created["metadata"]["resourceVersion"]
    )
    assert bookmark["object"]["metadata"] == {
        "resourceVersion": created["metadata"]["resourceVersion"]
    }
    assert bookmark["object"]["kind"] == "Pod"


async def test_no_bookmarks_unless_asked(kube: api.Api) -> None:
    created = await kube.create(resources.PODS, pod("a"))
    seen = [
        event["type"]
        async for event in kube.watch(
            resources.PODS,
            namespace="default",
            resource_version=created["metadata"]["resourceVersion"],
            allow_bookmarks=False,
            timeout_seconds=1,
        )
    ]
    assert seen == []  # and the stream ended by itself at timeoutSeconds


async def test_too_old_resource_version_is_410_then_relist_and_resume(
    apiserver: server.ApiServer, kube: api.Api
) -> None:
    first = await kube.create(resources.PODS, pod("a"))
    await kube.create(resources.PODS, pod("b"))
    apiserver.compact()
    with pytest.raises(errors.Gone, match="too old resource version"):
        async for _ in kube.watch(
            resources.PODS,
            namespace="default",
            resource_version=first["metadata"]["resourceVersion"],
        ):
            pass
    listed = await kube.list(resources.PODS, namespace="default")
    assert [p["metadata"]["name"] for p in listed["items"]] == ["a", "b"]
    await kube.create(resources.PODS, pod("c"))
    (event,) = await collect(kube, count=1, resource_version=listed["metadata"]["resourceVersion"])
    assert event["object"]["metadata"]["name"] == "c"


async def test_history_is_bounded(apiserver: server.ApiServer, kube: api.Api) -> None:
    first = await kube.create(resources.PODS, pod("a"))
    for i in range(60):  # the fixture keeps 50 events
        await kube.merge_patch(
            resources.PODS, "a", {"metadata": {"labels": {"i": str(i)}}}, namespace="default"
        )
    with pytest.raises(errors.Gone):
        async for _ in kube.watch(
            resources.PODS,
            namespace="default",
            resource_version=first["metadata"]["resourceVersion"],
        ):
            pass


async def test_drop_switch_cuts_open_watches(apiserver: server.ApiServer, kube: api.Api) -> None:
    created = await kube.create(resources.PODS, pod("a"))
    started = asyncio.Event()

    async def watch() -> None:
        async for event in kube.watch(
            resources.PODS,
            namespace="default",
            resource_version=created["metadata"]["resourceVersion"],
        ):
            if event["type"] == "BOOKMARK":
                started.set()

    task = asyncio.create_task(watch())
    await asyncio.wait_for(started.wait(), timeout=5)
    apiserver.drop_watches()
    with pytest.raises(errors.ServerError, match="dropped"):
        await asyncio.wait_for(task, timeout=5)
    # the server keeps serving new watches afterwards
    await kube.create(resources.PODS, pod("b"))
    (event,) = await collect(kube, count=1, resource_version=created["metadata"]["resourceVersion"])
    assert event["object"]["metadata"]["name"] == "b"


async def test_kubernetes_asyncio_watch_class(kube: api.Api) -> None:
    """Its Watch sends ``watch=True``; the generated list call streams typed objects."""
    created = await kube.create(resources.PODS, pod("a"))
    core = k8s.CoreV1Api(kube.api_client)
    stream = k8s_watch.Watch()
    await kube.merge_patch(
        resources.PODS, "a", {"metadata": {"labels": {"x": "1"}}}, namespace="default"
    )
    seen = []
    async with stream:
        async for event in stream.stream(
            core.list_namespaced_pod,
            namespace="default",
            resource_version=created["metadata"]["resourceVersion"],
            timeout_seconds=5,
        ):
            seen.append((event["type"], event["object"].metadata.labels))
            stream.stop()
    assert seen == [("MODIFIED", {"x": "1"})]


async def test_selectors_on_watch_turn_leaving_into_deleted(kube: api.Api) -> None:
    created = await kube.create(resources.PODS, pod("a", labels={"team": "a"}))
    rv = created["metadata"]["resourceVersion"]
    await kube.merge_patch(
        resources.PODS, "a", {"metadata": {"labels": {"team": "b"}}}, namespace="default"
    )
    await kube.merge_patch(
        resources.PODS, "a", {"metadata": {"labels": {"team": "a"}}}, namespace="default"
    )
    await kube.create(resources.PODS, pod("other", labels={"team": "b"}))
    events = await collect(kube, count=2, resource_version=rv, label_selector="team=a")
    assert [e["type"] for e in events] == ["DELETED", "ADDED"]


async def test_field_selector_on_watch(kube: api.Api) -> None:
    created = await kube.create(resources.PODS, pod("a", node="n1"))
    await kube.create(resources.PODS, pod("b", node="n2"))
    await kube.patch(
        resources.PODS,
        "b",
        {"status": {"phase": "Running"}},
        content_type=api.MERGE_PATCH,
        namespace="default",
        subresource="status",
    )
    events = await collect(
        kube,
        count=2,
        resource_version=created["metadata"]["resourceVersion"],
        field_selector="spec.nodeName=n2",
    )
    assert [(e["type"], e["object"]["metadata"]["name"]) for e in events] == [
        ("ADDED", "b"),
        ("MODIFIED", "b"),
    ]


async def test_a_watch_closed_by_the_client_is_released(
    apiserver: server.ApiServer, kube: api.Api
) -> None:
    created = await kube.create(resources.PODS, pod("a"))
    stream = kube.watch(
        resources.PODS, namespace="default", resource_version=created["metadata"]["resourceVersion"]
    )
    async for event in stream:
        assert event["type"] == "BOOKMARK"
        break
    await stream.aclose()  # type: ignore[attr-defined]
    assert apiserver.registry.store.watchers  # the server notices only when the socket closes

    async def released() -> bool:
        return not apiserver.registry.store.watchers

    await eventually(released)


async def test_a_due_bookmark_never_stalls_queued_events(kube: api.Api) -> None:
    """Regression: with a bookmark due and events queued, every event still arrives."""
    async with server.ApiServer(bookmark_interval=0.001) as busy:
        admin = busy.client()
        start = await admin.create(resources.PODS, pod("a"))
        for i in range(30):
            await admin.patch(
                resources.PODS,
                "a",
                {"metadata": {"labels": {"i": str(i)}}},
                content_type=api.MERGE_PATCH,
                namespace="default",
            )
        seen = 0

        async def run() -> None:
            nonlocal seen
            async for event in admin.watch(
                resources.PODS,
                namespace="default",
                resource_version=start["metadata"]["resourceVersion"],
            ):
                if event["type"] == "MODIFIED":
                    seen += 1
                    await asyncio.sleep(0.002)  # let bookmarks fall due between events
                    if seen == 30:
                        return

        await asyncio.wait_for(run(), timeout=10)
        assert seen == 30
