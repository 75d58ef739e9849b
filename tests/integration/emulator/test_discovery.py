"""Discovery, as kubectl and kubernetes-asyncio's dynamic client read it."""

from __future__ import annotations

import pytest
from kubernetes_asyncio import client as k8s
from kubernetes_asyncio.dynamic import DynamicClient

from emulator.apiserver import server
from kontinue.kube import api, client, errors, resources
from tests import fixtures


async def test_core_and_group_discovery(kube: api.Api) -> None:
    core = await k8s.CoreApi(kube.api_client).get_api_versions()
    assert core.versions == ["v1"]
    core_resources = {
        r.name for r in (await k8s.CoreV1Api(kube.api_client).get_api_resources()).resources
    }
    assert {
        "pods",
        "pods/status",
        "nodes",
        "namespaces",
        "events",
        "services",
        "secrets",
    } <= core_resources

    groups = await k8s.ApisApi(kube.api_client).get_api_versions()
    served = {g.name: g.preferred_version.group_version for g in groups.groups}
    assert served["batch"] == "batch/v1"
    assert served["scheduling.k8s.io"] == "scheduling.k8s.io/v1"
    assert served["coordination.k8s.io"] == "coordination.k8s.io/v1"
    assert served["admissionregistration.k8s.io"] == "admissionregistration.k8s.io/v1"
    assert served["apiextensions.k8s.io"] == "apiextensions.k8s.io/v1"
    jobs = await k8s.BatchV1Api(kube.api_client).get_api_resources()
    assert {r.name for r in jobs.resources} == {"jobs", "jobs/status"}


async def test_a_crd_posted_to_apiextensions_is_served_and_discovered(kube: api.Api) -> None:
    crd = fixtures.load_one(fixtures.MANIFESTS / "crds" / "kontinue.dev_checkpoints.yaml")
    created = await kube.create(resources.CRDS, crd)
    conditions = {c["type"]: c["status"] for c in created["status"]["conditions"]}
    assert conditions["Established"] == "True"

    dynamic = await DynamicClient(kube.api_client)
    checkpoints = await dynamic.resources.get(
        api_version="kontinue.dev/v1alpha1", kind="Checkpoint"
    )
    assert checkpoints.name == "checkpoints"
    assert checkpoints.namespaced
    listed = await kube.list(resources.CHECKPOINTS, namespace="default")
    assert listed["kind"] == "CheckpointList"

    await kube.delete(resources.CRDS, crd["metadata"]["name"])
    with pytest.raises(errors.NotFound, match="could not find the requested resource"):
        await kube.list(resources.CHECKPOINTS, namespace="default")


async def test_upstream_crds_and_preferred_versions(
    apiserver: server.ApiServer, kube: api.Api
) -> None:
    for path in sorted((fixtures.UPSTREAM / "kueue" / "crds").glob("*.yaml")):
        apiserver.install_crd(fixtures.load_one(path))
    for path in sorted((fixtures.UPSTREAM / "volcano" / "crds").glob("*.yaml")):
        apiserver.install_crd(fixtures.load_one(path))
    group = await k8s.ApisApi(kube.api_client).get_api_versions()
    served = {g.name: g.preferred_version.version for g in group.groups}
    assert served["kueue.x-k8s.io"] == "v1beta2"
    assert served["scheduling.volcano.sh"] == "v1beta1"
    assert served["batch.volcano.sh"] == "v1alpha1"
    queues = await kube.list(resources.VOLCANO_QUEUES)
    assert queues["items"] == []


async def test_unknown_token_is_401(apiserver: server.ApiServer) -> None:
    config = apiserver.kubeconfig()
    config["users"][0]["user"]["token"] = "forged"
    api_client = await client.api_client_from_dict(config)
    try:
        with pytest.raises(errors.ClientError, match="Unauthorized") as caught:
            await api.Api(api_client).list(resources.PODS, namespace="default")
        assert caught.value.status == 401
    finally:
        await api_client.close()


async def test_tls_serving_with_its_own_ca() -> None:
    async with server.ApiServer(tls=True) as secure:
        assert secure.url.startswith("https://127.0.0.1:")
        api_client = await client.api_client_from_dict(secure.kubeconfig())
        try:
            created = await api.Api(api_client).create(
                resources.NAMESPACES, {"metadata": {"name": "over-tls"}}
            )
            assert created["status"] == {"phase": "Active"}
        finally:
            await api_client.close()
