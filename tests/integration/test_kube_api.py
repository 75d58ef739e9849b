"""The Kubernetes access layer through the real kubernetes-asyncio client over real HTTP.

A small recording aiohttp server stands in for the apiserver: it answers with scripted statuses
and keeps every request, so the tests can check what went on the wire (method, path, query,
Content-Type, body) and how each failure is mapped.
"""

from __future__ import annotations

import asyncio
import datetime
import inspect
import json
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from kontinue.kube import api, client, errors, resources

Reply = Callable[[web.Request], web.StreamResponse]


class Recorder:
    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        self.reply: Callable[[web.Request, bytes], Any] = lambda request, body: web.json_response(
            {"kind": "Pod", "metadata": {"name": "p"}}
        )

    async def handle(self, request: web.Request) -> web.StreamResponse:
        body = await request.read()
        self.requests.append(
            {
                "method": request.method,
                "path": request.path,
                "query": dict(request.query),
                "content_type": request.headers.get("Content-Type"),
                "body": json.loads(body) if body else None,
            }
        )
        result: Any = self.reply(request, body)
        if inspect.isawaitable(result):
            result = await result
        assert isinstance(result, web.StreamResponse)
        return result


@pytest.fixture
async def recorder() -> AsyncIterator[tuple[Recorder, api.Api]]:
    rec = Recorder()
    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", rec.handle)
    server = TestServer(app, host="127.0.0.1")
    await server.start_server()
    kubeconfig = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "t", "cluster": {"server": str(server.make_url(""))}}],
        "users": [{"name": "t", "user": {"token": "secret-token"}}],
        "contexts": [{"name": "t", "context": {"cluster": "t", "user": "t"}}],
        "current-context": "t",
    }
    api_client = await client.api_client_from_dict(kubeconfig)
    try:
        yield rec, api.Api(api_client, field_manager="kontinue-test")
    finally:
        await api_client.close()
        await server.close()


def _status(code: int, reason: str, message: str) -> web.Response:
    body = {
        "kind": "Status",
        "apiVersion": "v1",
        "status": "Failure",
        "code": code,
        "reason": reason,
        "message": message,
    }
    return web.json_response(body, status=code)


async def test_merge_patch_on_a_custom_object_names_its_content_type(
    recorder: tuple[Recorder, api.Api],
) -> None:
    rec, kube = recorder
    await kube.merge_patch(
        resources.CHECKPOINTS,
        "c1",
        {"status": {"phase": "Succeeded"}},
        namespace="ns",
        subresource="status",
    )
    (sent,) = rec.requests
    assert sent["method"] == "PATCH"
    assert sent["path"] == "/apis/kontinue.dev/v1alpha1/namespaces/ns/checkpoints/c1/status"
    assert sent["content_type"] == "application/merge-patch+json"
    assert sent["body"] == {"status": {"phase": "Succeeded"}}


async def test_json_patch_and_server_side_apply_content_types(
    recorder: tuple[Recorder, api.Api],
) -> None:
    rec, kube = recorder
    await kube.json_patch(
        resources.PODS, "p", [{"op": "remove", "path": "/metadata/finalizers/0"}], namespace="ns"
    )
    await kube.apply(
        resources.WORKLOADS,
        {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "Workload",
            "metadata": {"name": "w", "namespace": "ns"},
            "status": {"admissionChecks": []},
        },
        subresource="status",
    )
    json_patch, apply = rec.requests
    assert json_patch["content_type"] == "application/json-patch+json"
    assert json_patch["path"] == "/api/v1/namespaces/ns/pods/p"
    assert apply["content_type"] == "application/apply-patch+yaml"
    assert apply["path"] == "/apis/kueue.x-k8s.io/v1beta2/namespaces/ns/workloads/w/status"
    assert apply["query"] == {"fieldManager": "kontinue-test", "force": "true"}
    assert apply["body"]["status"] == {"admissionChecks": []}


async def test_list_sends_selectors_and_returns_the_raw_list(
    recorder: tuple[Recorder, api.Api],
) -> None:
    rec, kube = recorder
    rec.reply = lambda r, b: web.json_response(
        {
            "kind": "PodList",
            "metadata": {"resourceVersion": "42"},
            "items": [{"metadata": {"name": "a"}}],
        }
    )
    result = await kube.list(
        resources.PODS,
        namespace="ns",
        label_selector={"b": "2", "a": "1"},
        field_selector="spec.nodeName=n1",
    )
    assert result["metadata"]["resourceVersion"] == "42"
    assert rec.requests[0]["query"] == {
        "labelSelector": "a=1,b=2",
        "fieldSelector": "spec.nodeName=n1",
    }
    assert rec.requests[0]["path"] == "/api/v1/namespaces/ns/pods"


