"""A Job runs to completion on the emulated cluster: real scheduler, controller and processes."""

from __future__ import annotations

import asyncio
from pathlib import Path

from emulator import cluster, gpus, nodes
from kontinue import keys
from kontinue.kube import resources
from tests.integration.cluster import recording, workloads


async def test_job_runs_to_completion_on_a_gpu_node(tmp_path: Path) -> None:
    specs = [nodes.NodeSpec("gpu-a", gpu=gpus.H100), nodes.NodeSpec("cpu-b", gpu=None)]
    async with cluster.Cluster(nodes=specs, workdir=tmp_path) as c:
        admin = c.client()
        job = await admin.create(
            resources.JOBS, workloads.job("train", workloads.trainer_container(steps=5))
        )
        done = await c.wait_for(
            resources.JOBS, "train", "default", cluster.job_condition("Complete")
        )
        assert done is not None
        status = done["status"]
        assert status["succeeded"] == 1
        assert "failed" not in status
        types = [cond["type"] for cond in status["conditions"]]
        assert types == ["SuccessCriteriaMet", "Complete"]
        assert status["conditions"][1]["reason"] == "CompletionsReached"
        assert status["completionTime"]
        assert status["startTime"]
        (pod,) = await c.pods(labels={keys.JOB_NAME_LABEL: "train"})
        assert pod["spec"]["nodeName"] == "gpu-a"  # the only node with a GPU
        assert pod["status"]["phase"] == "Succeeded"
        assert pod["metadata"]["generateName"] == "train-"
        assert not pod["metadata"].get("finalizers")  # counted: tracking finalizer removed
        (owner,) = pod["metadata"]["ownerReferences"]
        assert owner == {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "name": "train",
            "uid": job["metadata"]["uid"],
            "controller": True,
            "blockOwnerDeletion": True,
        }
        terminated = pod["status"]["containerStatuses"][0]["state"]["terminated"]
        assert (terminated["exitCode"], terminated["reason"]) == (0, "Completed")
        container = c.container(pod, "trainer")
        assert container is not None
        log = container.spec.log_path.read_text()
        assert "PROGRESS step=5" in log
        assert "DONE" in log


async def test_deleting_a_running_job_stops_its_pods_and_releases_their_finalizers(
    tmp_path: Path,
) -> None:
    """Background deletion: the garbage collector deletes the pods; the kubelet stops them; the
    Job controller removes the tracking finalizer of pods whose Job is gone (syncOrphanPod)."""
    async with cluster.Cluster(nodes=[nodes.NodeSpec("gpu-a")], workdir=tmp_path) as c:
        long = workloads.trainer_container(steps=100000, rate=50)
        await c.client().create(
            resources.JOBS, workloads.job("doomed", long, parallelism=2, completions=2)
        )
        first = await recording.running_pod(c, "doomed", progress=1)
        await c.client().delete(
            resources.JOBS, "doomed", namespace="default", propagation_policy="Background"
        )
        await c.wait_for(resources.JOBS, "doomed", "default", cluster.gone)
        await c.wait_for(resources.PODS, first["metadata"]["name"], "default", cluster.gone)
        for _ in range(500):
            if not await c.pods(labels={keys.JOB_NAME_LABEL: "doomed"}):
                break
            await asyncio.sleep(0.02)
        assert await c.pods(labels={keys.JOB_NAME_LABEL: "doomed"}) == []
        container = c.container(first, "trainer")
        assert container is not None
        assert container.kills[0].sigterm_at is not None
