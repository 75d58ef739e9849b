"""Fault injection: chosen requests fail with 409/429/500 or hang past the client's timeout."""

from __future__ import annotations

import asyncio

import pytest

from emulator.apiserver import server
from kontinue.kube import api, errors, resources
from tests.integration.emulator.conftest import pod


async def test_conflict_once_then_success(apiserver: server.ApiServer, kube: api.Api) -> None:
    await kube.create(resources.PODS, pod("a"))
    fault = apiserver.faults.add(verb="patch", resource="pods", name="a", status=409)
    with pytest.raises(errors.Conflict):
        await kube.merge_patch(
            resources.PODS, "a", {"metadata": {"labels": {"x": "1"}}}, namespace="default"
        )
    patched = await kube.merge_patch(
        resources.PODS, "a", {"metadata": {"labels": {"x": "1"}}}, namespace="default"
    )
    assert patched["metadata"]["labels"] == {"x": "1"}
    assert fault.fired == 1


async def test_too_many_requests_carries_retry_after(
    apiserver: server.ApiServer, kube: api.Api
) -> None:
    apiserver.faults.add(verb="list", resource="pods", status=429, retry_after=7)
    with pytest.raises(errors.TooManyRequests) as caught:
        await kube.list(resources.PODS, namespace="default")
    assert caught.value.retry_after == 7.0


async def test_server_errors_count_down_and_leave_state_untouched(
    apiserver: server.ApiServer, kube: api.Api
) -> None:
    apiserver.faults.add(verb="create", resource="pods", status=500, count=2)
    for _ in range(2):
        with pytest.raises(errors.ServerError) as caught:
            await kube.create(resources.PODS, pod("a"))
        assert caught.value.status == 500
    assert (await kube.list(resources.PODS, namespace="default"))["items"] == []
    await kube.create(resources.PODS, pod("a"))


async def test_faults_match_by_name_and_user(apiserver: server.ApiServer, kube: api.Api) -> None:
    await kube.create(resources.PODS, pod("a"))
    await kube.create(resources.PODS, pod("b"))
    apiserver.faults.add(verb="get", name="a", user="system:node:node-1", count=None)
    assert (await kube.get(resources.PODS, "a", namespace="default"))["metadata"]["name"] == "a"
    kubelet = apiserver.client("system:node:node-1")
    assert (await kubelet.get(resources.PODS, "b", namespace="default"))["metadata"]["name"] == "b"
    for _ in range(2):
        with pytest.raises(errors.ServerError):
            await kubelet.get(resources.PODS, "a", namespace="default")
    apiserver.faults.clear()
    await kubelet.get(resources.PODS, "a", namespace="default")


async def test_hang_past_the_client_timeout(apiserver: server.ApiServer, kube: api.Api) -> None:
    apiserver.faults.add(verb="get", resource="pods", hang=True, hang_seconds=2)
    await kube.create(resources.PODS, pod("a"))
    loop = asyncio.get_running_loop()
    started = loop.time()
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(kube.get(resources.PODS, "a", namespace="default"), timeout=0.3)
    assert loop.time() - started < 1.5
    # in-process callers see the apiserver's 504 once the hang is over
    apiserver.faults.add(verb="get", resource="pods", hang=True, hang_seconds=0.2)
    with pytest.raises(errors.ServerError) as caught:
        await apiserver.client().get(resources.PODS, "a", namespace="default")
    assert caught.value.status == 504


async def test_watch_faults(apiserver: server.ApiServer, kube: api.Api) -> None:
    apiserver.faults.add(verb="watch", resource="pods", status=500)
    with pytest.raises(errors.ServerError):
        async for _ in kube.watch(resources.PODS, namespace="default"):
            pass
