"""End to end on the emulated cluster: a Kueue Job's pods, mutated by the real webhook on
creation, run on the emulated kubelet with the plumbed env and checkpoint volume.

The emulated cluster (emulator/cluster.py) runs the Job controller, scheduler and a kubelet that
starts containers as real local processes, with the emulated Kueue admitting the Job; the webhook
runs as ``webhook.__main__.serve`` against that API and is called by it over HTTPS. The container
prints what it sees and writes a file into ``KONTINUE_CHECKPOINT_DIR``: the file must land in the
lineage's directory on the shared checkpoint volume, in a sub-directory named by the pod's UID
(the downward-API expansion a real kubelet does, recorded in tests/fixtures/kubelet/, recording 10).
"""

from __future__ import annotations

import asyncio
import base64
import ssl
from pathlib import Path
from typing import Any

import aiohttp

from emulator import cluster, gpus, nodes
from emulator.demo import install
from emulator.kueue import controller
from kontinue import keys, lineage
from kontinue.kube import errors, resources
from kontinue.models import checkpoint
from tests import fixtures
from tests.integration.webhook.test_emulator import OPTIONS, SYSTEM
from tests.waiting import eventually

Obj = dict[str, Any]
NS = "default"
POLICY = {
    "apiVersion": keys.API_VERSION,
    "kind": "CheckpointPolicy",
    "metadata": {"name": "dev"},
    "spec": {
        "storage": {"hostPath": {"path": "/var/kontinue"}, "mountPath": "/ckpt"},
        "minGracePeriodSeconds": 45,
    },
}
SCRIPT = """
import os, pathlib
d = pathlib.Path(os.environ["KONTINUE_CHECKPOINT_DIR"])
d.mkdir(parents=True, exist_ok=True)
(d / "hello").write_text(os.environ["KONTINUE_POD_UID"])
print("CHECKPOINT_DIR=" + str(d))
print("POD_UID=" + os.environ["KONTINUE_POD_UID"])
"""


def _job() -> Obj:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": "hello",
            "namespace": NS,
            "labels": {keys.KUEUE_QUEUE_NAME_LABEL: "team"},
        },
        "spec": {
            "backoffLimit": 0,
            "template": {
                "metadata": {"labels": {"app": "hello"}},
                "spec": {
                    "restartPolicy": "Never",
                    "priorityClassName": "low",
                    "containers": [
                        {
                            "name": "main",
                            "image": "kontinue/reference-workload:dev",
                            "command": ["python", "-c", SCRIPT],
                            "resources": {
                                "requests": {"cpu": "1", "memory": "1Gi"},
                                "limits": {keys.GPU_RESOURCE: "1"},
                            },
                        }
                    ],
                },
            },
        },
    }


def _cluster_queue() -> Obj:
    quotas = [
        {"name": "cpu", "nominalQuota": 32},
        {"name": "memory", "nominalQuota": "128Gi"},
        {"name": keys.GPU_RESOURCE, "nominalQuota": 4},
    ]
    group = {
        "coveredResources": ["cpu", "memory", keys.GPU_RESOURCE],
        "flavors": [{"name": "h100", "resources": quotas}],
    }
    return {
        "apiVersion": resources.CLUSTER_QUEUES.api_version,
        "kind": "ClusterQueue",
        "metadata": {
            "name": "gpu-cq",
            "labels": {keys.ENABLED_LABEL: "true", keys.POLICY_LABEL: "dev"},
        },
        "spec": {"namespaceSelector": {}, "resourceGroups": [group]},
    }


async def _queues(admin: Any) -> None:
    """A PriorityClass, one ResourceFlavor, a ClusterQueue with 4 GPUs that opts in with policy
    ``dev``, and the LocalQueue ``team`` (shapes of Kueue's single-clusterqueue-setup example)."""
    await admin.create(
        resources.PRIORITY_CLASSES,
        {
            "apiVersion": "scheduling.k8s.io/v1",
            "kind": "PriorityClass",
            "metadata": {"name": "low"},
            "value": 100,
        },
    )
    await admin.create(
        resources.RESOURCE_FLAVORS,
        {
            "apiVersion": resources.RESOURCE_FLAVORS.api_version,
            "kind": "ResourceFlavor",
            "metadata": {"name": "h100"},
            "spec": {"nodeLabels": {keys.GPU_PRODUCT_LABEL: gpus.H100.product}},
        },
    )
    await admin.create(resources.CLUSTER_QUEUES, _cluster_queue())
    await admin.create(
        resources.LOCAL_QUEUES,
        {
            "apiVersion": resources.LOCAL_QUEUES.api_version,
            "kind": "LocalQueue",
            "metadata": {"name": "team", "namespace": NS},
            "spec": {"clusterQueue": "gpu-cq"},
        },
    )


