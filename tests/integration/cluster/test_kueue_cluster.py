"""Emulated Kueue on the emulated cluster: real job controller, scheduler, kubelet, processes.

A low-priority Job runs the reference trainer on all four GPUs; a high-priority Job in the same
ClusterQueue preempts it through the emulated Kueue. The upstream sequence (kueue.md §1.1) runs
against the real components: Evicted/Preempted, Kueue suspends the Job, the job controller
deletes the pod with its own grace period, the trainer gets a real SIGTERM, saves, writes its
termination message and exits 143; Kueue releases the quota as soon as ``active == 0`` — before
the victim's process has ended — and readmits the Job once the preemptor is done.
"""

from __future__ import annotations

import json
from pathlib import Path

from emulator import cluster, gpus, nodes
from kontinue import checkpoint_format, keys
from kontinue.kube import resources
from reference_workload import trainer
from tests.integration.cluster import workloads
from tests.integration.cluster.test_kueue import Env, Recorder, cond, summary
from tests.waiting import eventually

FOUR_GPUS = gpus.GpuProfile(count=4)


def queued(job: dict[str, object]) -> dict[str, object]:
    meta = job["metadata"]
    assert isinstance(meta, dict)
    meta["labels"] = {"kueue.x-k8s.io/queue-name": "team"}
    return job


async def test_kueue_preempts_a_running_trainer_which_saves_and_is_readmitted(
    tmp_path: Path,
) -> None:
    async with cluster.Cluster(
        nodes=[nodes.NodeSpec("gpu-a", gpu=FOUR_GPUS)], workdir=tmp_path, queue_system="kueue"
    ) as c:
        env = Env(c.api)
        await env.setup_queues(gpus=4)
        long = workloads.trainer_container(steps=100000, rate=50, save_seconds=0.3, gpus=4)
        low = await env.admin.create(
            resources.JOBS,
            queued(workloads.job("low", long, grace=10, priority_class="low")),
        )
        assert low["spec"]["suspend"] is True

        async def progressed() -> bool:
            for pod in await c.pods(labels={keys.JOB_NAME_LABEL: "low"}):
                container = c.container(pod, "trainer")
                if container is not None and container.spec.log_path.exists():
                    return container.spec.log_path.read_text().count("PROGRESS ") >= 3
            return False

        await eventually(progressed, within=30)
        (victim,) = await c.pods(labels={keys.JOB_NAME_LABEL: "low"})
        low_wl = await env.workload(low)
        recorder = Recorder(env)
        await recorder.start()
        try:
            short = workloads.trainer_container(steps=3, rate=50, gpus=4)
            high = await env.admin.create(
                resources.JOBS,
                queued(workloads.job("high", short, priority_class="high")),
            )
            await c.wait_for(resources.JOBS, "high", "default", cluster.job_finished)

            async def readmitted() -> bool:
                pods = await c.pods(labels={keys.JOB_NAME_LABEL: "low"})
                return any(
                    p["metadata"]["uid"] != victim["metadata"]["uid"]
                    and (p.get("status") or {}).get("phase") == "Running"
                    for p in pods
                )

            await eventually(readmitted, within=30)
        finally:
            await recorder.stop()

        # the victim's process: a real SIGTERM, a real checkpoint, exit 143
        container = c.container(victim, "trainer")
        assert container is not None
        assert container.kills[0].sigterm_at is not None
        pod_versions = recorder.of("Pod", victim["metadata"]["name"])
        terminal = next(p for _, p in pod_versions if p["status"].get("phase") == "Failed")
        ended = terminal["status"]["containerStatuses"][0]["state"]["terminated"]
        assert ended["exitCode"] == 143
        saved = json.loads(ended["message"])
        assert saved["kontinue"] == "saved"
        directory = (
            tmp_path / "shared/hostpath/var/kontinue/checkpoints" / victim["metadata"]["uid"]
        )
        assert trainer.saved_step(checkpoint_format.verify(directory)) == saved["step"]

        # the Workload went through the upstream sequence
        name = low_wl["metadata"]["name"]
        states = recorder.of("Workload", name)
        evicted_rv = next(rv for rv, w in states if cond(w, "Evicted")["status"] == "True")
        released_rv = next(
            rv for rv, w in states if summary(w)[2] == ("False", "PendingEvaluation")
        )
        suspend_rv = next(rv for rv, j in recorder.of("Job", "low") if j["spec"]["suspend"])
        deleting_rv = next(rv for rv, p in pod_versions if p["metadata"].get("deletionTimestamp"))
        terminal_rv = next(rv for rv, p in pod_versions if p["status"].get("phase") == "Failed")
        assert evicted_rv < suspend_rv < deleting_rv < released_rv
        # quota released while the victim was still saving (kueue.md, last section)
        assert released_rv < terminal_rv
        first = dict(states)[evicted_rv]
        assert summary(first)[:4] == (
            ("True", "InClusterQueue"),
            ("True", "Preempted"),
            ("True", "QuotaReserved"),
            ("True", "Admitted"),
        )
        final = states[-1][1]
        assert cond(final, "Evicted")["reason"] == "QuotaReserved"
        assert cond(final, "Evicted")["message"].startswith("Previously: Preempted to")
        assert cond(final, "Requeued")["status"] == "True"
        assert (await env.workload(high))["status"]["conditions"]

        # the job controller's ~immediate update beat Kueue's startTime patch: Stop ran twice
        reasons = [e["reason"] for e in await env.events_for("low")]
        assert reasons.count("Stopped") == 2
        # pods deleted because Kueue suspended the Job are never counted
        job = await env.get_job("low")
        assert not job["status"].get("failed")
