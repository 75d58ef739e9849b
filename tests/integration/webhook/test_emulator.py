"""The real webhook process, wired the way it runs in a cluster, against the API emulator.

``webhook.__main__.serve`` runs with its watch caches on the emulator (through the real
kubernetes-asyncio client), writes its certificate into the Secret from manifests/webhook, and
patches caBundle into the configurations from manifests/webhook/webhooks.yaml; the emulator then
calls it over HTTPS, verifying that caBundle against ``kontinue-webhook.kontinue-system.svc``, as
kube-apiserver does. (The emulator does not evaluate matchConditions: it calls the webhook as if
they matched, so the webhook's own no-op path is what leaves other pods alone here.)

Flow covered: a Kueue Job is made preemption-safe on CREATE, the pods the job controller creates
for it are plumbed, a Succeeded Checkpoint of its lineage makes the next pod restore, and every
kind of denial comes back through the emulator as the error a client would see.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import copy
import ssl
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest

from emulator import owners
from emulator.apiserver import server
from emulator.demo import install
from kontinue import keys, lineage
from kontinue import restore as restore_program
from kontinue.kube import api, cacheset, errors, resources, watching
from kontinue.models import checkpoint
from tests import fixtures
from tests.realcp import objects  # the checkpoint claim, as the real tier creates it
from tests.unit.webhook import support
from tests.waiting import eventually as eventually  # re-exported for the tests here
from webhook import job_plumbing, plumbing, settings

Obj = dict[str, Any]
NS = "team-a"
SYSTEM = "kontinue-system"
WEBHOOK_USER = f"system:serviceaccount:{SYSTEM}:kontinue-webhook"
BRIDGE_USER = f"system:serviceaccount:{SYSTEM}:kontinue-bridge"
JOB_CONTROLLER = "system:serviceaccount:kube-system:job-controller"
FAST = watching.Backoff(initial=0.01, factor=2.0, cap=0.1, jitter=0.5)
OPTIONS = cacheset.CacheOptions(backoff=FAST)
CRDS = [  # besides ours (emulator/demo/install.py)
    fixtures.UPSTREAM / "kueue/crds/kueue.x-k8s.io_clusterqueues.yaml",
    fixtures.UPSTREAM / "kueue/crds/kueue.x-k8s.io_localqueues.yaml",
    fixtures.UPSTREAM / "volcano/crds/scheduling.volcano.sh_queues.yaml",
    fixtures.UPSTREAM / "volcano/crds/scheduling.volcano.sh_podgroups.yaml",
]


class Cluster:
    def __init__(self, emulated: server.ApiServer, url: str) -> None:
        self.emulated = emulated
        self.url = url
        self.admin = emulated.client()
        self.job_controller = emulated.client(JOB_CONTROLLER)
        self.bridge = emulated.client(BRIDGE_USER)
        self.serving: asyncio.Task[int] | None = None

    async def trust(self) -> bytes:
        secret = await self.admin.get(resources.SECRETS, "kontinue-webhook-tls", namespace=SYSTEM)
        return base64.b64decode(secret["data"]["ca.crt"])


CONFIG = install.webhook_config(image="registry.example/kontinue:test")


@pytest.fixture
async def cluster() -> AsyncIterator[Cluster]:
    async with running(CONFIG) as started:
        yield started


@contextlib.asynccontextmanager
async def running(config: settings.Settings) -> AsyncIterator[Cluster]:
    """The emulator with the webhook's manifests, and ``webhook.__main__.serve`` run with
    ``config`` until the block ends."""
    async with server.ApiServer(bookmark_interval=0.2) as emulated:
        await install.install(emulated)
        admin = emulated.client()
        for path in CRDS:
            emulated.install_crd(fixtures.load_one(path))
        await admin.create(
            resources.NAMESPACES,
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}},
        )
        await objects.claim(admin, NS)  # the default policy's checkpoint claim (webhook/claims.py)
        await admin.create(  # the recorded Job's pods use it
            resources.PRIORITY_CLASSES,
            {
                "apiVersion": "scheduling.k8s.io/v1",
                "kind": "PriorityClass",
                "metadata": {"name": "low"},
                "value": 100,
            },
        )
        stop = asyncio.Event()
        hook = await install.start_webhook(
            emulated,
            config,
            stop=stop,
            cache_options=OPTIONS,
        )
        serving, url = hook.task, hook.url
        running = Cluster(emulated, url)
        running.serving = serving
        try:
            await eventually(lambda: _ready(running, serving))
            yield running
        finally:
            await install.shut_down([hook], timeout=10)


async def _ready(cluster: Cluster, serving: asyncio.Task[int]) -> bool:
    if serving.done():
        serving.result()  # raise what killed it
    try:
        trust = await cluster.trust()
    except KeyError:
        return False
    context = ssl.create_default_context(cadata=trust.decode())
    try:
        async with (
            aiohttp.ClientSession() as session,
            session.get(
                cluster.url + "/readyz",
                ssl=context,
                server_hostname="kontinue-webhook.kontinue-system.svc",
            ) as response,
        ):
            return response.status == 200
    except aiohttp.ClientConnectionError:
        return False


async def test_certificate_secret_and_ca_bundle_are_written(cluster: Cluster) -> None:
    secret = await cluster.admin.get(resources.SECRETS, "kontinue-webhook-tls", namespace=SYSTEM)
    assert sorted(secret["data"]) == ["ca.crt", "ca.key", "tls.crt", "tls.key"]
    encoded = secret["data"]["ca.crt"]
    for resource in (resources.MUTATING_WEBHOOKS, resources.VALIDATING_WEBHOOKS):
        configuration = await cluster.admin.get(resource, "kontinue-webhook")
        assert configuration["webhooks"]
        for hook in configuration["webhooks"]:
            assert hook["clientConfig"]["caBundle"] == encoded, hook["name"]


async def _queues(cluster: Cluster) -> None:
    await cluster.admin.create(
        resources.CLUSTER_QUEUES,
        {
            "apiVersion": resources.CLUSTER_QUEUES.api_version,
            "kind": "ClusterQueue",
            "metadata": {"name": "cq-gpu", "labels": {keys.ENABLED_LABEL: "true"}},
            "spec": {},
        },
    )
    await cluster.admin.create(
        resources.LOCAL_QUEUES,
        {
            "apiVersion": resources.LOCAL_QUEUES.api_version,
            "kind": "LocalQueue",
            "metadata": {"name": "team-a", "namespace": NS},
            "spec": {"clusterQueue": "cq-gpu"},
        },
    )


def _job() -> Obj:
    job = support.recorded_object("01-")
    job["metadata"] = {
        "name": "train-a",
        "namespace": NS,
        "labels": {keys.KUEUE_QUEUE_NAME_LABEL: "team-a"},
    }
    del job["spec"]["podFailurePolicy"]
    del job["spec"]["podReplacementPolicy"]
    del job["status"]
    return job


def _pod_for(job: Obj, namespace: str = NS) -> Obj:
    """The pod the job controller creates once Kueue admitted the Job (labels stamped)."""
    template = copy.deepcopy(job["spec"]["template"])
    meta = template["metadata"]
    meta["labels"].update(
        {
            keys.KUEUE_CLUSTER_QUEUE_LABEL: "cq-gpu",
            keys.KUEUE_LOCAL_QUEUE_LABEL: "team-a",
            keys.JOB_NAME_LABEL: job["metadata"]["name"],
        }
    )
    meta.update(
        {
            "generateName": job["metadata"]["name"] + "-",
            "namespace": namespace,
            "finalizers": [keys.JOB_TRACKING_FINALIZER],
            "ownerReferences": [owners.controller_ref(job)],
        }
    )
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": template["spec"]}


def _env(container: Obj) -> dict[str, Obj]:
    return {e["name"]: e for e in container.get("env") or []}


async def test_kueue_job_and_its_pods_are_mutated_on_creation(cluster: Cluster) -> None:
    await _queues(cluster)

    async def job_is_patched() -> bool:  # the webhook's caches have caught up with the queues
        dry = await cluster.admin.create(resources.JOBS, _job(), dry_run=True)
        return bool(dry["spec"].get("podReplacementPolicy") == "Failed")

    await eventually(job_is_patched)
    job = await cluster.admin.create(resources.JOBS, _job())
    assert job["spec"]["podReplacementPolicy"] == "Failed"
    assert job["spec"]["podFailurePolicy"]["rules"] == [
        job_plumbing.DISRUPTION_RULE,
        restore_program.POD_FAILURE_RULE,
    ]

    pod = await cluster.job_controller.create(resources.PODS, _pod_for(job))
    pod_lineage = checkpoint.Lineage(
        namespace=NS, owner_kind="Job", owner_name="train-a", owner_uid=job["metadata"]["uid"]
    )
    annotations = pod["metadata"]["annotations"]
    assert annotations[keys.LINEAGE_ANNOTATION] == lineage.annotation_value(pod_lineage)
    assert "no checkpoint" in annotations[keys.COLD_START_REASON_ANNOTATION]
    assert pod["metadata"]["finalizers"] == [keys.JOB_TRACKING_FINALIZER, keys.CHECKPOINT_FINALIZER]
    assert pod["spec"]["terminationGracePeriodSeconds"] == 120
    env = _env(pod["spec"]["containers"][0])
    assert env[keys.ENV_POD_UID]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.uid"
    assert env[keys.ENV_CHECKPOINT_DIR]["value"] == (
        f"/kontinue/checkpoints/{lineage.lineage_dir(pod_lineage)}/$(KONTINUE_POD_UID)"
    )
    assert {
        "name": keys.CHECKPOINT_VOLUME,
        "persistentVolumeClaim": {"claimName": "kontinue"},
    } in pod["spec"]["volumes"]
    calls = [c for c in cluster.emulated.webhook_calls if c["request"]["kind"]["kind"] == "Pod"]
    assert {c["request"]["operation"] for c in calls} == {"CREATE"}

    # The bridge records a good checkpoint of this lineage; the next pod restores from it.
    body = support.make_checkpoint("train-a-1", lineage=pod_lineage).model_dump(
        mode="json", by_alias=True, exclude_none=True
    )
    status = body.pop("status")
    await cluster.bridge.create(resources.CHECKPOINTS, body)
    await cluster.bridge.patch(
        resources.CHECKPOINTS,
        "train-a-1",
        {"status": status},
        namespace=NS,
        subresource="status",
        content_type=api.MERGE_PATCH,
    )

    async def restores() -> bool:
        """Until the cache sees the status patch the Checkpoint is Pending: a dry run shows a
        *wait* for it (the previous incarnation still saving); then a plain restore."""
        dry = await cluster.job_controller.create(resources.PODS, _pod_for(job), dry_run=True)
        inits = dry["spec"].get("initContainers") or [{}]
        return bool(_env(inits[0]).get(plumbing.ENV_RESTORE_SOURCE, {}).get("value"))

    await eventually(restores)
    pod = await cluster.job_controller.create(resources.PODS, _pod_for(job))
    init = pod["spec"]["initContainers"][0]
    assert init["name"] == keys.RESTORE_INIT_CONTAINER
    assert pod["metadata"]["annotations"][keys.RESTORE_FROM_ANNOTATION] == "train-a-1"
    assert _env(init)[keys.ENV_WAIT_FOR]["value"] == ""
    assert _env(init)[plumbing.ENV_RESTORE_SOURCE]["value"].startswith(
        f"/kontinue/checkpoints/{lineage.lineage_dir(pod_lineage)}/"
    )
    assert (
        _env(pod["spec"]["containers"][0])[keys.ENV_RESTORE_FROM]["value"] == plumbing.RESTORE_LINK
    )

    # A user may not rewrite the restore annotation afterwards (403 through the emulator).
    alice = cluster.emulated.client("alice")
    with pytest.raises(errors.Forbidden, match="reserved for Kontinue"):
        await alice.patch(
            resources.PODS,
            pod["metadata"]["name"],
            {"metadata": {"annotations": {keys.RESTORE_FROM_ANNOTATION: "someone-elses"}}},
            namespace=NS,
            content_type=api.MERGE_PATCH,
        )


async def test_pods_outside_opted_in_queues_are_untouched(cluster: Cluster) -> None:
    plain = support.recorded_object("35-")
    plain["metadata"] = {"name": "plain", "namespace": NS}
    created = await cluster.admin.create(resources.PODS, plain)
    assert "annotations" not in created["metadata"]
    assert created["metadata"].get("finalizers") is None
    assert "env" not in created["spec"]["containers"][0]


async def test_a_bare_pod_with_the_checkpoint_finalizer_is_refused(cluster: Cluster) -> None:
    """Issue 11 item 8: docs/api.md says users may not set ``kontinue.dev/checkpoint``; the
    recorded bare pod (fixture 35) carried it and was created."""
    bare = support.recorded_object("35-")
    bare["metadata"] = {"name": "bare", "namespace": NS, "finalizers": [keys.CHECKPOINT_FINALIZER]}
    with pytest.raises(errors.Forbidden, match="metadata.finalizers"):
        await cluster.admin.create(resources.PODS, bare)


async def test_without_its_claim_a_namespace_gets_untouched_pods_and_a_warning_event(
    cluster: Cluster,
) -> None:
    """webhook/claims.py through the emulator: in a namespace without the default policy's
    claim an opted-in Job and its pod are admitted untouched (nothing that would keep the pod
    Pending) and a ``CheckpointVolumeMissing`` Warning lands on the Job; once the claim exists,
    the next pod is plumbed with it."""
    bare = "team-b"
    await cluster.admin.create(
        resources.NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": bare}}
    )
    await cluster.admin.create(  # before team-a's: the cache sees it first (one watch, in order)
        resources.LOCAL_QUEUES,
        {
            "apiVersion": resources.LOCAL_QUEUES.api_version,
            "kind": "LocalQueue",
            "metadata": {"name": "team-a", "namespace": bare},
            "spec": {"clusterQueue": "cq-gpu"},
        },
    )
    await _queues(cluster)

    async def caught_up() -> bool:
        dry = await cluster.admin.create(resources.JOBS, _job(), dry_run=True)
        return bool(dry["spec"].get("podReplacementPolicy") == "Failed")

    await eventually(caught_up, within=20, what="the webhook's view of the queues")
    body = _job()
    body["metadata"]["namespace"] = bare
    job = await cluster.admin.create(resources.JOBS, body)
    assert job["spec"].get("podReplacementPolicy") != "Failed"
    assert "podFailurePolicy" not in job["spec"]
    assert "initContainers" not in job["spec"]["template"]["spec"]

    pod = await cluster.job_controller.create(resources.PODS, _pod_for(job, bare))
    meta, spec = pod["metadata"], pod["spec"]
    assert keys.LINEAGE_ANNOTATION not in (meta.get("annotations") or {})
    assert keys.PLUMBED_LABEL not in meta["labels"]
    assert meta["finalizers"] == [keys.JOB_TRACKING_FINALIZER]
    assert "initContainers" not in spec
    assert all(v["name"] != keys.CHECKPOINT_VOLUME for v in spec.get("volumes") or [])
    assert keys.ENV_CHECKPOINT_DIR not in _env(spec["containers"][0])

    async def warned() -> list[Obj]:
        listed = await cluster.admin.list(resources.EVENTS, namespace=bare)
        return [e for e in listed["items"] if e["reason"] == keys.EVENT_CHECKPOINT_VOLUME_MISSING]

    await eventually(warned, within=20, what="the CheckpointVolumeMissing Event")
    (event,) = await warned()
    assert event["type"] == "Warning"
    assert event["involvedObject"]["kind"] == "Job"
    assert event["involvedObject"]["uid"] == job["metadata"]["uid"]
    assert f'namespace "{bare}" has no PersistentVolumeClaim "kontinue"' in event["message"]
    assert 'CheckpointPolicy "default"' in event["message"]

    await objects.claim(cluster.admin, bare)

    async def plumbed() -> bool:
        dry = await cluster.job_controller.create(resources.PODS, _pod_for(job, bare), dry_run=True)
        return keys.PLUMBED_LABEL in dry["metadata"]["labels"]

    await eventually(plumbed, within=20, what="the webhook's view of the new claim")
    pod = await cluster.job_controller.create(resources.PODS, _pod_for(job, bare))
    assert {
        "name": keys.CHECKPOINT_VOLUME,
        "persistentVolumeClaim": {"claimName": "kontinue"},
    } in pod["spec"]["volumes"]
    assert pod["metadata"]["finalizers"] == [
        keys.JOB_TRACKING_FINALIZER,
        keys.CHECKPOINT_FINALIZER,
    ]


async def test_a_dry_run_pod_leaves_no_event(cluster: Cluster) -> None:
    """A pod created with ``dryRun`` is admitted by the webhook (``sideEffects: None``,
    manifests/webhook/webhooks.yaml: the apiserver calls it on dry runs too) but is never
    stored, so the ``ColdStart`` and ``NotPlumbed`` Events it would cause must not be written
    (webhook/observing.py). The same pods of another Job created for real are told: once their
    Events are there, any of the dry runs', counted earlier, would have been written too."""
    await _queues(cluster)

    async def caught_up() -> bool:
        dry = await cluster.admin.create(resources.JOBS, _job(), dry_run=True)
        return bool(dry["spec"].get("podReplacementPolicy") == "Failed")

    await eventually(caught_up, within=20, what="the webhook's view of the queues")
    jobs: dict[str, Obj] = {}
    for name in ("dry", "real"):
        body = _job()
        body["metadata"]["name"] = name
        jobs[name] = await cluster.admin.create(resources.JOBS, body)

    def unidentified(job: Obj) -> Obj:
        """A pod with no member identity (a malformed completion index): left untouched."""
        pod = _pod_for(job)
        pod["metadata"].setdefault("annotations", {})[keys.JOB_COMPLETION_INDEX_ANNOTATION] = "x"
        return pod

    for _ in range(3):
        cold = await cluster.job_controller.create(
            resources.PODS, _pod_for(jobs["dry"]), dry_run=True
        )
        assert keys.COLD_START_REASON_ANNOTATION in cold["metadata"]["annotations"]
        left = await cluster.job_controller.create(
            resources.PODS, unidentified(jobs["dry"]), dry_run=True
        )
        assert keys.PLUMBED_LABEL not in left["metadata"]["labels"]
    await cluster.job_controller.create(resources.PODS, _pod_for(jobs["real"]))
    await cluster.job_controller.create(resources.PODS, unidentified(jobs["real"]))

    async def told() -> list[Obj]:
        listed = await cluster.admin.list(resources.EVENTS, namespace=NS)
        wanted = (keys.EVENT_COLD_START, keys.EVENT_NOT_PLUMBED)
        return [e for e in listed["items"] if e["reason"] in wanted]

    async def both_told() -> bool:
        return len({e["reason"] for e in await told()}) == 2

    await eventually(both_told, within=30, what="ColdStart and NotPlumbed Events of the real pods")
    events = await told()
    assert sorted((e["involvedObject"]["name"], e["reason"], e["count"]) for e in events) == [
        ("real", keys.EVENT_COLD_START, 1),
        ("real", keys.EVENT_NOT_PLUMBED, 1),
    ]
    (not_plumbed,) = [e for e in events if e["reason"] == keys.EVENT_NOT_PLUMBED]
    assert "no member identity" in not_plumbed["message"]
    assert not_plumbed["type"] == "Warning"


