"""Issue 6, "Done when", on the emulated cluster: real processes, real files, every part real.

The emulated cluster (emulator/cluster.py: scheduler, Job controller, kubelets running the
reference trainer as local processes) with the emulated Kueue (emulator/kueue) preempting by
priority; the real webhook (``webhook.__main__.serve``, called by the emulator over HTTPS) plumbs
pods and injects restores; the real bridge (``queue_bridge.app.run``) turns the eviction into a
Checkpoint and follows it. A low-priority Job is preempted by a high-priority one, saves inside
its grace period, and — opted in — resumes from the saved step when it is readmitted; on a queue
that did not opt in the same Job starts again from step 0. A save slower than the grace period
is SIGKILLed: the Checkpoint is Failed and the next incarnation never restores from it.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import re
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from emulator import cluster, gpus, nodes
from emulator.demo import install
from emulator.kueue import controller as kueue_controller
from kontinue import keys, telemetry
from kontinue.kube import api, cacheset, resources
from kontinue.models import checkpoint
from queue_bridge import app as bridge_app
from tests import fixtures
from tests.integration.bridge.conftest import BRIDGE_USER, FAST, SYSTEM, config
from tests.integration.cluster.test_kueue import Env
from tests.waiting import eventually

Obj = dict[str, Any]
NS = "default"
GRACE = 5
POLICY: Obj = {
    "apiVersion": keys.API_VERSION,
    "kind": "CheckpointPolicy",
    "metadata": {"name": "dev"},
    "spec": {
        "storage": {"hostPath": {"path": "/var/kontinue"}, "mountPath": "/ckpt"},
        "minGracePeriodSeconds": GRACE,
    },
}
PROGRESS = re.compile(r"^PROGRESS step=(\d+) ", re.MULTILINE)


def _trainer_job(
    name: str, *, priority: str, steps: int, save_seconds: float, backoff_limit: int = 1
) -> Obj:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": name,
            "namespace": NS,
            "labels": {keys.KUEUE_QUEUE_NAME_LABEL: "team"},
        },
        "spec": {
            "backoffLimit": backoff_limit,
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "priorityClassName": priority,
                    "terminationGracePeriodSeconds": GRACE,
                    "containers": [
                        {
                            "name": "trainer",
                            "image": "kontinue/reference-workload:dev",
                            "command": ["python", "-m", "reference_workload.trainer"],
                            "env": [
                                {"name": "TRAINER_STEPS", "value": str(steps)},
                                {"name": "TRAINER_RATE", "value": "40"},
                                {"name": "TRAINER_SAVE_SECONDS", "value": str(save_seconds)},
                                {"name": "TRAINER_PROGRESS_EVERY", "value": "1"},
                            ],
                            "resources": {
                                "requests": {"cpu": "1", "memory": "1Gi"},
                                "limits": {keys.GPU_RESOURCE: "1"},
                            },
                        }
                    ],
                }
            },
        },
    }


class System:
    def __init__(
        self,
        c: cluster.Cluster,
        bridges: dict[str, asyncio.Task[int]],
        *,
        health_urls: list[str] | None = None,
        webhook_url: str = "",
    ) -> None:
        self.cluster = c
        self.bridges = bridges
        """Identity -> the task of that replica now (a replica that lost its Lease is restarted,
        as its Deployment would: ``system``)."""
        self.admin = c.client()
        self.health_urls = health_urls or []
        """``http://127.0.0.1:<port>`` of each bridge replica's health (and /metrics) server."""
        self.webhook_url = webhook_url

    async def pods_of(self, job: str) -> list[Obj]:
        return await self.cluster.pods(NS, labels={keys.JOB_NAME_LABEL: job})

    def log(self, pod: Obj) -> str:
        container = self.cluster.container(pod, "trainer")
        assert container is not None, pod["metadata"]["name"]
        return container.spec.log_path.read_text()

    async def running_pod(self, job: str, *, min_step: int, exclude: set[str]) -> Obj:
        found: list[Obj] = []

        async def progressing() -> bool:
            for pod in await self.pods_of(job):
                if pod["metadata"]["uid"] in exclude or pod["metadata"].get("deletionTimestamp"):
                    continue
                if (pod.get("status") or {}).get("phase") != "Running":
                    continue
                container = self.cluster.container(pod, "trainer")
                if container is None or not container.spec.log_path.exists():
                    continue
                steps = [int(s) for s in PROGRESS.findall(container.spec.log_path.read_text())]
                if steps and max(steps) >= min_step:
                    found.append(pod)
                    return True
            return False

        await eventually(progressing, within=60, what=f"a running {job} pod past step {min_step}")
        return found[-1]

    async def checkpoints(self) -> list[checkpoint.Checkpoint]:
        listed = await self.admin.list(resources.CHECKPOINTS, namespace=NS)
        return [checkpoint.load(item) for item in listed["items"]]


