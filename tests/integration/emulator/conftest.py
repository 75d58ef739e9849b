"""Fixtures: one emulated apiserver per test, reached through the real kubernetes-asyncio client."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from emulator.apiserver import server
from kontinue.kube import api, client
from tests.waiting import eventually as eventually  # re-exported for the tests here


@pytest.fixture
async def apiserver() -> AsyncIterator[server.ApiServer]:
    async with server.ApiServer(bookmark_interval=0.2, history=50) as emulated:
        yield emulated


@pytest.fixture
async def kube(apiserver: server.ApiServer) -> AsyncIterator[api.Api]:
    """``kontinue.kube.api.Api`` over real HTTP as ``admin``."""
    api_client = await client.api_client_from_dict(apiserver.kubeconfig("admin"))
    try:
        yield api.Api(api_client, field_manager="test")
    finally:
        await api_client.close()


def pod(
    name: str, *, namespace: str = "default", node: str | None = "node-1", **meta: Any
) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": [{"name": "main", "image": "registry.example/app:v1"}]}
    if node:
        spec["nodeName"] = node
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, **meta},
        "spec": spec,
    }