ERROR_CASES = [
    (404, "NotFound", errors.NotFound),
    (409, "AlreadyExists", errors.Conflict),
    (409, "Conflict", errors.Conflict),
    (410, "Expired", errors.Gone),
    (403, "Forbidden", errors.Forbidden),
    (422, "Invalid", errors.Invalid),
    (429, "TooManyRequests", errors.TooManyRequests),
    (500, "InternalError", errors.ServerError),
    (503, "ServiceUnavailable", errors.ServerError),
    (400, "BadRequest", errors.ClientError),
]


@pytest.mark.parametrize(("code", "reason", "expected"), ERROR_CASES)
async def test_api_failures_map_to_our_errors(
    recorder: tuple[Recorder, api.Api], code: int, reason: str, expected: type[errors.ApiError]
) -> None:
    rec, kube = recorder
    message = f'Pod "p" is invalid: spec.containers[0].name: {reason}'
    rec.reply = lambda r, b: _status(code, reason, message)
    with pytest.raises(expected) as caught:
        await kube.get(resources.PODS, "p", namespace="ns")
    assert type(caught.value) is expected
    assert caught.value.status == code
    assert str(caught.value) == message
    assert caught.value.reason == reason


async def test_already_exists_is_told_apart_from_a_stale_write(
    recorder: tuple[Recorder, api.Api],
) -> None:
    rec, kube = recorder
    rec.reply = lambda r, b: _status(409, "AlreadyExists", 'checkpoints "c" already exists')
    with pytest.raises(errors.Conflict) as caught:
        await kube.create(resources.CHECKPOINTS, {"metadata": {"name": "c", "namespace": "ns"}})
    assert caught.value.already_exists


async def test_too_many_requests_carries_retry_after(recorder: tuple[Recorder, api.Api]) -> None:
    rec, kube = recorder

    def reply(request: web.Request, body: bytes) -> web.Response:
        response = _status(429, "TooManyRequests", "slow down")
        response.headers["Retry-After"] = "3"
        return response

    rec.reply = reply
    with pytest.raises(errors.TooManyRequests) as caught:
        await kube.get(resources.PODS, "p", namespace="ns")
    assert caught.value.retry_after == 3.0


async def test_a_non_status_error_body_is_trimmed(recorder: tuple[Recorder, api.Api]) -> None:
    rec, kube = recorder
    rec.reply = lambda r, b: web.Response(status=502, text="x" * 10_000)
    with pytest.raises(errors.ServerError) as caught:
        await kube.get(resources.PODS, "p", namespace="ns")
    assert len(str(caught.value)) == 256


async def test_an_error_body_that_is_not_utf8_still_maps_to_our_error(
    recorder: tuple[Recorder, api.Api],
) -> None:
    """A proxy's error page in another encoding: still the status's error (not a
    UnicodeDecodeError that no caller catches), its text kept with replacement characters."""
    rec, kube = recorder
    rec.reply = lambda r, b: web.Response(status=503, body=b"Service \xe9puis\xe9")
    with pytest.raises(errors.ServerError) as caught:
        await kube.get(resources.PODS, "p", namespace="ns")
    assert caught.value.status == 503
    assert str(caught.value) == "Service \ufffdpuis\ufffd"


async def test_delete_sends_delete_options(recorder: tuple[Recorder, api.Api]) -> None:
    rec, kube = recorder
    await kube.delete(
        resources.JOBS,
        "j",
        namespace="ns",
        propagation_policy="Background",
        grace_period_seconds=0,
        preconditions={"uid": "u1"},
    )
    (sent,) = rec.requests
    assert sent["method"] == "DELETE"
    assert sent["body"] == {
        "kind": "DeleteOptions",
        "apiVersion": "v1",
        "gracePeriodSeconds": 0,
        "propagationPolicy": "Background",
        "preconditions": {"uid": "u1"},
    }