@contextlib.asynccontextmanager
async def system(
    tmp_path: Path,
    *,
    opted_in: bool,
    wait_seconds: int = 600,
    replicas: int = 1,
    gpus_quota: int = 1,
    attempts: int | None = None,
    consistency: str | None = None,
    node_count: int = 2,
    bridge_tel: telemetry.Telemetry | None = None,
    webhook_tel: telemetry.Telemetry | None = None,
) -> AsyncIterator[System]:
    one_gpu = gpus.GpuProfile(count=1)
    specs = [nodes.NodeSpec(f"gpu-{chr(ord('a') + i)}", gpu=one_gpu) for i in range(node_count)]
    async with cluster.Cluster(nodes=specs, workdir=tmp_path) as c:
        kueue_controller.install_crds(c.api, fixtures.UPSTREAM / "kueue" / "crds")
        kueue_controller.install_crds(c.api, fixtures.FIXTURES / "kueue-emulation")
        await install.install(c.api)
        admin = c.client()
        stop = asyncio.Event()
        options = cacheset.CacheOptions(backoff=FAST)
        hook = await install.start_webhook(
            c.api,
            install.webhook_config(("kueue",)),
            stop=stop,
            cache_options=options,
            tel=webhook_tel,
        )
        deployed: list[install.Deployable] = []
        current: dict[str, asyncio.Task[int]] = {}
        urls: list[str] = []

        async def start(index: int) -> install.Deployable:
            identity = f"bridge-{len(deployed)}"  # a restarted replica is a new pod: a new name
            bridge = await install.start_bridge(
                c.api, config(identity), stop=stop, cache_options=options, tel=bridge_tel
            )
            deployed.append(bridge)
            current[identity] = bridge.task
            urls[index:] = [bridge.url, *urls[index + 1 :]]
            return bridge

        async def deployment(index: int, bridge: install.Deployable) -> None:
            """Kubernetes' part: a replica whose Lease renewal failed exits (app.LOST) and its
            container is restarted. Without it a leader that missed its renew deadline on a
            loaded machine (its event loop held up past ``lease_deadline_seconds``) left one
            replica, or none, and a test that then killed "the leader" had no bridge at all.
            A replica the test cancels stays dead."""
            while True:
                await asyncio.wait([bridge.task])
                if stop.is_set() or bridge.task.cancelled() or bridge.task.exception():
                    return
                if bridge.task.result() != bridge_app.LOST:
                    return
                for identity, task in list(current.items()):
                    if task is bridge.task:
                        del current[identity]
                bridge = await start(index)

        first = [await start(i) for i in range(replicas)]
        restarts = [asyncio.create_task(deployment(i, b)) for i, b in enumerate(first)]
        try:
            async with kueue_controller.Kueue(c.api):
                env = Env(c.api)
                await env.setup_queues(gpus=gpus_quota)
                if opted_in:
                    labels = {keys.ENABLED_LABEL: "true", keys.POLICY_LABEL: "dev"}
                    await admin.patch(
                        resources.CLUSTER_QUEUES,
                        "gpu-cq",
                        {"metadata": {"labels": labels}},
                        content_type=api.MERGE_PATCH,
                    )

                    async def policy_accepted() -> bool:  # the webhook validates it: up
                        assert not hook.task.done(), hook.task
                        with contextlib.suppress(Exception):
                            policy = copy.deepcopy(POLICY)
                            policy["spec"]["restore"] = {"waitForSavingSeconds": wait_seconds}
                            if attempts is not None:
                                policy["spec"]["restore"]["attemptsBeforeFallback"] = attempts
                            if consistency is not None:
                                policy["spec"]["restore"]["consistency"] = consistency
                            await admin.create(resources.CHECKPOINT_POLICIES, policy)
                            return True
                        return False

                    await eventually(policy_accepted, within=20, what="webhook serving")

                    async def plumbed() -> bool:  # its caches see the labelled queue
                        job = _trainer_job("probe", priority="low", steps=1, save_seconds=0)
                        dry = await admin.create(resources.JOBS, job, dry_run=True)
                        return bool(dry["spec"].get("podReplacementPolicy") == "Failed")

                    await eventually(plumbed, within=20, what="webhook caches synced")
                yield System(c, current, health_urls=urls, webhook_url=hook.url)
        finally:
            stop.set()
            for restart in restarts:
                restart.cancel()
            await asyncio.gather(*restarts, return_exceptions=True)
            await install.shut_down([hook, *deployed], timeout=15)


