"""The real bridge (``queue_bridge.app.run``) against the API emulator over real HTTP.

Until the emulated cluster runs Kueue, the job controller and the kubelet, the tests write what
those components write, with their users and shapes:

- Kueue: the Workload of a batch/v1 Job (controller ownerReference to the Job), its admission,
  and the eviction patch — ``Evicted=True`` (reason ``Preempted``) and ``Preempted=True``
  (``InClusterQueue``) in one server-side apply as ``kueue-admission``
  (kueue ``pkg/workload/evict/evict.go``);
- the job controller: pod DELETE without a grace override (the pod's own
  ``terminationGracePeriodSeconds`` applies, §1.1 step C);
- the kubelet: the final pod status (phase ``Failed``, container ``terminated`` with exit code,
  reason and the termination message copied verbatim — shapes of
  tests/fixtures/bridge/kubelet-sigterm-*.json), then DELETE with grace 0, which our finalizer
  holds until the bridge removes it;
- the webhook: pods carry the ``kontinue.dev/lineage`` annotation and the
  ``kontinue.dev/checkpoint`` finalizer it adds at CREATE.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import json
import random
import socket
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest

from emulator import owners
from emulator.apiserver import server
from kontinue import keys, lineage
from kontinue.kube import api, cacheset, client, errors, resources, watching
from kontinue.models import base, checkpoint
from queue_bridge import app, settings
from tests import fixtures, kueue_writes
from tests.kueue_writes import condition as condition  # re-exported for the tests here
from tests.waiting import eventually as eventually  # re-exported for the tests here

Obj = dict[str, Any]
NS = "team-a"
SYSTEM = "kontinue-system"
BRIDGE_USER = f"system:serviceaccount:{SYSTEM}:kontinue-bridge"
JOB_CONTROLLER = "system:serviceaccount:kube-system:job-controller"
KUEUE_USER = kueue_writes.USER
FAST = watching.Backoff(initial=0.01, factor=2.0, cap=0.1, jitter=0.5)
CRDS = [
    *sorted((fixtures.MANIFESTS / "crds").glob("kontinue.dev_*.yaml")),
    *sorted((fixtures.UPSTREAM / "kueue/crds").glob("kueue.x-k8s.io_*.yaml")),
]
KUBELET_SAVED = fixtures.FIXTURES / "bridge/kubelet-sigterm-saved.json"
SAVED = json.dumps({"kontinue": "saved", "step": 42, "bytes": 1024})


def config(identity: str = "bridge-a", **overrides: Any) -> settings.Settings:
    values: dict[str, Any] = {
        "namespace": SYSTEM,
        "identity": identity,
        "lease_duration_seconds": 3,
        "lease_renew_seconds": 0.3,
        "lease_deadline_seconds": 2.0,
        "finalizer_margin_seconds": 2.0,
        "settle_seconds": 0.3,
        "resync_seconds": 60.0,
        "metrics_port": 0,  # /metrics stays reachable on the health socket
    }
    values.update(overrides)
    return settings.Settings(**values)


class Bridge:
    """One bridge replica running as a task (``app.run``), with its controller and metrics."""

    def __init__(
        self,
        task: asyncio.Task[int],
        stop: asyncio.Event,
        ctrl: app.Controller,
        port: int,
    ) -> None:
        self.task = task
        self.stop = stop
        self.controller = ctrl
        self.health_url = f"http://127.0.0.1:{port}"

    async def scrape(self) -> str:
        """``GET /metrics`` on the replica's health port."""
        async with (
            aiohttp.ClientSession() as session,
            session.get(self.health_url + "/metrics") as response,
        ):
            assert response.status == 200
            return await response.text()

    @property
    def leading(self) -> bool:
        return self.controller.leading

    async def shutdown(self) -> int | None:
        self.stop.set()
        with contextlib.suppress(asyncio.CancelledError):
            return await asyncio.wait_for(self.task, timeout=10)
        return None

    async def kill(self) -> None:
        """Cancel the replica's task (a crash, as far as the others can tell)."""
        self.task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self.task


