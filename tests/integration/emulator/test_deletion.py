"""Graceful deletion, finalizers and garbage collection, over HTTP."""

from __future__ import annotations

from typing import Any

import pytest

from emulator import owners
from emulator.apiserver import deletion, kinds, server
from kontinue.kube import api, errors, resources
from tests.integration.emulator.conftest import pod
from tests.waiting import eventually


async def exists(kube: api.Api, resource: resources.Resource, name: str) -> bool:
    try:
        await kube.get(resource, name, namespace="default")
    except errors.NotFound:
        return False
    return True


async def test_pod_deletion_is_graceful_until_the_kubelet_deletes_with_grace_zero(
    apiserver: server.ApiServer, kube: api.Api
) -> None:
    body = pod("p")
    body["spec"]["terminationGracePeriodSeconds"] = 120
    created = await kube.create(resources.PODS, body)
    deleting = await kube.delete(resources.PODS, "p", namespace="default")
    meta = deleting["metadata"]
    assert meta["deletionGracePeriodSeconds"] == 120
    assert meta["deletionTimestamp"] > created["metadata"]["creationTimestamp"]
    assert meta["generation"] == 2
    assert await exists(kube, resources.PODS, "p")

    # a shorter grace period shortens; a longer one changes nothing
    shorter = await kube.delete(resources.PODS, "p", namespace="default", grace_period_seconds=10)
    assert shorter["metadata"]["deletionGracePeriodSeconds"] == 10
    again = await kube.delete(resources.PODS, "p", namespace="default", grace_period_seconds=60)
    assert again["metadata"]["deletionGracePeriodSeconds"] == 10

    kubelet = apiserver.client("system:node:node-1")
    with pytest.raises(errors.Conflict, match="Precondition failed: UID"):
        await kubelet.delete(
            resources.PODS,
            "p",
            namespace="default",
            grace_period_seconds=0,
            preconditions={"uid": "x"},
        )
    await kubelet.delete(
        resources.PODS,
        "p",
        namespace="default",
        grace_period_seconds=0,
        preconditions={"uid": created["metadata"]["uid"]},
    )
    assert not await exists(kube, resources.PODS, "p")


async def test_grace_defaults_to_the_pod_spec_and_unscheduled_pods_go_at_once(
    kube: api.Api,
) -> None:
    await kube.create(resources.PODS, pod("scheduled"))
    deleting = await kube.delete(resources.PODS, "scheduled", namespace="default")
    assert deleting["metadata"]["deletionGracePeriodSeconds"] == 30  # the defaulted spec value
    await kube.create(resources.PODS, pod("pending", node=None))
    await kube.delete(resources.PODS, "pending", namespace="default")
    assert not await exists(kube, resources.PODS, "pending")


async def test_finalizers_hold_the_object_until_removed(kube: api.Api) -> None:
    body = pod("p", finalizers=["kontinue.dev/checkpoint"])
    body["spec"]["terminationGracePeriodSeconds"] = 60
    await kube.create(resources.PODS, body)
    await kube.delete(resources.PODS, "p", namespace="default")
    final = await kube.delete(resources.PODS, "p", namespace="default", grace_period_seconds=0)
    assert final["metadata"]["deletionGracePeriodSeconds"] == 0
    assert await exists(kube, resources.PODS, "p")  # the finalizer holds it

    await kube.json_patch(
        resources.PODS, "p", [{"op": "remove", "path": "/metadata/finalizers"}], namespace="default"
    )
    assert not await exists(kube, resources.PODS, "p")


async def test_removing_finalizers_during_the_grace_period_does_not_delete(kube: api.Api) -> None:
    await kube.create(resources.PODS, pod("p", finalizers=["a/b"]))
    await kube.delete(resources.PODS, "p", namespace="default")
    await kube.merge_patch(
        resources.PODS, "p", {"metadata": {"finalizers": None}}, namespace="default"
    )
    assert await exists(kube, resources.PODS, "p")  # still inside its grace period


async def test_other_objects_go_at_once_or_wait_for_finalizers(kube: api.Api) -> None:
    secret = {"metadata": {"name": "s", "namespace": "default"}}
    await kube.create(resources.SECRETS, secret)
    await kube.delete(resources.SECRETS, "s", namespace="default")
    assert not await exists(kube, resources.SECRETS, "s")

    held = {"metadata": {"name": "h", "namespace": "default", "finalizers": ["x/y"]}}
    await kube.create(resources.SECRETS, held)
    deleting = await kube.delete(resources.SECRETS, "h", namespace="default")
    assert deleting["metadata"]["deletionTimestamp"]
    assert deleting["metadata"]["deletionGracePeriodSeconds"] == 0
    await kube.merge_patch(
        resources.SECRETS, "h", {"metadata": {"finalizers": []}}, namespace="default"
    )
    assert not await exists(kube, resources.SECRETS, "h")