@pytest.mark.parametrize("opted_in", [True, False], ids=["opted-in", "not-opted-in"])
async def test_a_preempted_job_resumes_from_its_saved_step_only_when_opted_in(
    tmp_path: Path, opted_in: bool
) -> None:
    async with system(tmp_path, opted_in=opted_in) as s:
        await s.admin.create(
            resources.JOBS, _trainer_job("low", priority="low", steps=100000, save_seconds=0.2)
        )
        victim = await s.running_pod("low", min_step=20, exclude=set())
        await s.admin.create(
            resources.JOBS, _trainer_job("high", priority="high", steps=10, save_seconds=0.2)
        )
        await s.cluster.wait_for(
            resources.JOBS, "high", NS, cluster.job_condition("Complete"), timeout=60
        )
        before = s.log(victim)
        last_before = max(int(step) for step in PROGRESS.findall(before))
        successor = await s.running_pod("low", min_step=1, exclude={victim["metadata"]["uid"]})
        after = s.log(successor)
        first_after = int(PROGRESS.findall(after)[0])
        cps = await s.checkpoints()
        if opted_in:
            (cp,) = cps
            assert cp.status.phase is checkpoint.Phase.SUCCEEDED, cp.status
            assert cp.spec.members[0].pod_uid == victim["metadata"]["uid"]
            assert "SAVED" in before
            assert "RESTORED" in after
            # Work lost per preemption: the steps between SIGTERM and the save, i.e. none.
            assert last_before <= first_after <= last_before + 2, (last_before, first_after)
            pod = await s.admin.get(resources.PODS, successor["metadata"]["name"], namespace=NS)
            assert pod["metadata"]["annotations"][keys.RESTORE_FROM_ANNOTATION] == cp.name
            job = await s.admin.get(resources.JOBS, "low", namespace=NS)
            assert not (job.get("status") or {}).get("failed")
        else:
            assert cps == []
            assert "RESTORED" not in after
            assert first_after == 1
        # no pod of the preempted incarnation keeps a finalizer (it is gone)
        assert victim["metadata"]["uid"] not in {
            p["metadata"]["uid"] for p in await s.pods_of("low")
        }


async def test_a_save_slower_than_the_grace_period_never_becomes_a_restore(
    tmp_path: Path,
) -> None:
    # The successor is created when the torn member is SIGKILLed, before the bridge records the
    # Failed phase, so the webhook tells its restore init container to wait for that save; a
    # torn save never completes, so the wait ends at the policy's bound, here 3 s.
    async with system(tmp_path, opted_in=True, wait_seconds=3) as s:
        await s.admin.create(
            resources.JOBS,
            _trainer_job("low", priority="low", steps=100000, save_seconds=GRACE + 5),
        )
        victim = await s.running_pod("low", min_step=10, exclude=set())
        await s.admin.create(
            resources.JOBS, _trainer_job("high", priority="high", steps=10, save_seconds=0.2)
        )

        async def failed() -> bool:
            cps = await s.checkpoints()
            return len(cps) == 1 and cps[0].status.phase is checkpoint.Phase.FAILED

        await eventually(failed, within=60, what="the torn Checkpoint Failed")
        (cp,) = await s.checkpoints()
        assert (cp.status.members[0].reason or "").startswith("killed by SIGKILL (exit 137)")
        successor = await s.running_pod("low", min_step=1, exclude={victim["metadata"]["uid"]})
        after = s.log(successor)
        assert "RESTORED" not in after
        assert int(PROGRESS.findall(after)[0]) == 1
        pod = await s.admin.get(resources.PODS, successor["metadata"]["name"], namespace=NS)
        annotations = pod["metadata"].get("annotations") or {}
        if keys.RESTORE_FROM_ANNOTATION in annotations:
            # created while the torn save was still running: its restore init container waited
            # for that save, which never completed, and cold-started at the policy's bound
            (status,) = pod["status"]["initContainerStatuses"]
            terminated = status["state"]["terminated"]
            assert (status["name"], terminated["exitCode"]) == (keys.RESTORE_INIT_CONTAINER, 0)
            assert terminated["message"].startswith("cold start:"), terminated
        else:  # created once the Checkpoint was Failed: a cold start decided at admission
            assert annotations[keys.COLD_START_REASON_ANNOTATION] == (
                "no Succeeded checkpoint of default/Job/low"
            )


PREEMPTIONS = 20


