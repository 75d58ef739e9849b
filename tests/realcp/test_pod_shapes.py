"""Issue 20 item 3 (and the container-order half of item 1) on a real kube-apiserver v1.36.2 with
the real job controller: the pod shapes platform teams really run.

The Job's pod has an ordinary init container listed first (as Istio's ``istio-init``), a native
sidecar (``restartPolicy: Always``, as a storage mount such as ``gke-gcsfuse-sidecar``), an init
container of the user's own, and two regular containers with a helper listed before the trainer,
which the annotation ``kontinue.dev/workload-containers`` names. The namespace enforces the
``restricted`` Pod Security level. The real apiserver admits the Job and then each pod the real
job controller creates from it, as mutated by the webhook running here under its ServiceAccount
(URL-registered, tests/realcp/conftest.py), after its own validation
(pkg/apis/core/validation: init container names, mounts and volumes; pkg/apis/batch/validation:
the podFailurePolicy rule naming the restore container) and Pod Security admission. What is
asserted is what the apiserver stored: the order of the init containers and what each got.
"""

from __future__ import annotations

import copy
import datetime
from typing import Any

from kontinue import keys, lineage
from kontinue import restore as restore_program
from kontinue.kube import api, resources
from kontinue.models import base, checkpoint
from tests.realcp import objects, processes

Obj = dict[str, Any]
MOUNT = "/kontinue/checkpoints"  # the default policy's mountPath
RESTRICTED: Obj = {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}
TRAINER_CONTEXT: Obj = {**RESTRICTED, "runAsUser": 1000}


def _container(name: str, **extra: Any) -> Obj:
    return {
        "name": name,
        "image": f"registry.example/{name}:1",
        "securityContext": copy.deepcopy(RESTRICTED),
        **extra,
    }


def _job(namespace: str, queue: str, *, suspend: bool) -> Obj:
    job = objects.job(namespace, queue)
    job["spec"].update(parallelism=1, completions=1, suspend=suspend)
    job["spec"].pop("completionMode")
    template = job["spec"]["template"]
    template["metadata"]["annotations"] = {keys.WORKLOAD_CONTAINERS_ANNOTATION: "trainer"}
    template["spec"]["initContainers"] = [
        _container("net-setup"),
        _container("storage", restartPolicy="Always"),
        _container("prepare"),
    ]
    template["spec"]["containers"] = [
        _container("helper"),
        {**_container("trainer"), "securityContext": copy.deepcopy(TRAINER_CONTEXT)},
    ]
    return job


async def _restricted_namespace(admin: api.Api, namespace: str) -> None:
    await admin.merge_patch(
        resources.NAMESPACES,
        namespace,
        {"metadata": {"labels": {"pod-security.kubernetes.io/enforce": "restricted"}}},
    )


def _names(containers: list[Obj]) -> list[str]:
    return [c["name"] for c in containers]


def _by_name(containers: list[Obj]) -> dict[str, Obj]:
    return {c["name"]: c for c in containers}


def _env(container: Obj) -> dict[str, Obj]:
    return {e["name"]: e for e in container.get("env") or []}


def _mounts(container: Obj) -> dict[str, Obj]:
    return {m["name"]: m for m in container.get("volumeMounts") or []}


async def _one_pod(admin: api.Api, namespace: str) -> Obj:
    async def created() -> bool:
        return len(await objects.pods(admin, namespace)) == 1

    await objects.until(created, "the job controller created the pod", seconds=60)
    (pod,) = await objects.pods(admin, namespace)
    return pod


def _without_token(container: Obj) -> Obj:
    """The container without the API token mount the ServiceAccount admission plugin adds to
    every container (plugin/pkg/admission/serviceaccount), before any webhook sees the pod."""
    out = copy.deepcopy(container)
    mounts = [
        m for m in out.get("volumeMounts") or [] if not m["name"].startswith("kube-api-access-")
    ]
    assert len(mounts) == len(out.get("volumeMounts") or []) - 1, container
    if mounts:
        out["volumeMounts"] = mounts
    else:
        out.pop("volumeMounts")
    return out


def _assert_left_alone(pod: Obj, template: Obj) -> None:
    """What runs before the restore is exactly what the Job's template holds (as defaulted)."""
    stored = _by_name(template["spec"]["initContainers"])
    inits = _by_name(pod["spec"]["initContainers"])
    for name in ("net-setup", "storage"):
        assert _without_token(inits[name]) == stored[name], name


def _assert_read_only_view(container: Obj, *, restore: bool) -> None:
    env = _env(container)
    assert env[keys.ENV_MEMBER]["value"] == "index=0"
    assert env[keys.ENV_POD_UID]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.uid"
    assert keys.ENV_CHECKPOINT_DIR not in env
    mounts = _mounts(container)
    assert mounts[keys.CHECKPOINT_VOLUME]["mountPath"] == MOUNT
    assert mounts[keys.CHECKPOINT_VOLUME]["readOnly"] is True
    assert (keys.ENV_RESTORE_FROM in env) is restore
    assert ("kontinue-restore" in mounts) is restore
    if restore:
        assert mounts["kontinue-restore"]["readOnly"] is True


