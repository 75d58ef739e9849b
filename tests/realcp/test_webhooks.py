"""Proof 4: the rendered webhook configurations on a real kube-apiserver v1.36.2.

The ``kueue`` overlay is installed in a fresh namespace with each webhook's ``clientConfig``
switched to the URL of ``kontinue-webhook`` running here as a process under its ServiceAccount
(the only change), so the apiserver itself evaluates rules, ``namespaceSelector``,
``matchConditions`` (CEL) and failure policies and sends real AdmissionReviews. Requests are
counted with the apiserver's own metric ``apiserver_admission_webhook_request_total``.
"""

from __future__ import annotations

import base64
import copy

from emulator.kueue import jobsets as kueue_jobsets
from kontinue import keys
from kontinue import restore as restore_program
from kontinue.kube import api, resources
from kontinue.models import checkpoint
from tests.realcp import jobset, objects, processes
from tests.realcp.install import find
from tests.unit.webhook import support
from webhook import job_plumbing


def test_the_webhook_writes_the_ca_bundle_itself(kontinue: processes.Installed) -> None:
    plane = kontinue.plane
    for kind in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"):
        for webhook in find(kontinue.docs, kind, "kontinue-webhook")["webhooks"]:
            assert "caBundle" not in webhook["clientConfig"]  # as rendered: nothing to trust yet
    secret = plane.kubectl(
        "get",
        "secret",
        "kontinue-webhook-tls",
        "-n",
        kontinue.namespace,
        "-o",
        "jsonpath={.data.ca\\.crt}",
    ).stdout
    assert base64.b64decode(secret).startswith(b"-----BEGIN CERTIFICATE-----")
    for kind in ("mutatingwebhookconfiguration", "validatingwebhookconfiguration"):
        bundles = plane.kubectl(
            "get", kind, "kontinue-webhook", "-o", "jsonpath={.webhooks[*].clientConfig.caBundle}"
        ).stdout.split()
        assert bundles
        assert set(bundles) == {secret}


async def test_an_opted_in_pod_is_plumbed_and_every_patch_accepted(
    kontinue: processes.Installed, admin: api.Api, namespace: str
) -> None:
    """A Job of an opted-in queue: the real job controller creates its pods, the apiserver sends
    each CREATE to the mutating webhook, applies its patch, and sends the plumbed pod to the
    validating webhook, which allows it."""
    queue = await objects.queues(admin, namespace, opted_in=True)
    await objects.claim(admin, namespace)
    await objects.until_plumbing(admin, namespace, queue)
    before = objects.webhook_requests(kontinue.plane)
    job = await admin.create(resources.JOBS, objects.job(namespace, queue), namespace=namespace)
    # The Job itself was made preemption-safe by jobs.mutate.
    assert job["spec"]["podReplacementPolicy"] == "Failed"
    assert job["spec"].get("podFailurePolicy")

    await objects.until_plumbed_pods(admin, namespace, 2, "two plumbed pods")
    assert objects.webhook_requests_since(kontinue.plane, before) == {
        "jobs.mutate.kontinue.dev": 1,
        "pods.mutate.kontinue.dev": 2,
        "pods.validate.kontinue.dev": 2,
    }
    for pod in await objects.pods(admin, namespace):
        assert keys.CHECKPOINT_FINALIZER in pod["metadata"]["finalizers"]
        claims = [
            v["persistentVolumeClaim"]["claimName"]
            for v in pod["spec"]["volumes"]
            if "persistentVolumeClaim" in v
        ]
        assert claims == ["kontinue"]
        env = {e["name"] for c in pod["spec"]["containers"] for e in c.get("env", [])}
        assert keys.ENV_CHECKPOINT_DIR in env


