"""Patch types over HTTP: JSON patch, merge patch, strategic merge and server-side apply."""

from __future__ import annotations

from typing import Any

import pytest

from emulator.apiserver import server
from kontinue.kube import api, errors, resources
from tests import fixtures
from tests.integration.emulator.conftest import pod

PODTEMPLATES = resources.Resource("", "v1", "podtemplates", "PodTemplate")


def rich_template() -> dict[str, Any]:
    """A PodTemplate: the pod spec keyed lists, on an object whose spec may change (a pod's
    may not)."""
    body = pod("p")
    body = {
        "apiVersion": "v1",
        "kind": "PodTemplate",
        "metadata": body["metadata"],
        "template": {"spec": body["spec"]},
    }
    body["metadata"]["finalizers"] = ["a/one"]
    body["metadata"]["ownerReferences"] = [
        {"apiVersion": "batch/v1", "kind": "Job", "name": "j", "uid": "u-1"}
    ]
    spec = body["template"]["spec"]
    spec["volumes"] = [{"name": "data", "emptyDir": {}}]
    spec["initContainers"] = [{"name": "init", "image": "i:1"}]
    spec["containers"] = [
        {
            "name": "main",
            "image": "m:1",
            "env": [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}],
            "volumeMounts": [{"name": "data", "mountPath": "/data"}],
        },
        {"name": "side", "image": "s:1"},
    ]
    return body


async def test_strategic_merge_merges_keyed_lists(kube: api.Api) -> None:
    await kube.create(PODTEMPLATES, rich_template())
    patch = {
        "metadata": {
            "finalizers": ["a/two"],
            "ownerReferences": [{"apiVersion": "v1", "kind": "X", "name": "x", "uid": "u-2"}],
        },
        "template": {
            "spec": {
                "volumes": [{"name": "ckpt", "emptyDir": {}}],
                "initContainers": [{"name": "restore", "image": "r:1"}],
                "containers": [
                    {
                        "name": "main",
                        "env": [{"name": "B", "value": "changed"}, {"name": "C", "value": "3"}],
                        "volumeMounts": [
                            {"name": "ckpt", "mountPath": "/ckpt"},
                            {"name": "data", "mountPath": "/data", "readOnly": True},
                        ],
                    }
                ],
            }
        },
    }
    patched = await kube.patch(
        PODTEMPLATES, "p", patch, content_type=api.STRATEGIC_MERGE_PATCH, namespace="default"
    )
    meta, spec = patched["metadata"], patched["template"]["spec"]
    assert meta["finalizers"] == ["a/one", "a/two"]
    assert [r["uid"] for r in meta["ownerReferences"]] == ["u-1", "u-2"]
    assert [v["name"] for v in spec["volumes"]] == ["data", "ckpt"]
    assert [c["name"] for c in spec["initContainers"]] == ["init", "restore"]
    assert [c["name"] for c in spec["containers"]] == ["main", "side"]
    main = spec["containers"][0]
    assert main["image"] == "m:1"
    assert main["env"] == [
        {"name": "A", "value": "1"},
        {"name": "B", "value": "changed"},
        {"name": "C", "value": "3"},
    ]
    assert main["volumeMounts"] == [
        {"name": "data", "mountPath": "/data", "readOnly": True},
        {"name": "ckpt", "mountPath": "/ckpt"},
    ]


async def test_strategic_merge_directives(kube: api.Api) -> None:
    await kube.create(PODTEMPLATES, rich_template())
    patch = {
        "metadata": {"$deleteFromPrimitiveList/finalizers": ["a/one"]},
        "template": {"spec": {"containers": [{"name": "side", "$patch": "delete"}]}},
    }
    patched = await kube.patch(
        PODTEMPLATES, "p", patch, content_type=api.STRATEGIC_MERGE_PATCH, namespace="default"
    )
    assert patched["metadata"]["finalizers"] == []
    assert [c["name"] for c in patched["template"]["spec"]["containers"]] == ["main"]


async def test_strategic_merge_of_status_conditions_by_type(kube: api.Api) -> None:
    await kube.create(resources.PODS, pod("p"))
    first = {"status": {"conditions": [{"type": "Ready", "status": "False"}]}}
    second = {
        "status": {
            "conditions": [
                {"type": "DisruptionTarget", "status": "True", "reason": "PreemptionByScheduler"},
                {"type": "Ready", "status": "True"},
            ]
        }
    }
    for patch in (first, second):
        patched = await kube.patch(
            resources.PODS,
            "p",
            patch,
            content_type=api.STRATEGIC_MERGE_PATCH,
            namespace="default",
            subresource="status",
        )
    conditions = {c["type"]: c["status"] for c in patched["status"]["conditions"]}
    assert conditions == {"Ready": "True", "DisruptionTarget": "True"}


async def test_merge_patch_replaces_lists_and_null_deletes(kube: api.Api) -> None:
    await kube.create(PODTEMPLATES, rich_template())
    patched = await kube.merge_patch(
        PODTEMPLATES,
        "p",
        {"metadata": {"finalizers": ["b"], "ownerReferences": None}},
        namespace="default",
    )
    assert patched["metadata"]["finalizers"] == ["b"]
    assert "ownerReferences" not in patched["metadata"]


async def test_json_patch_including_a_failed_test_op(kube: api.Api) -> None:
    await kube.create(PODTEMPLATES, rich_template())
    patched = await kube.json_patch(
        PODTEMPLATES,
        "p",
        [
            {"op": "test", "path": "/metadata/finalizers/0", "value": "a/one"},
            {"op": "remove", "path": "/metadata/finalizers/0"},
            {"op": "add", "path": "/metadata/labels", "value": {"k": "v"}},
        ],
        namespace="default",
    )
    assert patched["metadata"]["finalizers"] == []
    assert patched["metadata"]["labels"] == {"k": "v"}
    with pytest.raises(errors.Invalid):
        await kube.json_patch(
            PODTEMPLATES,
            "p",
            [{"op": "test", "path": "/metadata/labels/k", "value": "other"}],
            namespace="default",
        )