def job(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [{"name": "main", "image": "registry.example/t:v1"}],
                }
            }
        },
    }


async def _job_with_pods(kube: api.Api) -> dict[str, Any]:
    created = await kube.create(resources.JOBS, job("j"))
    owner = owners.controller_ref(created)
    await kube.create(resources.PODS, pod("j-1", ownerReferences=[owner]))
    await kube.create(resources.PODS, pod("j-2", node=None, ownerReferences=[owner]))
    await kube.create(resources.PODS, pod("unrelated"))
    return created


async def test_background_propagation_deletes_a_jobs_pods(kube: api.Api) -> None:
    await _job_with_pods(kube)
    await kube.delete(resources.JOBS, "j", namespace="default", propagation_policy="Background")
    assert not await exists(kube, resources.JOBS, "j")

    async def collected() -> bool:
        listed = await kube.list(resources.PODS, namespace="default")
        pods = {p["metadata"]["name"]: p for p in listed["items"]}
        # the bound pod terminates gracefully, the unbound one is gone
        return "j-2" not in pods and bool(
            pods.get("j-1", {}).get("metadata", {}).get("deletionTimestamp")
        )

    await eventually(collected)
    assert await exists(kube, resources.PODS, "unrelated")


async def test_deleting_a_job_without_a_policy_orphans_its_pods(kube: api.Api) -> None:
    """batch/v1 Jobs default to orphan (pkg/registry/batch/job/strategy.go)."""
    await _job_with_pods(kube)
    await kube.delete(resources.JOBS, "j", namespace="default")

    async def orphaned() -> bool:
        p = await kube.get(resources.PODS, "j-1", namespace="default")
        return "ownerReferences" not in p["metadata"] or p["metadata"]["ownerReferences"] == []

    await eventually(orphaned)
    assert await exists(kube, resources.PODS, "j-2")


async def test_delete_collection_with_a_label_selector(kube: api.Api) -> None:
    await kube.create(
        resources.SECRETS, {"metadata": {"name": "a", "namespace": "default", "labels": {"x": "1"}}}
    )
    await kube.create(resources.SECRETS, {"metadata": {"name": "b", "namespace": "default"}})
    await kube.api_client.call_api(
        "/api/v1/namespaces/default/secrets",
        "DELETE",
        query_params=[("labelSelector", "x=1")],
        header_params={"Accept": "application/json"},
        auth_settings=["BearerToken"],
        _return_http_data_only=True,
    )
    listed = await kube.list(resources.SECRETS, namespace="default")
    assert [s["metadata"]["name"] for s in listed["items"]] == ["b"]


def _stamp(seconds: float) -> str:
    return f"now+{int(seconds)}"


POD = kinds.BUILTINS[0]
SECRET = next(k for k in kinds.BUILTINS if k.plural == "secrets")


@pytest.mark.parametrize(
    ("kind", "meta", "grace", "action", "dgps"),
    [
        (POD, {}, 30, "update", 30),
        (POD, {}, 0, "remove", None),
        (POD, {"finalizers": ["f"]}, 0, "update", 0),
        (POD, {"deletionTimestamp": "t", "deletionGracePeriodSeconds": 30}, 60, "keep", 30),
        (POD, {"deletionTimestamp": "t", "deletionGracePeriodSeconds": 30}, 10, "update", 10),
        (POD, {"deletionTimestamp": "t", "deletionGracePeriodSeconds": 30}, 0, "remove", None),
        (SECRET, {}, None, "remove", None),
        (SECRET, {"finalizers": ["f"]}, None, "update", 0),
        (SECRET, {"finalizers": ["f"], "deletionTimestamp": "t"}, None, "keep", None),
    ],
)
def test_deletion_plan(
    kind: kinds.Kind, meta: dict[str, Any], grace: int | None, action: str, dgps: int | None
) -> None:
    current = {"metadata": {"name": "x", "generation": 1, **meta}}
    decided = deletion.plan(kind, current, grace, now=_stamp)
    assert decided.action == action
    if action == "update":
        assert decided.obj["metadata"]["deletionGracePeriodSeconds"] == dgps
    assert current["metadata"] == {"name": "x", "generation": 1, **meta}  # decided on a copy


def test_effective_grace() -> None:
    bound = {"spec": {"nodeName": "n", "terminationGracePeriodSeconds": 120}, "status": {}}
    assert deletion.effective_grace(POD, bound, None) == 120
    assert deletion.effective_grace(POD, bound, 5) == 5
    assert deletion.effective_grace(POD, {"spec": {}}, 5) == 0
    assert deletion.effective_grace(POD, {**bound, "status": {"phase": "Failed"}}, None) == 0
    assert deletion.effective_grace(SECRET, {}, None) is None