async def test_pods_the_conditions_exclude_never_reach_the_webhook(
    kontinue: processes.Installed, admin: api.Api, namespace: str
) -> None:
    opted_in = await objects.queues(admin, namespace, opted_in=True)
    before = objects.webhook_requests(kontinue.plane)
    # No queue label: matchConditions (CEL) drop it before any call.
    plain = await admin.create(
        resources.PODS, objects.pod(namespace, queue=None), namespace=namespace
    )
    # kube-system, even with an opted-in queue's label: the namespaceSelector drops it.
    system = await admin.create(
        resources.PODS, objects.pod("kube-system", queue=opted_in), namespace="kube-system"
    )
    # Kontinue's own namespace likewise.
    own = await admin.create(
        resources.PODS,
        objects.pod(kontinue.namespace, queue=opted_in),
        namespace=kontinue.namespace,
    )
    # Opted out with the annotation: the second matchCondition.
    out = objects.pod(namespace, queue=opted_in)
    out["metadata"]["annotations"] = {keys.CHECKPOINT_OPT_OUT_ANNOTATION: "false"}
    opted_out = await admin.create(resources.PODS, out, namespace=namespace)
    assert objects.webhook_requests_since(kontinue.plane, before) == {}
    for pod in (plain, system, own, opted_out):
        assert keys.LINEAGE_ANNOTATION not in (pod["metadata"].get("annotations") or {})
    await admin.delete(resources.PODS, system["metadata"]["name"], namespace="kube-system")


async def test_a_pod_of_a_queue_not_opted_in_is_asked_about_and_left_alone(
    kontinue: processes.Installed, admin: api.Api, namespace: str
) -> None:
    """The apiserver cannot know a queue's opt-in (a label on the ClusterQueue, not on the pod):
    such a Job and its pod are sent to the mutating webhook once each, which patches nothing."""
    queue = await objects.queues(admin, namespace, opted_in=False)
    before = objects.webhook_requests(kontinue.plane)
    body = objects.job(namespace, queue)
    body["spec"].update(parallelism=1, completions=1)
    job = await admin.create(resources.JOBS, body, namespace=namespace)

    async def created() -> bool:
        return len(await objects.pods(admin, namespace)) == 1

    await objects.until(created, "the job controller's pod")
    delta = objects.webhook_requests_since(kontinue.plane, before)
    assert delta == {"jobs.mutate.kontinue.dev": 1, "pods.mutate.kontinue.dev": 1}
    assert "podFailurePolicy" not in job["spec"]
    (pod,) = await objects.pods(admin, namespace)
    assert not any(k.startswith("kontinue.dev/") for k in pod["metadata"].get("annotations") or {})
    assert [c["name"] for c in pod["spec"]["containers"]] == ["trainer"]
    assert not pod["spec"].get("initContainers")


async def test_a_checkpoint_created_just_before_the_pod_is_restored(
    kontinue: processes.Installed, admin: api.Api, namespace: str
) -> None:
    """The soak's late plan on a real kube-apiserver: a Succeeded set recorded the moment
    before the job controller creates the pod. The webhook reads the lineage live
    (webhook/freshness.py: a label-selected LIST of Checkpoints and one of pods, under its own
    ServiceAccount's RBAC) and the pod restores that set; the validating webhook, which checks
    the ``restore-from`` it names, admits it. A real watch cache is usually quick enough that
    the old code passed this too: the lag itself is forced on the emulator
    (tests/integration/webhook/test_freshness.py); here the read is proven against the real
    apiserver (selectors, RBAC, the consistent LIST)."""
    queue = await objects.queues(admin, namespace, opted_in=True)
    await objects.claim(admin, namespace)
    await objects.until_plumbing(admin, namespace, queue)
    body = objects.job(namespace, queue)
    body["spec"].update(parallelism=1, completions=1, suspend=True)
    job = await admin.create(resources.JOBS, body, namespace=namespace)
    owner = checkpoint.Lineage(
        namespace=namespace,
        owner_kind="Job",
        owner_name=job["metadata"]["name"],
        owner_uid=job["metadata"]["uid"],
    )
    recorded = support.make_checkpoint("train-late", lineage=owner).model_dump(
        mode="json", by_alias=True, exclude_none=True
    )
    status = recorded.pop("status")
    recorded.update(apiVersion=resources.CHECKPOINTS.api_version, kind="Checkpoint")
    recorded["metadata"]["labels"] = {
        keys.CHECKPOINT_LINEAGE_LABEL: owner.hash,
        keys.CHECKPOINT_OWNER_UID_LABEL: owner.owner_uid,
    }
    await admin.create(resources.CHECKPOINTS, recorded, namespace=namespace)
    await admin.patch(
        resources.CHECKPOINTS,
        "train-late",
        {"status": status},
        namespace=namespace,
        subresource="status",
        content_type=api.MERGE_PATCH,
    )
    # At once: the job controller creates the pod.
    await admin.patch(
        resources.JOBS,
        job["metadata"]["name"],
        {"spec": {"suspend": False}},
        namespace=namespace,
        content_type=api.MERGE_PATCH,
    )

    async def created() -> bool:
        return len(await objects.pods(admin, namespace)) == 1

    await objects.until(created, "the Job's pod")
    (pod,) = await objects.pods(admin, namespace)
    annotations = pod["metadata"]["annotations"]
    assert annotations[keys.RESTORE_FROM_ANNOTATION] == "train-late"
    assert pod["metadata"]["labels"][keys.CHECKPOINT_LINEAGE_LABEL] == owner.hash