async def test_watch_yields_events_and_maps_an_expired_resource_version_to_gone(
    recorder: tuple[Recorder, api.Api],
) -> None:
    rec, kube = recorder

    async def reply(request: web.Request, body: bytes) -> web.StreamResponse:
        response = web.StreamResponse()
        await response.prepare(request)
        for event in (
            {"type": "ADDED", "object": {"metadata": {"name": "a", "resourceVersion": "5"}}},
            {"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "6"}}},
            {
                "type": "ERROR",
                "object": {
                    "kind": "Status",
                    "code": 410,
                    "reason": "Expired",
                    "message": "too old resource version: 1 (6)",
                },
            },
        ):
            await response.write(json.dumps(event).encode() + b"\n")
        await response.write_eof()
        return response

    rec.reply = reply
    seen = []

    async def consume() -> None:
        async for event in kube.watch(resources.PODS, namespace="ns", resource_version="1"):
            seen.append(event["type"])

    with pytest.raises(errors.Gone, match="too old resource version"):
        await consume()
    assert seen == ["ADDED", "BOOKMARK"]
    assert rec.requests[0]["query"] == {
        "watch": "true",
        "resourceVersion": "1",
        "allowWatchBookmarks": "true",
    }


async def test_the_bearer_token_is_sent(recorder: tuple[Recorder, api.Api]) -> None:
    rec, kube = recorder
    seen: list[str | None] = []

    def reply(request: web.Request, body: bytes) -> web.Response:
        seen.append(request.headers.get("Authorization"))
        return web.json_response({})

    rec.reply = reply
    await kube.get(resources.NODES, "n1")
    assert seen == ["Bearer secret-token"]
    assert rec.requests[0]["path"] == "/api/v1/nodes/n1"


async def test_requests_take_no_thread_pool_hop_and_the_proxy_env_is_read_once(
    recorder: tuple[Recorder, api.Api], monkeypatch: pytest.MonkeyPatch
) -> None:
    """kubernetes-asyncio's session trusts the environment, which costs aiohttp two thread-pool
    hops per request (netrc, proxy env): kontinue/kube/client.py reads the proxy env once."""
    rec, kube = recorder
    loop = asyncio.get_running_loop()
    hops: list[Any] = []
    real = loop.run_in_executor

    def counted(executor: Any, func: Any, *args: Any) -> Any:
        hops.append(func)
        return real(executor, func, *args)

    monkeypatch.setattr(loop, "run_in_executor", counted)
    for _ in range(3):
        await kube.get(resources.PODS, "p", namespace="ns")
    assert len(rec.requests) == 3
    assert hops == []

    monkeypatch.setenv("HTTPS_PROXY", "http://proxy.example:3128")
    monkeypatch.setenv("HTTP_PROXY", "http://proxy.example:3128")
    monkeypatch.delenv("NO_PROXY", raising=False)
    monkeypatch.delenv("no_proxy", raising=False)
    kubeconfig = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "t", "cluster": {"server": "https://api.example:6443"}}],
        "users": [{"name": "t", "user": {"token": "t"}}],
        "contexts": [{"name": "t", "context": {"cluster": "t", "user": "t"}}],
        "current-context": "t",
    }
    proxied = await client.api_client_from_dict(kubeconfig)
    try:
        assert proxied.rest_client.proxy == "http://proxy.example:3128"
        assert not proxied.rest_client.pool_manager.trust_env
    finally:
        await proxied.close()
    monkeypatch.setenv("NO_PROXY", "api.example")
    bypassed = await client.api_client_from_dict(kubeconfig)
    try:
        assert not bypassed.rest_client.proxy
    finally:
        await bypassed.close()


async def test_a_body_goes_out_as_kubernetes_asyncio_would_send_it_and_text_comes_back_as_text(
    recorder: tuple[Recorder, api.Api],
) -> None:
    """The request path skips ``call_api``'s body walk (kontinue/kube/api.py): a body with a
    date, non-ASCII text and nested lists is still sent as ``sanitize_for_serialization`` +
    ``json.dumps`` sent it, the User-Agent is the client's, and a 2xx answer that is not JSON
    is returned as its text, as ``ApiClient.deserialize`` returns it."""
    rec, kube = recorder
    when = datetime.datetime(2026, 12, 3, 10, 0, 0, tzinfo=datetime.UTC)
    body = {
        "metadata": {"name": "p", "namespace": "ns", "annotations": {"note": "Grüße"}},
        "spec": {"at": when, "list": [[1, 2], {"a": None}]},
    }
    agents: list[str] = []

    def reply(request: web.Request, raw: bytes) -> web.Response:
        agents.append(request.headers.get("User-Agent", ""))
        if request.method == "GET":
            return web.Response(text="plain words", content_type="text/plain")
        return web.json_response({"kind": "Pod", "metadata": {"name": "p"}}, status=201)

    rec.reply = reply
    created = await kube.create(resources.PODS, body)
    assert created == {"kind": "Pod", "metadata": {"name": "p"}}
    (sent,) = rec.requests
    assert sent["body"] == {
        "metadata": {"name": "p", "namespace": "ns", "annotations": {"note": "Grüße"}},
        "spec": {"at": "2026-12-03T10:00:00+00:00", "list": [[1, 2], {"a": None}]},
    }
    assert await kube.get(resources.PODS, "p", namespace="ns") == "plain words"  # type: ignore[comparison-overlap]
    assert agents[0] == kube.api_client.default_headers["User-Agent"] == agents[1]