async def test_denials_reach_the_client_with_their_code(cluster: Cluster) -> None:
    both_storages = {
        "apiVersion": keys.API_VERSION,
        "kind": "CheckpointPolicy",
        "metadata": {"name": "both"},
        "spec": {"storage": {"pvc": {"claimName": "x"}, "hostPath": {"path": "/x"}}},
    }
    with pytest.raises(errors.Invalid, match="checkpointpolicies.validate.kontinue.dev") as raised:
        await cluster.admin.create(resources.CHECKPOINT_POLICIES, both_storages)
    assert "exactly one of pvc or hostPath" in str(raised.value)

    bad_label = {
        "apiVersion": resources.CLUSTER_QUEUES.api_version,
        "kind": "ClusterQueue",
        "metadata": {
            "name": "cq-typo",
            "labels": {keys.ENABLED_LABEL: "true", keys.POLICY_LABEL: "no-such-policy"},
        },
        "spec": {},
    }
    with pytest.raises(errors.Invalid, match="no-such-policy"):
        await cluster.admin.create(resources.CLUSTER_QUEUES, bad_label)

    forged = support.recorded_object("35-")
    forged["metadata"] = {
        "name": "forged",
        "namespace": NS,
        "annotations": {keys.RESTORE_FROM_ANNOTATION: "not-mine"},
    }
    with pytest.raises(errors.Forbidden, match="pods.validate.kontinue.dev"):
        await cluster.admin.create(resources.PODS, forged)


async def test_a_watch_task_that_ends_ends_the_webhook(cluster: Cluster) -> None:
    """A root task ending on its own (here: cancelled by someone else) is not swallowed: the
    webhook stops serving rather than answer from a cache that no longer follows the cluster."""
    assert cluster.serving is not None
    [watch] = [t for t in asyncio.all_tasks() if t.get_name() == "watch:checkpoints.kontinue.dev"]
    watch.cancel()
    assert await asyncio.wait_for(cluster.serving, 10) == 1