async def test_an_opted_in_jobset_is_plumbed_and_so_are_the_child_jobs_made_of_it(
    kontinue: processes.Installed, admin: api.Api, namespace: str
) -> None:
    """The upstream JobSet CRD installed: the apiserver sends an opted-in JobSet's CREATE to
    jobsets.mutate once and stores the patched templates (the CRD's schema keeps every field);
    the JobSet controller, played by tests/realcp/jobset.py, copies each template into a child
    Job, which the apiserver's Job validation accepts with the rules naming the stand-in; the
    child Jobs carry no queue label, so jobs.mutate is never asked; the real job controller's
    pods are plumbed, and their stand-in is gone. A replicated Job left to restart OnFailure
    keeps its template as written."""
    jobset.install_crd(kontinue.plane)
    queue = await objects.queues(admin, namespace, opted_in=True)
    await objects.claim(admin, namespace)
    await objects.until_plumbing(admin, namespace, queue)
    template = objects.job(namespace, queue)["spec"]
    template.update(parallelism=1, completions=1)
    restarting = copy.deepcopy(template)
    restarting["template"]["spec"]["restartPolicy"] = "OnFailure"
    body = {
        "apiVersion": kueue_jobsets.API_VERSION,
        "kind": "JobSet",
        "metadata": {
            "name": "train",
            "namespace": namespace,
            "labels": {keys.KUEUE_QUEUE_NAME_LABEL: queue},
        },
        "spec": {
            "replicatedJobs": [
                {"name": "workers", "replicas": 2, "template": {"spec": template}},
                {"name": "driver", "replicas": 1, "template": {"spec": restarting}},
            ]
        },
    }
    before = objects.webhook_requests(kontinue.plane)
    created = await admin.create(kueue_jobsets.JOBSETS, body, namespace=namespace)
    workers, driver = (rj["template"]["spec"] for rj in created["spec"]["replicatedJobs"])
    assert workers["podReplacementPolicy"] == "Failed"
    assert workers["podFailurePolicy"]["rules"] == [
        job_plumbing.DISRUPTION_RULE,
        restore_program.POD_FAILURE_RULE,
    ]
    stand_in = workers["template"]["spec"]["initContainers"][0]
    assert stand_in["command"] == ["kontinue-restore", "--unplumbed"]
    assert "podFailurePolicy" not in driver
    assert "initContainers" not in driver["template"]["spec"]

    async with jobset.Controller(admin, namespace):
        await objects.until_plumbed_pods(
            admin, namespace, 3, "three plumbed pods of the JobSet's child Jobs"
        )
    assert objects.webhook_requests_since(kontinue.plane, before) == {
        "jobsets.mutate.kontinue.dev": 1,
        "pods.mutate.kontinue.dev": 3,
        "pods.validate.kontinue.dev": 3,
    }
    jobs = (await admin.list(resources.JOBS, namespace=namespace))["items"]
    assert sorted(j["metadata"]["name"] for j in jobs) == [
        "train-driver-0",
        "train-workers-0",
        "train-workers-1",
    ]
    for job in jobs:
        is_worker = job["metadata"]["name"].startswith("train-workers-")
        assert ("podFailurePolicy" in job["spec"]) is is_worker, job["metadata"]["name"]
    for pod in await objects.pods(admin, namespace):
        inits = pod["spec"].get("initContainers") or []
        assert all("--unplumbed" not in c.get("command", []) for c in inits), inits
