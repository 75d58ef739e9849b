"""The webhook's claim cache (webhook/caches.py) against the API emulator over real HTTP: not
known until its first list, then which claims exist by namespace and name, following creates
and deletes; each claim kept as its name only."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from emulator.apiserver import server
from kontinue.kube import api, cacheset, client, resources, watching
from tests import fixtures
from tests.waiting import eventually
from webhook import caches

FAST = watching.Backoff(initial=0.01, factor=2.0, cap=0.1, jitter=0.5)


def _claim(namespace: str, name: str) -> dict[str, object]:
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {"team": "a"},
            "annotations": {"note": "x" * 2000},
        },
        "spec": {"accessModes": ["ReadWriteMany"], "resources": {"requests": {"storage": "1Gi"}}},
    }


@pytest.fixture
async def emulated() -> AsyncIterator[server.ApiServer]:
    async with server.ApiServer(bookmark_interval=0.2) as running:
        for path in sorted((fixtures.MANIFESTS / "crds").glob("kontinue.dev_*.yaml")):
            running.install_crd(fixtures.load_one(path))
        for namespace in ("team-a", "team-b"):
            await running.client().create(
                resources.NAMESPACES,
                {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}},
            )
        yield running


async def test_claims_are_unknown_until_listed_then_followed_by_name(
    emulated: server.ApiServer,
) -> None:
    admin = emulated.client()
    await admin.create(resources.PVCS, _claim("team-a", "kontinue"), namespace="team-a")
    api_client = await client.api_client_from_dict(emulated.kubeconfig("admin"))
    try:
        cluster = caches.Caches(
            api.Api(api_client, field_manager="test"),
            queue_systems=(),
            options=cacheset.CacheOptions(backoff=FAST),
        )
        assert cluster.claim_exists("team-a", "kontinue") is None  # not listed yet
        async with cluster.running():
            await asyncio.wait_for(cluster.wait_synced(), 10)
            assert cluster.claim_exists("team-a", "kontinue") is True
            assert cluster.claim_exists("team-b", "kontinue") is False
            assert cluster.claim_exists("team-a", "other") is False
            # kept as its name: no spec, labels or annotations in what the cache holds
            (held,) = cluster.claims.items()
            assert held.model_dump(by_alias=True, exclude_none=True) == {
                "metadata": {"name": "kontinue", "namespace": "team-a"}
            }

            await admin.create(resources.PVCS, _claim("team-b", "kontinue"), namespace="team-b")
            await eventually(lambda: cluster.claim_exists("team-b", "kontinue"), what="ADDED")
            await admin.delete(resources.PVCS, "kontinue", namespace="team-a")
            await eventually(
                lambda: cluster.claim_exists("team-a", "kontinue") is False, what="DELETED"
            )
    finally:
        await api_client.close()
