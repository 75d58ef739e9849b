"""Object lifecycle through kubernetes-asyncio over HTTP: versions, metadata, errors, status."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from emulator.apiserver import server
from kontinue.kube import api, errors, resources
from tests import fixtures
from tests.integration.emulator.conftest import pod

KUEUE_CRDS = fixtures.UPSTREAM / "kueue" / "crds"


def crd(path: Path) -> dict[str, Any]:
    return fixtures.load_one(path)


async def test_resource_versions_come_from_one_global_counter(kube: api.Api) -> None:
    first = await kube.create(resources.PODS, pod("a"))
    listed = await kube.list(resources.PODS, namespace="default")
    second = await kube.create(
        resources.SECRETS, {"metadata": {"name": "s", "namespace": "default"}}
    )

    rv_a, rv_list, rv_s = (
        int(first["metadata"]["resourceVersion"]),
        int(listed["metadata"]["resourceVersion"]),
        int(second["metadata"]["resourceVersion"]),
    )
    assert rv_list == rv_a
    assert rv_s == rv_a + 1
    assert first["metadata"]["uid"] != second["metadata"]["uid"]
    assert first["metadata"]["creationTimestamp"].endswith("Z")
    assert first["metadata"]["generation"] == 1


async def test_generation_moves_on_spec_changes_only(kube: api.Api) -> None:
    await kube.create(resources.JOBS, job("j"))
    labelled = await kube.merge_patch(
        resources.JOBS, "j", {"metadata": {"labels": {"a": "b"}}}, namespace="default"
    )
    assert labelled["metadata"]["generation"] == 1
    status = await kube.merge_patch(
        resources.JOBS, "j", {"status": {"active": 1}}, namespace="default", subresource="status"
    )
    assert status["metadata"]["generation"] == 1
    suspended = await kube.merge_patch(
        resources.JOBS, "j", {"spec": {"suspend": True}}, namespace="default"
    )
    assert suspended["metadata"]["generation"] == 2


async def test_a_write_that_changes_nothing_keeps_the_resource_version(kube: api.Api) -> None:
    created = await kube.create(resources.PODS, pod("a"))
    same = await kube.merge_patch(
        resources.PODS, "a", {"spec": {"nodeName": "node-1"}}, namespace="default"
    )
    assert same["metadata"]["resourceVersion"] == created["metadata"]["resourceVersion"]


def job(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "suspend": False,
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [{"name": "main", "image": "registry.example/t:v1"}],
                }
            },
        },
    }


async def test_job_defaults_and_generated_selector(kube: api.Api) -> None:
    created = await kube.create(resources.JOBS, job("j"))
    spec, uid = created["spec"], created["metadata"]["uid"]
    assert spec["selector"] == {"matchLabels": {"batch.kubernetes.io/controller-uid": uid}}
    assert spec["template"]["metadata"]["labels"]["batch.kubernetes.io/job-name"] == "j"
    assert (spec["parallelism"], spec["completions"], spec["backoffLimit"]) == (1, 1, 6)
    assert spec["podReplacementPolicy"] == "TerminatingOrFailed"
    assert created["status"] == {}


async def test_a_failure_rule_naming_a_container_the_template_lacks_is_422(
    kube: api.Api,
) -> None:
    """As kube-apiserver (pkg/apis/batch/validation/validation.go): a podFailurePolicy rule's
    ``onExitCodes.containerName`` must name a container or init container of the template."""
    rule = {
        "action": "Ignore",
        "onExitCodes": {"containerName": "kontinue-restore", "operator": "NotIn", "values": [0]},
    }
    body = job("j")
    body["spec"]["podFailurePolicy"] = {"rules": [rule]}
    body["spec"]["template"]["spec"]["restartPolicy"] = "Never"
    with pytest.raises(errors.Invalid, match=r"rules\[0\]\.onExitCodes\.containerName"):
        await kube.create(resources.JOBS, body)
    body["spec"]["template"]["spec"]["initContainers"] = [
        {"name": "kontinue-restore", "image": "registry.example/k:v1"}
    ]
    created = await kube.create(resources.JOBS, body)
    assert created["spec"]["podFailurePolicy"]["rules"] == [rule]


async def test_generate_name(kube: api.Api) -> None:
    body = pod("")
    body["metadata"] = {"generateName": "train-", "namespace": "default"}
    created = await kube.create(resources.PODS, body)
    name = created["metadata"]["name"]
    assert name.startswith("train-")
    assert len(name) == len("train-") + 5
    assert created["metadata"]["generateName"] == "train-"


async def test_missing_name_is_422_with_the_field_path(kube: api.Api) -> None:
    body = pod("")
    del body["metadata"]["name"]
    with pytest.raises(errors.Invalid) as caught:
        await kube.create(resources.PODS, body)
    assert str(caught.value) == (
        'Pod "" is invalid: metadata.name: Required value: name or generateName is required'
    )
    assert caught.value.details["causes"] == [
        {
            "reason": "FieldValueRequired",
            "message": "Required value: name or generateName is required",
            "field": "metadata.name",
        }
    ]


async def test_pod_without_containers_is_422(kube: api.Api) -> None:
    body = pod("a")
    body["spec"] = {}
    with pytest.raises(errors.Invalid, match=r"spec\.containers: Required value"):
        await kube.create(resources.PODS, body)


async def test_crd_schema_required_fields_and_types(
    apiserver: server.ApiServer, kube: api.Api
) -> None:
    apiserver.install_crd(crd(KUEUE_CRDS / "kueue.x-k8s.io_admissionchecks.yaml"))
    check = {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "AdmissionCheck",
        "metadata": {"name": "restore"},
        "spec": {"controllerName": 7},
    }
    with pytest.raises(errors.Invalid) as caught:
        await kube.create(resources.ADMISSION_CHECKS, check)
    assert caught.value.details["causes"][0]["field"] == "spec.controllerName"
    assert "must be of type string" in str(caught.value)
    check["spec"] = {}
    with pytest.raises(errors.Invalid) as caught:
        await kube.create(resources.ADMISSION_CHECKS, check)
    assert str(caught.value) == (
        'AdmissionCheck.kueue.x-k8s.io "restore" is invalid: spec.controllerName: Required value'
    )
    check["spec"] = {"controllerName": "kontinue.dev/restore"}
    created = await kube.create(resources.ADMISSION_CHECKS, check)
    assert created["spec"]["controllerName"] == "kontinue.dev/restore"


async def test_not_found_and_already_exists_status_bodies(kube: api.Api) -> None:
    with pytest.raises(errors.NotFound) as missing:
        await kube.get(resources.PODS, "nope", namespace="default")
    assert str(missing.value) == 'pods "nope" not found'
    assert missing.value.reason == "NotFound"
    assert missing.value.details == {"name": "nope", "kind": "pods"}

    await kube.create(resources.JOBS, job("j"))
    with pytest.raises(errors.Conflict) as exists:
        await kube.create(resources.JOBS, job("j"))
    assert exists.value.already_exists
    assert str(exists.value) == 'jobs.batch "j" already exists'
    assert exists.value.details == {"name": "j", "group": "batch", "kind": "jobs"}


async def test_writes_into_a_missing_namespace_are_404(kube: api.Api) -> None:
    with pytest.raises(errors.NotFound, match='namespaces "ghost" not found'):
        await kube.create(resources.PODS, pod("a", namespace="ghost"))


async def test_stale_resource_version_conflicts_on_put_and_patch(kube: api.Api) -> None:
    created = await kube.create(resources.PODS, pod("a"))
    await kube.merge_patch(
        resources.PODS, "a", {"metadata": {"labels": {"x": "1"}}}, namespace="default"
    )

    stale = dict(created)
    stale["metadata"] = {**created["metadata"], "labels": {"x": "2"}}
    with pytest.raises(errors.Conflict) as caught:
        await kube.replace(resources.PODS, stale)
    assert not caught.value.already_exists
    assert "the object has been modified" in str(caught.value)
    with pytest.raises(errors.Conflict):
        await kube.merge_patch(
            resources.PODS,
            "a",
            {
                "metadata": {
                    "resourceVersion": created["metadata"]["resourceVersion"],
                    "labels": {"x": "3"},
                }
            },
            namespace="default",
        )
    # without a resourceVersion a PUT is unconditional
    del stale["metadata"]["resourceVersion"]
    replaced = await kube.replace(resources.PODS, stale)
    assert replaced["metadata"]["labels"] == {"x": "2"}


async def test_status_subresource_isolation(kube: api.Api) -> None:
    created = await kube.create(resources.PODS, {**pod("a"), "status": {"phase": "Running"}})
    assert created["status"]["phase"] == "Pending"  # create resets status

    body = dict(created)
    body["status"] = {"phase": "Succeeded"}
    body["metadata"] = {**created["metadata"], "labels": {"via": "main"}}
    main = await kube.replace(resources.PODS, body)
    assert main["status"]["phase"] == "Pending"  # the main resource ignores status
    assert main["metadata"]["labels"] == {"via": "main"}

    body = dict(main)
    body["status"] = {"phase": "Running"}
    body["metadata"] = {**main["metadata"], "labels": {"via": "status"}}
    body["spec"] = {**main["spec"], "nodeName": "elsewhere"}
    status = await kube.replace(resources.PODS, body, subresource="status")
    assert status["status"] == {"phase": "Running"}
    assert status["metadata"]["labels"] == {"via": "main"}  # status ignores everything else
    assert status["spec"]["nodeName"] == "node-1"


async def test_custom_resource_status_subresource(
    apiserver: server.ApiServer, kube: api.Api
) -> None:
    apiserver.install_crd(crd(fixtures.MANIFESTS / "crds" / "kontinue.dev_checkpointpolicies.yaml"))
    policy = {
        "apiVersion": "kontinue.dev/v1alpha1",
        "kind": "CheckpointPolicy",
        "metadata": {"name": "p"},
        "spec": {},
    }
    created = await kube.create(resources.CHECKPOINT_POLICIES, policy)
    assert created["metadata"]["name"] == "p"
    assert (await kube.get(resources.CHECKPOINT_POLICIES, "p"))["metadata"]["uid"] == (
        created["metadata"]["uid"]
    )


async def test_pod_spec_is_immutable_except_images_and_added_tolerations(kube: api.Api) -> None:
    await kube.create(resources.PODS, pod("a"))
    with pytest.raises(errors.Invalid, match="spec: Forbidden: pod updates may not change fields"):
        await kube.patch(
            resources.PODS,
            "a",
            {"spec": {"containers": [{"name": "main", "env": [{"name": "X", "value": "1"}]}]}},
            content_type=api.STRATEGIC_MERGE_PATCH,
            namespace="default",
        )
    patched = await kube.patch(
        resources.PODS,
        "a",
        {"spec": {"containers": [{"name": "main", "image": "registry.example/app:v2"}]}},
        content_type=api.STRATEGIC_MERGE_PATCH,
        namespace="default",
    )
    toleration = {"key": "gpu", "operator": "Exists"}
    patched = await kube.json_patch(
        resources.PODS,
        "a",
        [{"op": "add", "path": "/spec/tolerations/-", "value": toleration}],
        namespace="default",
    )
    assert patched["spec"]["tolerations"][-1] == toleration
    # a strategic merge replaces tolerations (no merge key), dropping existing ones: refused
    with pytest.raises(errors.Invalid, match="existing toleration can not be modified"):
        await kube.patch(
            resources.PODS,
            "a",
            {"spec": {"tolerations": [toleration]}},
            content_type=api.STRATEGIC_MERGE_PATCH,
            namespace="default",
        )
    assert patched["spec"]["containers"][0]["image"] == "registry.example/app:v2"


async def test_job_template_changes_only_while_suspended_and_never_started(kube: api.Api) -> None:
    body = job("j")
    body["spec"]["suspend"] = True
    await kube.create(resources.JOBS, body)
    steer = {"spec": {"template": {"spec": {"nodeSelector": {"gpu": "a100"}}}}}
    patched = await kube.merge_patch(resources.JOBS, "j", steer, namespace="default")
    assert patched["spec"]["template"]["spec"]["nodeSelector"] == {"gpu": "a100"}
    image = {"spec": {"template": {"spec": {"containers": [{"name": "main", "image": "x:2"}]}}}}
    with pytest.raises(errors.Invalid, match=r"spec\.template: Invalid value: field is immutable"):
        await kube.merge_patch(resources.JOBS, "j", image, namespace="default")
    await kube.merge_patch(resources.JOBS, "j", {"spec": {"suspend": False}}, namespace="default")
    with pytest.raises(errors.Invalid, match=r"spec\.template"):
        await kube.merge_patch(
            resources.JOBS,
            "j",
            {"spec": {"template": {"spec": {"nodeSelector": {"gpu": "h100"}}}}},
            namespace="default",
        )
