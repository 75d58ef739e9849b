"""Issue 17, item 1 and 2, on the emulated cluster with Volcano only (no Kueue CRDs anywhere):
the real webhook (over HTTPS, called by the emulated apiserver) and the real bridge, the emulated
Volcano scheduler (preempt within a queue, reclaim across queues) and vc-controller
(emulator/volcano), the reference trainer as real processes on shared files.

A vcjob of two 1-GPU pods in an opted-in Volcano Queue, with the policies of upstream issues
#2560 and #5885 (``PodEvicted -> RestartJob``, ``PodFailed -> TerminateJob``) and Volcano's
default ``maxRetry`` of 3, is evicted whole by a 2-GPU preemptor five times, alternating reclaim
from another queue and preemption inside its own queue. Each eviction is one gang: one Checkpoint
set holding both pods; each incarnation restores both pods from the newest set; the job ends
``Completed`` with ``retryCount`` 0. A real failure (exit 1) of a vcjob in the same queue still
terminates it by the user's policy.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from emulator import cluster, gpus, nodes
from emulator.demo import install
from emulator.volcano import objects
from kontinue import keys
from kontinue.kube import cacheset, resources
from kontinue.models import checkpoint
from tests.integration.bridge.conftest import FAST, config
from tests.integration.cluster import workloads
from tests.waiting import eventually

Obj = dict[str, Any]
NS = "default"
GRACE = 5
PROGRESS = re.compile(r"^PROGRESS step=(\d+) ", re.MULTILINE)
USER_POLICIES = [
    {"event": "PodEvicted", "action": "RestartJob"},
    {"event": "PodFailed", "action": "TerminateJob"},
]
POLICY: Obj = {
    "apiVersion": keys.API_VERSION,
    "kind": "CheckpointPolicy",
    "metadata": {"name": "dev"},
    "spec": {
        "storage": {"hostPath": {"path": "/var/kontinue"}, "mountPath": "/ckpt"},
        "minGracePeriodSeconds": GRACE,
    },
}


def queue(name: str, *, deserved: int, opted_in: bool = False) -> Obj:
    labels = {keys.ENABLED_LABEL: "true", keys.POLICY_LABEL: "dev"} if opted_in else {}
    return objects.queue(
        name,
        capability={keys.GPU_RESOURCE: "2"},
        deserved={keys.GPU_RESOURCE: str(deserved)},
        labels=labels,
    )


def trainer(*, steps: int, gpus_each: int) -> Obj:
    """The reference trainer, checkpointing where Kontinue tells it (no volume of its own)."""
    return {
        "name": "trainer",
        "image": "kontinue/reference-workload:dev",
        "command": ["python", "-m", "reference_workload.trainer"],
        "env": [
            {"name": "TRAINER_STEPS", "value": str(steps)},
            {"name": "TRAINER_RATE", "value": "40"},
            {"name": "TRAINER_SAVE_SECONDS", "value": "0.2"},
            {"name": "TRAINER_PROGRESS_EVERY", "value": "1"},
        ],
        "resources": {"limits": {keys.GPU_RESOURCE: str(gpus_each)}},
    }


def vcjob(name: str, queue_name: str, container: Obj, *, priority: str, replicas: int = 1) -> Obj:
    spec = workloads.pod_spec(container, grace=GRACE)
    spec.pop("volumes")
    template = {"metadata": {"labels": {"app": name}}, "spec": spec}
    return objects.job(
        name,
        NS,
        queue=queue_name,
        tasks=[objects.task("train", template, replicas=replicas)],
        priority=priority,
        policies=USER_POLICIES,
        min_available=replicas,
    )


class VolcanoSystem:
    def __init__(self, c: cluster.Cluster) -> None:
        self.cluster = c
        self.admin = c.client()

    async def pods_of(self, job: str) -> list[Obj]:
        return await self.cluster.pods(NS, labels={keys.VOLCANO_JOB_NAME_LABEL: job})

    def steps(self, pod: Obj) -> list[int]:
        container = self.cluster.container(pod, "trainer")
        if container is None or not container.spec.log_path.exists():
            return []
        return [int(s) for s in PROGRESS.findall(container.spec.log_path.read_text())]

    def log(self, pod: Obj) -> str:
        container = self.cluster.container(pod, "trainer")
        assert container is not None, pod["metadata"]["name"]
        return container.spec.log_path.read_text()

    async def checkpoints(self) -> list[checkpoint.Checkpoint]:
        listed = await self.admin.list(resources.CHECKPOINTS, namespace=NS)
        return [checkpoint.load(item) for item in listed["items"]]

    async def vcjob_phase(self, name: str) -> str:
        job = await self.admin.get(resources.VOLCANO_JOBS, name, namespace=NS)
        return str(((job.get("status") or {}).get("state") or {}).get("phase") or "")


@contextlib.asynccontextmanager
async def volcano_system(tmp_path: Path) -> AsyncIterator[VolcanoSystem]:
    spec = nodes.NodeSpec("gpu-a", gpu=gpus.GpuProfile(count=2))
    async with cluster.Cluster(nodes=[spec], workdir=tmp_path, queue_system="volcano") as c:
        admin = c.client()
        crds = [crd["metadata"]["name"] for crd in (await admin.list(resources.CRDS))["items"]]
        assert not [name for name in crds if "kueue" in name], crds  # a Volcano-only cluster
        await install.install(c.api)
        for name, value in (("low", 100), ("high", 1000)):
            await admin.create(resources.PRIORITY_CLASSES, workloads.priority_class(name, value))
        await admin.create(resources.VOLCANO_QUEUES, queue("research", deserved=0, opted_in=True))
        await admin.create(resources.VOLCANO_QUEUES, queue("prod", deserved=2))
        stop = asyncio.Event()
        options = cacheset.CacheOptions(backoff=FAST)
        hook = await install.start_webhook(
            c.api, install.webhook_config(("volcano",)), stop=stop, cache_options=options
        )
        bridge = await install.start_bridge(
            c.api,
            config("bridge-0", queue_systems=("volcano",), admission_check=False),
            stop=stop,
            cache_options=options,
        )
        try:

            async def policy_accepted() -> bool:  # the webhook validates it: up
                assert not hook.task.done(), hook.task
                with contextlib.suppress(Exception):
                    await admin.create(resources.CHECKPOINT_POLICIES, POLICY)
                    return True
                return False

            await eventually(policy_accepted, within=30, what="webhook serving")

            async def plumbed() -> bool:  # its caches see the labelled queue
                probe = vcjob("probe", "research", trainer(steps=1, gpus_each=1), priority="low")
                dry = await admin.create(resources.VOLCANO_JOBS, probe, dry_run=True)
                rule = {"exitCode": 143, "action": "SyncJob"}
                return bool(dry["spec"]["tasks"][0].get("policies") == [rule])

            await eventually(plumbed, within=30, what="webhook caches synced")
            yield VolcanoSystem(c)
        finally:
            await install.shut_down([hook, bridge], timeout=15)


async def test_a_vcjob_evicted_five_times_completes_restoring_every_time_from_the_newest_set(
    tmp_path: Path,
) -> None:
    async with volcano_system(tmp_path) as s:
        created = await s.admin.create(
            resources.VOLCANO_JOBS,
            vcjob("low", "research", trainer(steps=700, gpus_each=1), priority="low", replicas=2),
        )
        # the webhook's rewrite, as stored
        assert created["spec"]["policies"] == [{"event": "PodFailed", "action": "TerminateJob"}]
        assert created["spec"]["tasks"][0]["policies"] == [{"exitCode": 143, "action": "SyncJob"}]
        seen: set[str] = set()  # pod uids of earlier incarnations
        restored_from: list[str] = []
        floor = 0
        for round_ in range(5):
            pods: list[Obj] = []

            async def both_running(
                floor: int = floor, seen: set[str] = seen, pods: list[Obj] = pods
            ) -> bool:
                found = [
                    p
                    for p in await s.pods_of("low")
                    if p["metadata"]["uid"] not in seen
                    and not p["metadata"].get("deletionTimestamp")
                    and (p.get("status") or {}).get("phase") == "Running"
                    and max(s.steps(p), default=0) >= floor + 10
                ]
                pods[:] = found
                return len(found) == 2

            await eventually(
                both_running, within=120, what=f"both low pods running, round {round_}"
            )
            if round_:
                names = {
                    p["metadata"]["annotations"].get(keys.RESTORE_FROM_ANNOTATION) for p in pods
                }
                newest = max(
                    (cp for cp in await s.checkpoints()),
                    key=lambda cp: cp.spec.trigger.time,
                )
                # both pods of this incarnation restore from the one, newest set
                assert names == {newest.name}, (names, newest.name)
                restored_from.append(newest.name)
                for pod in pods:
                    assert "RESTORED" in s.log(pod)
                    assert min(s.steps(pod)) >= floor
            seen |= {p["metadata"]["uid"] for p in pods}
            system = "prod" if round_ % 2 == 0 else "research"  # reclaim, then preempt
            high = f"high-{round_}"
            await s.admin.create(
                resources.VOLCANO_JOBS,
                vcjob(high, system, trainer(steps=5, gpus_each=2), priority="high"),
            )

            async def done(name: str = high) -> bool:
                return await s.vcjob_phase(name) == "Completed"

            await eventually(done, within=120, what=f"{high} Completed")
            cps = await s.checkpoints()
            assert len(cps) == round_ + 1, [cp.name for cp in cps]
            newest = max(cps, key=lambda cp: cp.spec.trigger.time)

            async def succeeded(name: str = newest.name) -> bool:
                cp = next(c for c in await s.checkpoints() if c.name == name)
                return cp.status is not None and cp.status.phase is checkpoint.Phase.SUCCEEDED

            await eventually(succeeded, within=60, what=f"{newest.name} Succeeded")
            # one eviction of the gang = one set holding both pods
            assert {m.pod_uid for m in newest.spec.members} == {p["metadata"]["uid"] for p in pods}
            assert newest.spec.trigger.source is checkpoint.TriggerSource.VOLCANO
            expected = "reclaim" if system == "prod" else "preempt"
            assert expected in newest.spec.trigger.message
            (saved,) = [c for c in await s.checkpoints() if c.name == newest.name]
            floor = min(m.step or 0 for m in saved.status.members)

        async def completed() -> bool:
            return await s.vcjob_phase("low") == "Completed"

        await eventually(completed, within=180, what="low Completed")
        job = await s.admin.get(resources.VOLCANO_JOBS, "low", namespace=NS)
        assert int(job["status"].get("retryCount") or 0) == 0
        assert len(set(restored_from)) == 4  # rounds 1-4 each restored from a new set
        last = [p for p in await s.pods_of("low") if p["metadata"]["uid"] not in seen]
        assert len(last) == 2
        for pod in last:
            assert pod["status"]["phase"] == "Succeeded"
            assert "RESTORED" in s.log(pod)


async def test_a_real_failure_of_an_opted_in_vcjob_still_follows_the_users_policy(
    tmp_path: Path,
) -> None:
    async with volcano_system(tmp_path) as s:
        failing = {
            "name": "trainer",
            "image": "kontinue/reference-workload:dev",
            "command": ["python", "-c", "import sys, time; time.sleep(0.5); sys.exit(1)"],
            "resources": {"limits": {keys.GPU_RESOURCE: "1"}},
        }
        await s.admin.create(
            resources.VOLCANO_JOBS, vcjob("bad", "research", failing, priority="low")
        )

        async def terminated() -> bool:
            return await s.vcjob_phase("bad") == "Terminated"

        await eventually(terminated, within=90, what="bad Terminated by PodFailed -> TerminateJob")
        assert await s.checkpoints() == []


async def test_an_existing_vcjob_whose_policies_would_end_it_gets_a_warning_event(
    tmp_path: Path,
) -> None:
    """A vcjob created before its queue opted in keeps the user's policies (the webhook saw no
    opted-in queue); once the queue opts in, the bridge names each policy that would hurt."""
    async with volcano_system(tmp_path) as s:
        old = vcjob("old", "prod", trainer(steps=100000, gpus_each=1), priority="low")
        assert (await s.admin.create(resources.VOLCANO_JOBS, old))["spec"]["policies"] == (
            USER_POLICIES
        )
        new = vcjob("new", "research", trainer(steps=100000, gpus_each=1), priority="low")
        await s.admin.create(resources.VOLCANO_JOBS, new)
        labels = {keys.ENABLED_LABEL: "true", keys.POLICY_LABEL: "dev"}
        await s.admin.patch(
            resources.VOLCANO_QUEUES,
            "prod",
            {"metadata": {"labels": labels}},
            content_type="application/merge-patch+json",
        )
        found: list[Obj] = []

        async def warned() -> bool:
            events = (await s.admin.list(resources.EVENTS, namespace=NS))["items"]
            found[:] = [e for e in events if e["reason"] == keys.EVENT_UNSAFE_VCJOB]
            return bool(found)

        await eventually(warned, within=60, what="a PreemptionEndsVolcanoJob Event")
        (event,) = found
        assert event["type"] == "Warning"
        assert event["involvedObject"]["name"] == "old"
        assert event["involvedObject"]["kind"] == "Job"
        assert event["involvedObject"]["apiVersion"] == "batch.volcano.sh/v1alpha1"
        assert "PodEvicted -> RestartJob" in event["message"]
        assert "#2560" in event["message"]
        assert "PodFailed -> TerminateJob" in event["message"]


async def test_a_whole_vcjob_restart_restores_every_task_from_the_one_set_of_the_gang_eviction(
    tmp_path: Path,
) -> None:
    """Item 2: a vcjob of two tasks (``master``, ``worker``: two member identities) evicted
    whole is one Checkpoint set; the user's own ``exitCode: 143 -> RestartJob`` (kept by the
    webhook: the user said what 143 means) makes Volcano restart the whole vcjob
    (``status.version`` 1, ``retryCount`` 1), and every task restores from that one set."""
    async with volcano_system(tmp_path) as s:
        job = vcjob("gang", "research", trainer(steps=100000, gpus_each=1), priority="low")
        (task,) = job["spec"]["tasks"]
        job["spec"]["tasks"] = [{**task, "name": "master"}, {**task, "name": "worker"}]
        job["spec"]["minAvailable"] = 2
        job["spec"]["maxRetry"] = 10
        job["spec"]["policies"] = [{"exitCode": 143, "action": "RestartJob"}]
        created = await s.admin.create(resources.VOLCANO_JOBS, job)
        assert created["spec"]["policies"] == job["spec"]["policies"]
        first: list[Obj] = []

        async def running(want: list[Obj] = first, version: str = "0") -> bool:
            want[:] = [
                p
                for p in await s.pods_of("gang")
                if not p["metadata"].get("deletionTimestamp")
                and p["metadata"]["annotations"]["volcano.sh/job-version"] == version
                and (p.get("status") or {}).get("phase") == "Running"
                and max(s.steps(p), default=0) >= 10
            ]
            return len(want) == 2

        await eventually(running, within=120, what="both gang pods running")
        await s.admin.create(
            resources.VOLCANO_JOBS,
            vcjob("high", "prod", trainer(steps=5, gpus_each=2), priority="high"),
        )
        second: list[Obj] = []

        async def restarted() -> bool:
            return await running(second, "1")

        await eventually(restarted, within=180, what="the whole vcjob restarted, running")
        (cp,) = await s.checkpoints()
        assert {m.pod_uid for m in cp.spec.members} == {p["metadata"]["uid"] for p in first}
        assert {m.identity for m in cp.spec.members} == {
            "task=master,index=0",
            "task=worker,index=0",
        }
        assert cp.status.phase is checkpoint.Phase.SUCCEEDED
        for pod in second:
            assert pod["metadata"]["annotations"][keys.RESTORE_FROM_ANNOTATION] == cp.name
            assert "RESTORED" in s.log(pod)
        saved = {m.pod_name: m.step for m in cp.status.members}
        assert all(step is not None and step >= 10 for step in saved.values())
        gang = await s.admin.get(resources.VOLCANO_JOBS, "gang", namespace=NS)
        assert gang["status"]["retryCount"] == 1
        assert gang["status"]["version"] == 1