async def test_twenty_preemptions_leave_the_job_running_and_restored_each_time(
    tmp_path: Path,
) -> None:
    async with system(tmp_path, opted_in=True) as s:
        await s.admin.create(
            resources.JOBS, _trainer_job("low", priority="low", steps=100000, save_seconds=0.05)
        )
        current = await s.running_pod("low", min_step=3, exclude=set())
        seen = {current["metadata"]["uid"]}
        for round_ in range(1, PREEMPTIONS + 1):
            high = f"high-{round_}"
            await s.admin.create(
                resources.JOBS, _trainer_job(high, priority="high", steps=3, save_seconds=0.05)
            )
            await s.cluster.wait_for(
                resources.JOBS, high, NS, cluster.job_condition("Complete"), timeout=60
            )
            saved = max(int(step) for step in PROGRESS.findall(s.log(current)))
            successor = await s.running_pod("low", min_step=saved + 1, exclude=seen)
            seen.add(successor["metadata"]["uid"])
            cps = sorted(await s.checkpoints(), key=lambda cp: cp.spec.trigger.time)
            newest = max(cps, key=lambda cp: (cp.spec.trigger.time, cp.name))
            assert newest.spec.members[0].pod_uid == current["metadata"]["uid"], round_
            assert newest.status.phase is checkpoint.Phase.SUCCEEDED, (round_, newest.status)
            pod = await s.admin.get(resources.PODS, successor["metadata"]["name"], namespace=NS)
            assert pod["metadata"]["annotations"][keys.RESTORE_FROM_ANNOTATION] == newest.name
            after = s.log(successor)
            assert f"RESTORED step={saved} " in after, (round_, saved, after[:300])
            current = successor
        job = await s.admin.get(resources.JOBS, "low", namespace=NS)
        status = job.get("status") or {}
        assert not status.get("failed"), status
        assert not cluster.job_finished(job), status
        cps = await s.checkpoints()
        assert len(cps) == PREEMPTIONS
        # retention (default keep 3): the older Succeeded ones are Expired, the newest 3 kept
        phases = sorted(cp.status.phase.value for cp in cps)
        assert phases.count("Succeeded") == 3, phases
        assert phases.count("Expired") == PREEMPTIONS - 3, phases


async def test_killing_the_active_bridge_mid_checkpoint_loses_nothing(tmp_path: Path) -> None:
    async with system(tmp_path, opted_in=True, replicas=2) as s:
        await s.admin.create(
            resources.JOBS, _trainer_job("low", priority="low", steps=100000, save_seconds=2.0)
        )
        victim = await s.running_pod("low", min_step=5, exclude=set())
        await s.admin.create(
            resources.JOBS, _trainer_job("high", priority="high", steps=3, save_seconds=0.05)
        )

        async def saving() -> bool:
            cps = await s.checkpoints()
            return len(cps) == 1 and cps[0].status.phase is checkpoint.Phase.IN_PROGRESS

        await eventually(saving, within=30, what="the Checkpoint InProgress")
        lease = await s.admin.get(resources.LEASES, "kontinue-bridge", namespace=SYSTEM)
        holder = lease["spec"]["holderIdentity"]
        s.bridges[holder].cancel()  # the leader dies while its member is still saving
        with contextlib.suppress(asyncio.CancelledError):
            await s.bridges[holder]

        async def terminal() -> bool:
            cps = await s.checkpoints()
            return len(cps) == 1 and cps[0].status.phase is checkpoint.Phase.SUCCEEDED

        await eventually(terminal, within=30, what="Succeeded under the other replica")
        lease = await s.admin.get(resources.LEASES, "kontinue-bridge", namespace=SYSTEM)
        assert lease["spec"]["holderIdentity"] not in ("", holder)
        (cp,) = await s.checkpoints()
        successor = await s.running_pod("low", min_step=1, exclude={victim["metadata"]["uid"]})
        assert "RESTORED" in s.log(successor)
        pod = await s.admin.get(resources.PODS, successor["metadata"]["name"], namespace=NS)
        assert pod["metadata"]["annotations"][keys.RESTORE_FROM_ANNOTATION] == cp.name
        # the victim's finalizer was removed once its result was recorded: it is gone
        assert victim["metadata"]["uid"] not in {
            p["metadata"]["uid"] for p in await s.pods_of("low")
        }


async def test_a_replica_that_lost_its_lease_is_restarted_as_its_deployment_would(
    tmp_path: Path,
) -> None:
    """The harness itself (``system``): a leader that cannot renew its Lease exits with
    ``app.LOST`` and a new replica takes its place, as Kubernetes restarts the container; a
    test that then kills "the leader" still leaves a bridge to take over."""
    async with system(tmp_path, opted_in=True, replicas=1) as s:
        (first,) = s.bridges.values()
        renewals = s.cluster.api.faults.add(
            verb="update", resource="leases", user=BRIDGE_USER, count=None
        )
        await asyncio.wait([first], timeout=30)
        assert first.done(), "the leader kept a Lease it could not renew"
        assert first.result() == bridge_app.LOST
        s.cluster.api.faults.remove(renewals)

        async def replaced() -> bool:
            lease = await s.admin.get(resources.LEASES, "kontinue-bridge", namespace=SYSTEM)
            return bool(lease["spec"].get("holderIdentity") == "bridge-1")

        await eventually(replaced, within=30, what="the restarted replica leads")
        assert list(s.bridges) == ["bridge-1"]