async def test_a_cold_pod_with_sidecar_and_init_containers_is_admitted_in_order(
    kontinue: processes.Installed, admin: api.Api, namespace: str
) -> None:
    await _restricted_namespace(admin, namespace)
    queue = await objects.queues(admin, namespace, opted_in=True)
    await objects.claim(admin, namespace)
    await objects.until_plumbing(admin, namespace, queue)
    job = await admin.create(
        resources.JOBS, _job(namespace, queue, suspend=False), namespace=namespace
    )
    template = job["spec"]["template"]
    # The Job: the restore rule is accepted because the stand-in is in the template, placed
    # where the pod's restore container will go (after the native sidecar).
    assert restore_program.POD_FAILURE_RULE in job["spec"]["podFailurePolicy"]["rules"]
    inits = template["spec"]["initContainers"]
    assert _names(inits) == ["net-setup", "storage", keys.RESTORE_INIT_CONTAINER, "prepare"]
    assert restore_program.is_stand_in(inits[2])
    assert inits[2]["securityContext"] == TRAINER_CONTEXT  # the workload container's

    pod = await _one_pod(admin, namespace)
    # Nothing to restore: the stand-in is gone, the user's init container after the sidecar
    # still sees the checkpoint volume, read-only.
    assert _names(pod["spec"]["initContainers"]) == ["net-setup", "storage", "prepare"]
    assert _names(pod["spec"]["containers"]) == ["helper", "trainer"]
    _assert_left_alone(pod, template)
    _assert_read_only_view(pod["spec"]["initContainers"][2], restore=False)
    assert "no checkpoint" in pod["metadata"]["annotations"][keys.COLD_START_REASON_ANNOTATION]
    for container in pod["spec"]["containers"]:  # every regular container is plumbed
        assert _env(container)[keys.ENV_MEMBER]["value"] == "index=0"


def _succeeded_set(namespace: str, owner: checkpoint.Lineage, name: str) -> Obj:
    when = datetime.datetime(2026, 12, 3, 9, 0, tzinfo=datetime.UTC)
    return {
        "apiVersion": keys.API_VERSION,
        "kind": "Checkpoint",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "lineage": base.to_dict(owner),
            "trigger": {"source": "Kueue", "reason": "Preempted", "time": base.format_time(when)},
            "members": [
                {
                    "podName": "train-old",
                    "podUid": "5e1dca70-0000-4000-8000-000000000000",
                    "identity": "index=0",
                    "index": 0,
                }
            ],
        },
    }


async def test_a_restoring_pod_gets_the_restore_after_the_sidecar_and_before_its_init(
    kontinue: processes.Installed, admin: api.Api, namespace: str
) -> None:
    await _restricted_namespace(admin, namespace)
    queue = await objects.queues(admin, namespace, opted_in=True)
    await objects.claim(admin, namespace)
    await objects.until_plumbing(admin, namespace, queue)
    job = await admin.create(
        resources.JOBS, _job(namespace, queue, suspend=True), namespace=namespace
    )
    owner = checkpoint.Lineage(
        namespace=namespace,
        owner_kind="Job",
        owner_name=job["metadata"]["name"],
        owner_uid=job["metadata"]["uid"],
    )
    await admin.create(
        resources.CHECKPOINTS, _succeeded_set(namespace, owner, "saved"), namespace=namespace
    )
    await admin.merge_patch(
        resources.CHECKPOINTS,
        "saved",
        {"status": {"phase": "Succeeded"}},
        namespace=namespace,
        subresource="status",
    )

    async def webhook_sees_it() -> bool:  # its Checkpoint cache: a dry-run pod restores
        probe = objects.pod(namespace, queue=queue)
        probe["metadata"]["ownerReferences"] = [
            {
                "apiVersion": "batch/v1",
                "kind": "Job",
                "name": owner.owner_name,
                "uid": owner.owner_uid,
                "controller": True,
            }
        ]
        dry = await admin.create(resources.PODS, probe, namespace=namespace, dry_run=True)
        return (dry["metadata"].get("annotations") or {}).get(
            keys.RESTORE_FROM_ANNOTATION
        ) == "saved"

    await objects.until(webhook_sees_it, "the webhook's cache holds the set")
    await admin.merge_patch(
        resources.JOBS, owner.owner_name, {"spec": {"suspend": False}}, namespace=namespace
    )
    pod = await _one_pod(admin, namespace)
    assert pod["metadata"]["annotations"][keys.RESTORE_FROM_ANNOTATION] == "saved"
    inits = pod["spec"]["initContainers"]
    assert _names(inits) == ["net-setup", "storage", keys.RESTORE_INIT_CONTAINER, "prepare"]
    assert _names(pod["spec"]["containers"]) == ["helper", "trainer"]
    _assert_left_alone(pod, job["spec"]["template"])

    restore = inits[2]
    assert not restore_program.is_stand_in(restore)
    assert restore["command"] == list(restore_program.COMMAND)
    assert restore["securityContext"] == TRAINER_CONTEXT  # reads as the workload wrote
    source = _env(restore)[keys.ENV_RESTORE_SOURCE]["value"]
    assert source == (f"{MOUNT}/{lineage.lineage_dir(owner)}/5e1dca70-0000-4000-8000-000000000000")
    _assert_read_only_view(inits[3], restore=True)
    assert _env(inits[3])[keys.ENV_RESTORE_FROM]["value"] == "/var/run/kontinue/restore-from"
    for container in pod["spec"]["containers"]:
        assert _env(container)[keys.ENV_RESTORE_FROM]["value"] == ("/var/run/kontinue/restore-from")