async def test_strategic_merge_is_refused_for_custom_resources(
    apiserver: server.ApiServer, kube: api.Api
) -> None:
    apiserver.install_crd(
        fixtures.load_one(
            fixtures.UPSTREAM / "kueue" / "crds" / "kueue.x-k8s.io_resourceflavors.yaml"
        )
    )
    flavor = {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "ResourceFlavor",
        "metadata": {"name": "gpu"},
        "spec": {},
    }
    await kube.create(resources.RESOURCE_FLAVORS, flavor)
    with pytest.raises(errors.ClientError) as caught:
        await kube.patch(
            resources.RESOURCE_FLAVORS, "gpu", {"spec": {}}, content_type=api.STRATEGIC_MERGE_PATCH
        )
    assert caught.value.status == 415


# --- server-side apply ------------------------------------------------------------------------


def workload() -> dict[str, Any]:
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "Workload",
        "metadata": {"name": "w", "namespace": "default"},
        "spec": {
            "queueName": "team-a",
            "podSets": [
                {
                    "name": "main",
                    "count": 1,
                    "template": {"spec": {"containers": [{"name": "c", "image": "i:1"}]}},
                }
            ],
        },
    }


def checks(*entries: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "Workload",
        "metadata": {"name": "w", "namespace": "default"},
        "status": {"admissionChecks": list(entries)},
    }


def check(name: str, state: str, **extra: Any) -> dict[str, Any]:
    return {
        "name": name,
        "state": state,
        "message": "",
        "lastTransitionTime": "2026-12-02T10:00:00Z",
        **extra,
    }


async def _apply(
    kube: api.Api, manager: str, body: dict[str, Any], *, force: bool = True
) -> dict[str, Any]:
    as_manager = api.Api(kube.api_client, field_manager=manager)
    return await as_manager.apply(resources.WORKLOADS, body, subresource="status", force=force)


async def test_apply_merges_admission_checks_by_name_and_removes_what_a_manager_dropped(
    apiserver: server.ApiServer, kube: api.Api
) -> None:
    apiserver.install_crd(
        fixtures.load_one(fixtures.UPSTREAM / "kueue" / "crds" / "kueue.x-k8s.io_workloads.yaml")
    )
    await kube.create(resources.WORKLOADS, workload())

    # kueue owns both checks' entries; the restore controller adds podSetUpdates to its own
    await _apply(
        kube, "kueue-admission", checks(check("restore", "Pending"), check("quota", "Pending"))
    )
    updates = [{"name": "main", "annotations": {"kontinue.dev/restore-from": "ckpt-1"}}]
    await _apply(kube, "kontinue", checks(check("restore", "Ready", podSetUpdates=updates)))
    got = (await kube.get(resources.WORKLOADS, "w", namespace="default"))["status"][
        "admissionChecks"
    ]
    assert [(c["name"], c["state"]) for c in got] == [("restore", "Ready"), ("quota", "Pending")]
    assert got[0]["podSetUpdates"] == updates

    # kueue resets the check to Pending without podSetUpdates: it cannot remove kontinue's field
    await _apply(
        kube, "kueue-admission", checks(check("restore", "Pending"), check("quota", "Pending"))
    )
    got = (await kube.get(resources.WORKLOADS, "w", namespace="default"))["status"][
        "admissionChecks"
    ]
    assert got[0]["state"] == "Pending"
    assert got[0]["podSetUpdates"] == updates

    # a manager's own omitted fields and list entries are removed
    await _apply(kube, "kontinue", checks(check("restore", "Ready")))
    got = (await kube.get(resources.WORKLOADS, "w", namespace="default"))["status"][
        "admissionChecks"
    ]
    assert "podSetUpdates" not in got[0]
    await _apply(kube, "kueue-admission", checks(check("quota", "Ready")))
    got = (await kube.get(resources.WORKLOADS, "w", namespace="default"))["status"][
        "admissionChecks"
    ]
    # "restore" stays: kontinue still owns fields in it
    assert sorted(c["name"] for c in got) == ["quota", "restore"]


async def test_apply_conflict_without_force(apiserver: server.ApiServer, kube: api.Api) -> None:
    apiserver.install_crd(
        fixtures.load_one(fixtures.UPSTREAM / "kueue" / "crds" / "kueue.x-k8s.io_workloads.yaml")
    )
    await kube.create(resources.WORKLOADS, workload())
    await _apply(kube, "kueue-admission", checks(check("restore", "Pending")))
    with pytest.raises(errors.Conflict) as caught:
        await _apply(kube, "kontinue", checks(check("restore", "Ready")), force=False)
    assert 'conflict with "kueue-admission"' in str(caught.value)
    assert '.status.admissionChecks[name="restore"].state' in str(caught.value)
    forced = await _apply(kube, "kontinue", checks(check("restore", "Ready")), force=True)
    assert forced["status"]["admissionChecks"][0]["state"] == "Ready"


async def test_apply_creates_and_main_resource_ignores_status(
    apiserver: server.ApiServer, kube: api.Api
) -> None:
    apiserver.install_crd(
        fixtures.load_one(fixtures.UPSTREAM / "kueue" / "crds" / "kueue.x-k8s.io_workloads.yaml")
    )
    body = {**workload(), "status": {"admissionChecks": [check("x", "Ready")]}}
    created = await api.Api(kube.api_client, field_manager="m").apply(resources.WORKLOADS, body)
    assert created["spec"]["queueName"] == "team-a"
    assert "status" not in created
