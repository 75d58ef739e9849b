"""kube-scheduler priority preemption on the emulated cluster, with real processes.

The sequence is the recorded one (tests/fixtures/admission 22-30): the preemptor gets
``nominatedNodeName`` and ``PodScheduled=False``; the victim gets ``DisruptionTarget=True``
(``PreemptionByScheduler``) and then a graceful DELETE; the victim's process receives SIGTERM,
saves and exits 143; the preemptor binds and starts only after the victim is gone. The victim's
Job (default ``podReplacementPolicy``) counts the victim as failed (job-accounting.md).
"""

from __future__ import annotations

import json
from pathlib import Path

from emulator import cluster, gpus, nodes
from kontinue import checkpoint_format, keys
from kontinue.kube import resources
from reference_workload import trainer
from tests.integration.cluster import recording, workloads

ONE_GPU = gpus.GpuProfile(count=1)


async def test_high_priority_pod_preempts_low_priority_job(tmp_path: Path) -> None:
    async with cluster.Cluster(nodes=[nodes.NodeSpec("gpu-a", gpu=ONE_GPU)], workdir=tmp_path) as c:
        admin = c.client()
        await admin.create(resources.PRIORITY_CLASSES, workloads.priority_class("low", 100))
        await admin.create(resources.PRIORITY_CLASSES, workloads.priority_class("high", 1000000))
        long = workloads.trainer_container(steps=100000, rate=50, save_seconds=0.2)
        await admin.create(resources.JOBS, workloads.job("low-job", long, priority_class="low"))
        victim = await recording.running_pod(c, "low-job")
        victim_name = victim["metadata"]["name"]
        short = workloads.trainer_container(steps=3, rate=50)
        async with recording.PodEvents(c.api) as events:
            await admin.create(
                resources.JOBS, workloads.job("high-job", short, priority_class="high")
            )
            await c.wait_for(
                resources.JOBS, "high-job", "default", cluster.job_condition("Complete")
            )
        (high,) = await c.pods(labels={keys.JOB_NAME_LABEL: "high-job"})
        high_name = high["metadata"]["name"]
        assert high["spec"]["nodeName"] == "gpu-a"
        assert high["spec"]["priority"] == 1000000

        # 1. the preemptor: nominated, PodScheduled=False Unschedulable (one status write)
        nominated = next(
            obj for _, obj in events.of(high_name) if obj["status"].get("nominatedNodeName")
        )
        (scheduled,) = nominated["status"]["conditions"]
        assert scheduled["status"] == "False"
        assert scheduled["reason"] == "Unschedulable"
        assert scheduled["message"] == "0/1 nodes are available: 1 Insufficient nvidia.com/gpu."
        assert nominated["status"]["nominatedNodeName"] == "gpu-a"
        assert not nominated["spec"].get("nodeName")

        # 2. the victim: DisruptionTarget first, then the graceful delete with its own grace
        victim_versions = [obj for kind, obj in events.of(victim_name) if kind == "MODIFIED"]
        marked = next(
            i
            for i, v in enumerate(victim_versions)
            if any(
                c["type"] == keys.POD_CONDITION_DISRUPTION_TARGET
                for c in v["status"].get("conditions") or []
            )
        )
        deleting = next(
            i for i, v in enumerate(victim_versions) if v["metadata"].get("deletionTimestamp")
        )
        assert marked < deleting
        target = next(
            c
            for c in victim_versions[marked]["status"]["conditions"]
            if c["type"] == keys.POD_CONDITION_DISRUPTION_TARGET
        )
        assert target["reason"] == keys.DISRUPTION_PREEMPTION_BY_SCHEDULER
        assert (
            target["message"]
            == "default-scheduler: preempting to accommodate a higher priority pod"
        )
        assert victim_versions[deleting]["metadata"]["deletionGracePeriodSeconds"] == 5
        # the scheduler does not touch the Job's finalizer: it is still there when deleting
        assert keys.JOB_TRACKING_FINALIZER in victim_versions[deleting]["metadata"]["finalizers"]

        # 3. the victim saved on a real SIGTERM and exited 143; its condition survived the kubelet
        terminal = next(v for v in victim_versions if v["status"].get("phase") == "Failed")
        ended = terminal["status"]["containerStatuses"][0]["state"]["terminated"]
        assert ended["exitCode"] == 143
        saved = json.loads(ended["message"])
        directory = (
            tmp_path / "shared/hostpath/var/kontinue/checkpoints" / victim["metadata"]["uid"]
        )
        assert trainer.saved_step(checkpoint_format.verify(directory)) == saved["step"]
        assert keys.POD_CONDITION_DISRUPTION_TARGET in [
            c["type"] for c in terminal["status"]["conditions"]
        ]

        # 4. the preemptor was bound only after the victim was gone
        victim_gone = next(
            i
            for i, (kind, obj) in enumerate(events.events)
            if kind == "DELETED" and obj["metadata"]["name"] == victim_name
        )
        bound = next(
            i
            for i, (_, obj) in enumerate(events.events)
            if obj["metadata"]["name"] == high_name and obj["spec"].get("nodeName")
        )
        assert victim_gone < bound
        victim_container = c.container(victim, "trainer")
        high_container = c.container(high, "trainer")
        assert victim_container is not None
        assert high_container is not None
        assert victim_container.ended_at is not None
        assert victim_container.kills[0].sigterm_at is not None

        # 5. default podReplacementPolicy: the preempted pod counts as failed; its replacement
        #    waits, unschedulable, until the GPU is free again (after high-job completed).
        low = await c.wait_for(
            resources.JOBS,
            "low-job",
            "default",
            lambda j: (j or {}).get("status", {}).get("failed"),
        )
        assert low is not None
        assert low["status"]["failed"] == 1
        assert "succeeded" not in low["status"]
        replacement = await c.wait_for(
            resources.JOBS,
            "low-job",
            "default",
            lambda j: (j or {}).get("status", {}).get("active"),
        )
        assert replacement is not None