def checkpoint_body(
    job: Obj, name: str, *, time: str, members: list[checkpoint.Member], **spec: Any
) -> checkpoint.Checkpoint:
    """A Checkpoint of ``job``'s lineage in ``NS``, labelled as the bridge labels its own, for a
    Kueue preemption at ``time``; ``spec`` adds further CheckpointSpec fields."""
    owner = checkpoint.Lineage(
        namespace=NS,
        owner_kind="Job",
        owner_name=job["metadata"]["name"],
        owner_uid=job["metadata"]["uid"],
    )
    return checkpoint.Checkpoint(
        metadata=base.ObjectMeta(
            name=name,
            namespace=NS,
            labels={
                keys.CHECKPOINT_LINEAGE_LABEL: owner.hash,
                keys.CHECKPOINT_OWNER_UID_LABEL: owner.owner_uid,
            },
        ),
        spec=checkpoint.CheckpointSpec(
            lineage=owner,
            trigger=checkpoint.Trigger(
                source=checkpoint.TriggerSource.KUEUE, reason="Preempted", time=time
            ),
            members=members,
            **spec,
        ),
    )


class Cluster:
    def __init__(self, emulated: server.ApiServer) -> None:
        self.emulated = emulated
        self.admin = emulated.client()
        self.kueue = emulated.client(KUEUE_USER)
        self.job_controller = emulated.client(JOB_CONTROLLER)
        self.bridges: list[Bridge] = []
        self._clients: list[Any] = []

    # -- the bridge ----------------------------------------------------------------------------

    async def start_bridge(self, identity: str = "bridge-a", **overrides: Any) -> Bridge:
        api_client = await client.api_client_from_dict(self.emulated.kubeconfig(BRIDGE_USER))
        self._clients.append(api_client)
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.bind(("127.0.0.1", 0))
        self._clients.append(sock)
        stop = asyncio.Event()
        started: asyncio.Future[app.Controller] = asyncio.get_running_loop().create_future()
        task = asyncio.create_task(
            app.run(
                config(identity, **overrides),
                stop=stop,
                api_client=api_client,
                sock=sock,
                started=started,
                cache_options=cacheset.CacheOptions(backoff=FAST, rng=random.Random(1)),
            )
        )
        ctrl = await asyncio.wait_for(started, timeout=10)
        bridge = Bridge(task, stop, ctrl, sock.getsockname()[1])
        self.bridges.append(bridge)
        return bridge

    async def leader(self, *candidates: Bridge) -> Bridge:
        async def one() -> bool:
            return sum(b.leading for b in candidates) == 1

        await eventually(one, what="exactly one leader")
        return next(b for b in candidates if b.leading)

    async def close(self) -> None:
        for bridge in self.bridges:
            if not bridge.task.done():
                await bridge.kill()
        for item in self._clients:
            if isinstance(item, socket.socket):
                item.close()
            else:
                await item.close()

    # -- objects -------------------------------------------------------------------------------

    async def queues(self, *, opted_in: bool = True, policy: str | None = None) -> None:
        labels = {keys.ENABLED_LABEL: "true"} if opted_in else {}
        if policy:
            labels[keys.POLICY_LABEL] = policy
        await self.admin.create(
            resources.CLUSTER_QUEUES,
            {
                "apiVersion": resources.CLUSTER_QUEUES.api_version,
                "kind": "ClusterQueue",
                "metadata": {"name": "cq", "labels": labels},
                "spec": {"cohortName": "team"},
            },
        )
        await self.admin.create(
            resources.LOCAL_QUEUES,
            {
                "apiVersion": resources.LOCAL_QUEUES.api_version,
                "kind": "LocalQueue",
                "metadata": {"name": "lq", "namespace": NS},
                "spec": {"clusterQueue": "cq"},
            },
        )

    async def job(self, name: str = "train", *, safe: bool = True) -> Obj:
        spec: Obj = {
            "suspend": False,
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [{"name": "main", "image": "registry.example/train:v1"}],
                }
            },
        }
        if safe:
            spec["podReplacementPolicy"] = "Failed"
            spec["podFailurePolicy"] = {
                "rules": [{"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget"}]}]
            }
        return await self.admin.create(
            resources.JOBS,
            {
                "apiVersion": "batch/v1",
                "kind": "Job",
                "metadata": {
                    "name": name,
                    "namespace": NS,
                    "labels": {keys.KUEUE_QUEUE_NAME_LABEL: "lq"},
                },
                "spec": spec,
            },
        )

    async def workload(self, job: Obj, *, checks: list[str] | None = None) -> Obj:
        """The Workload Kueue makes for ``job``, admitted to ``cq`` (quota reserved)."""
        template = copy.deepcopy(job["spec"]["template"])
        body = kueue_writes.workload(job, namespace=NS, queue="lq", count=2, template=template)
        await self.kueue.create(resources.WORKLOADS, body)
        status = kueue_writes.admitted(cluster_queue="cq", count=2)
        if checks:
            status["admissionChecks"] = [
                {
                    "name": check,
                    "state": "Pending",
                    "message": "",
                    "lastTransitionTime": base.format_time(base.now()),
                }
                for check in checks
            ]
        return await self.kueue_apply(body["metadata"]["name"], status)

    async def kueue_apply(self, name: str, status: Obj) -> Obj:
        """Kueue's status write: server-side apply on workloads/status as ``kueue-admission``."""
        return await kueue_writes.apply_status(self.kueue, name, NS, status)

    async def evict(self, workload: Obj, *, reason: str = "Preempted") -> Obj:
        """Kueue's preemption patch (step A): Evicted=True + Preempted=True, admission kept."""
        name = workload["metadata"]["name"]
        current = await self.admin.get(resources.WORKLOADS, name, namespace=NS)
        conditions = kueue_writes.evicted(current["status"]["conditions"], reason=reason)
        status: Obj = {"admission": current["status"]["admission"], "conditions": conditions}
        if current["status"].get("admissionChecks"):
            # resetChecksOnEviction: Pending, podSetUpdates dropped from Kueue's own apply
            status["admissionChecks"] = [
                {
                    "name": c["name"],
                    "state": "Pending",
                    "message": f"Reset to Pending after eviction. Previously: {c['state']}",
                    "lastTransitionTime": base.format_time(base.now()),
                }
                for c in current["status"]["admissionChecks"]
            ]
        return await self.kueue_apply(name, status)

    async def readmit(self, workload: Obj) -> Obj:
        """The next quota reservation (kueue.md §2): QuotaReserved=True, Evicted/Preempted
        flipped to False, checks still Pending so Admitted stays False."""
        name = workload["metadata"]["name"]
        current = await self.admin.get(resources.WORKLOADS, name, namespace=NS)
        conditions = [
            c
            for c in current["status"]["conditions"]
            if c["type"] not in ("Evicted", "Preempted", "QuotaReserved", "Admitted")
        ]
        conditions += [
            condition("QuotaReserved", "True", "QuotaReserved", "Quota reserved in cq"),
            condition("Admitted", "False", "UnsatisfiedAdmissionChecks", "waiting for checks"),
            condition("Evicted", "False", "QuotaReserved", "Previously: Preempted"),
            condition("Preempted", "False", "QuotaReserved", "Previously: InClusterQueue"),
        ]
        status: Obj = {"admission": current["status"]["admission"], "conditions": conditions}
        if current["status"].get("admissionChecks"):
            status["admissionChecks"] = [
                {k: c[k] for k in ("name", "state", "message", "lastTransitionTime")}
                for c in current["status"]["admissionChecks"]
            ]
        return await self.kueue_apply(name, status)

    async def put_checkpoint(
        self,
        job: Obj,
        name: str,
        *,
        minute: int,
        phase: str = "Succeeded",
        policy: str = "default",
        gpu_product: str | None = None,
        failed_restores: int = 0,
    ) -> Obj:
        """A terminal Checkpoint of ``job``'s lineage, as an earlier eviction left it."""
        body = checkpoint_body(
            job,
            name,
            time=f"2026-12-01T10:{minute:02}:00Z",
            members=[checkpoint.Member(pod_name=f"{name}-pod", pod_uid=f"uid-{name}")],
            fingerprint=checkpoint.Fingerprint(gpu_product=gpu_product),
            policy_name=policy,
        )
        await self.admin.create(resources.CHECKPOINTS, base.to_dict(body))
        status = {
            "phase": phase,
            "failedRestores": failed_restores,
            "members": [
                {"podName": f"{name}-pod", "state": "Saved" if phase == "Succeeded" else "Failed"}
            ],
        }
        return await self.admin.patch(
            resources.CHECKPOINTS,
            name,
            {"status": status},
            content_type=api.MERGE_PATCH,
            namespace=NS,
            subresource="status",
        )

    async def policy(self, name: str, spec: Obj) -> None:
        await self.admin.create(
            resources.CHECKPOINT_POLICIES,
            {
                "apiVersion": keys.API_VERSION,
                "kind": "CheckpointPolicy",
                "metadata": {"name": name},
                "spec": spec,
            },
        )

    async def get_checkpoint(self, name: str) -> checkpoint.Checkpoint:
        return checkpoint.load(await self.admin.get(resources.CHECKPOINTS, name, namespace=NS))

    async def restoring_from(self, pod: Obj, name: str) -> Obj:
        """``pod`` as the webhook plumbs a pod that restores from Checkpoint ``name``."""
        patched: Obj = await self.admin.patch(
            resources.PODS,
            pod["metadata"]["name"],
            {"metadata": {"annotations": {keys.RESTORE_FROM_ANNOTATION: name}}},
            content_type=api.MERGE_PATCH,
            namespace=NS,
        )
        return patched

    async def pods(self, job: Obj, n: int = 2, *, grace: int = 30) -> list[Obj]:
        """Running pods of ``job`` as the job controller creates and the webhook plumbs them."""
        owner = checkpoint.Lineage(
            namespace=NS,
            owner_kind="Job",
            owner_name=job["metadata"]["name"],
            owner_uid=job["metadata"]["uid"],
        )
        created = []
        for index in range(n):
            name = f"{job['metadata']['name']}-{index}-{random.randrange(16**5):05x}"
            body: Obj = {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {
                    "name": name,
                    "namespace": NS,
                    "labels": {
                        keys.JOB_NAME_LABEL: job["metadata"]["name"],
                        keys.PLUMBED_LABEL: keys.PLUMBED_VALUE,
                    },
                    "annotations": {
                        keys.LINEAGE_ANNOTATION: lineage.annotation_value(owner),
                        keys.JOB_COMPLETION_INDEX_ANNOTATION: str(index),
                    },
                    "finalizers": [keys.JOB_TRACKING_FINALIZER, keys.CHECKPOINT_FINALIZER],
                    "ownerReferences": [owners.controller_ref(job)],
                },
                "spec": {
                    "restartPolicy": "Never",
                    "terminationGracePeriodSeconds": grace,
                    "nodeName": f"node-{index + 1}",
                    "containers": [{"name": "main", "image": "registry.example/train:v1"}],
                },
            }
            pod = await self.job_controller.create(resources.PODS, body)
            kubelet = self.emulated.client(f"system:node:node-{index + 1}")
            pod["status"] = {
                "phase": "Running",
                "containerStatuses": [
                    {
                        "name": "main",
                        "ready": True,
                        "restartCount": 0,
                        "state": {"running": {"startedAt": base.format_time(base.now())}},
                    }
                ],
            }
            created.append(await kubelet.replace(resources.PODS, pod, subresource="status"))
        return created

    async def delete_pod(self, pod: Obj) -> Obj:
        """The job controller's DELETE after the suspend: the pod's own grace period."""
        return await self.job_controller.delete(
            resources.PODS, pod["metadata"]["name"], namespace=NS
        )

    async def terminate(
        self,
        pod: Obj,
        *,
        exit_code: int = 143,
        message: str | None = SAVED,
        reason: str = "Error",
        delete: bool = True,
    ) -> None:
        """The kubelet's final status (fixture shape), then its DELETE with grace 0."""
        name = pod["metadata"]["name"]
        node = pod["spec"]["nodeName"]
        kubelet = self.emulated.client(f"system:node:{node}")
        current = await kubelet.get(resources.PODS, name, namespace=NS)
        recorded = _kubelet_shape()
        status = copy.deepcopy(recorded["status"]["containerStatuses"][0])
        terminated: Obj = {
            "exitCode": exit_code,
            "reason": reason,
            "startedAt": current["status"]["containerStatuses"][0]["state"]["running"]["startedAt"],
            "finishedAt": base.format_time(base.now()),
            "containerID": status["containerID"],
        }
        if message is not None:
            terminated["message"] = message
        status["state"] = {"terminated": terminated}
        current["status"] = {
            "phase": "Succeeded" if exit_code == 0 else "Failed",
            "containerStatuses": [status],
        }
        await kubelet.replace(resources.PODS, current, subresource="status")
        finalizers = [
            f for f in current["metadata"].get("finalizers", []) if f != keys.JOB_TRACKING_FINALIZER
        ]
        if keys.JOB_TRACKING_FINALIZER in current["metadata"].get("finalizers", []):
            # the job controller drops its tracking finalizer once it counted the pod
            await self.job_controller.patch(
                resources.PODS,
                name,
                {"metadata": {"finalizers": finalizers}},
                content_type=api.MERGE_PATCH,
                namespace=NS,
            )
        if delete:
            with contextlib.suppress(errors.NotFound):
                await kubelet.delete(
                    resources.PODS,
                    name,
                    namespace=NS,
                    grace_period_seconds=0,
                    preconditions={"uid": current["metadata"]["uid"]},
                )

    # -- reading -------------------------------------------------------------------------------

    async def checkpoints(self) -> list[checkpoint.Checkpoint]:
        listed = await self.admin.list(resources.CHECKPOINTS, namespace=NS)
        return [checkpoint.load(item) for item in listed["items"]]

    async def one_checkpoint(self) -> checkpoint.Checkpoint:
        found = await self.checkpoints()
        assert len(found) == 1, [cp.name for cp in found]
        return found[0]

    async def pod_exists(self, name: str) -> bool:
        try:
            await self.admin.get(resources.PODS, name, namespace=NS)
        except errors.NotFound:
            return False
        return True

    async def events(self, *, reason: str | None = None) -> list[Obj]:
        listed = await self.admin.list(resources.EVENTS, namespace=NS)
        return [e for e in listed["items"] if reason is None or e["reason"] == reason]

    async def phase(self) -> str:
        found = await self.checkpoints()
        return found[0].status.phase.value if len(found) == 1 else ""


_SHAPE: Obj = {}


def _kubelet_shape() -> Obj:
    """The recorded kubelet pod (tests/fixtures/bridge/kubelet-sigterm-saved.json), read once."""
    if not _SHAPE:
        with KUBELET_SAVED.open() as stream:
            _SHAPE.update(json.load(stream))
    return _SHAPE


@pytest.fixture
async def cluster() -> AsyncIterator[Cluster]:
    async with server.ApiServer(bookmark_interval=0.2) as emulated:
        for path in CRDS:
            emulated.install_crd(fixtures.load_one(path))
        admin = emulated.client()
        for namespace in (NS, SYSTEM):
            await admin.create(resources.NAMESPACES, {"metadata": {"name": namespace}})
        env = Cluster(emulated)
        try:
            yield env
        finally:
            await env.close()