async def _ready(url: str, trust: bytes) -> bool:
    context = ssl.create_default_context(cadata=trust.decode())
    try:
        async with (
            aiohttp.ClientSession() as session,
            session.get(
                url + "/readyz", ssl=context, server_hostname="kontinue-webhook.kontinue-system.svc"
            ) as response,
        ):
            return response.status == 200
    except aiohttp.ClientConnectionError:
        return False


async def test_kueue_job_pods_run_plumbed_on_the_emulated_kubelet(tmp_path: Path) -> None:
    spec = nodes.NodeSpec("gpu-a", gpu=gpus.GpuProfile(count=4))
    async with cluster.Cluster(nodes=[spec], workdir=tmp_path) as c:
        controller.install_crds(c.api, fixtures.UPSTREAM / "kueue" / "crds")
        controller.install_crds(c.api, fixtures.FIXTURES / "kueue-emulation")
        await install.install(c.api)
        admin = c.client()
        stop = asyncio.Event()
        hook = await install.start_webhook(
            c.api, install.webhook_config(("kueue",)), stop=stop, cache_options=OPTIONS
        )
        serving, url = hook.task, hook.url
        try:
            async with controller.Kueue(c.api):

                async def webhook_ready() -> bool:
                    assert not serving.done(), serving
                    secret = await admin.get(
                        resources.SECRETS, "kontinue-webhook-tls", namespace=SYSTEM
                    )
                    data = secret.get("data") or {}
                    return "ca.crt" in data and await _ready(url, base64.b64decode(data["ca.crt"]))

                await eventually(webhook_ready, within=20)
                # (validated by the webhook, failurePolicy Fail: only possible once it serves)
                await admin.create(resources.CHECKPOINT_POLICIES, POLICY)

                async def policy_known() -> bool:  # the queue label naming it is validated
                    try:
                        await admin.create(resources.CLUSTER_QUEUES, _cluster_queue(), dry_run=True)
                    except errors.Invalid:
                        return False
                    return True

                await eventually(policy_known, within=20)
                await _queues(admin)

                async def job_is_patched() -> bool:  # caches have the labelled queue
                    dry = await admin.create(resources.JOBS, _job(), dry_run=True)
                    return bool(dry["spec"].get("podReplacementPolicy") == "Failed")

                await eventually(job_is_patched, within=20)
                job = await admin.create(resources.JOBS, _job())
                assert job["spec"]["podFailurePolicy"]["rules"][0]["action"] == "Ignore"
                done = await c.wait_for(
                    resources.JOBS, "hello", NS, cluster.job_condition("Complete"), timeout=60
                )
                assert done is not None
                assert done["status"]["succeeded"] == 1

                (pod,) = await c.pods(NS, labels={keys.JOB_NAME_LABEL: "hello"})
                uid = pod["metadata"]["uid"]
                pod_lineage = checkpoint.Lineage(
                    namespace=NS,
                    owner_kind="Job",
                    owner_name="hello",
                    owner_uid=job["metadata"]["uid"],
                )
                assert pod["metadata"]["annotations"][keys.LINEAGE_ANNOTATION] == (
                    lineage.annotation_value(pod_lineage)
                )
                assert keys.CHECKPOINT_FINALIZER in pod["metadata"]["finalizers"]
                assert (
                    pod["spec"]["terminationGracePeriodSeconds"] == 45
                )  # raised from the default 30
                assert pod["status"]["phase"] == "Succeeded"

                written = (
                    c.shared_root
                    / "hostpath/var/kontinue"
                    / lineage.lineage_dir(pod_lineage)
                    / uid
                    / "hello"
                )
                assert written.read_text() == uid
                container = c.container(pod, "main")
                assert container is not None
                log = container.spec.log_path.read_text()
                assert f"POD_UID={uid}" in log
                assert f"/{lineage.lineage_dir(pod_lineage)}/{uid}\n" in log
        finally:
            await install.shut_down([hook], timeout=10)
