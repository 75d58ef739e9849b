"""A Job runs to completion on the emulated cluster: real scheduler, controller and processes."""

from __future__ import annotations

from pathlib import Path

from emulator import cluster, gpus, nodes
from kontinue import keys
from kontinue.kube import resources
from tests.integration.cluster import workloads


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
