"""Suspending a Job on the emulated cluster: a real SIGTERM, a real checkpoint, nothing counted.

The order is the v1.36.2 job controller's (tests/fixtures/admission 05-11): the controller removes
the pod's ``batch.kubernetes.io/job-tracking`` finalizer, then DELETEs it with the pod's own grace
period; the kubelet sends SIGTERM, the trainer saves and exits 143, the terminal status is written
and the pod object disappears. ``failed``/``succeeded`` never appear (job-accounting.md, row 1).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from emulator import cluster, nodes
from emulator.kubelet import state
from kontinue import checkpoint_format
from kontinue.kube import api as kube_api
from kontinue.kube import resources
from reference_workload import trainer
from tests.integration.cluster import recording, workloads

LONG = workloads.trainer_container(steps=100000, rate=50, save_seconds=0.1)


async def _suspend(c: cluster.Cluster, name: str, value: bool) -> None:
    await c.client().patch(
        resources.JOBS,
        name,
        {"spec": {"suspend": value}},
        content_type=kube_api.MERGE_PATCH,
        namespace="default",
    )


async def test_suspend_sigterms_saves_and_counts_nothing_then_resume(tmp_path: Path) -> None:
    async with cluster.Cluster(nodes=[nodes.NodeSpec("gpu-a")], workdir=tmp_path) as c:
        await c.client().create(resources.JOBS, workloads.job("train", LONG))
        pod = await recording.running_pod(c, "train")
        name = pod["metadata"]["name"]
        async with recording.PodEvents(c.api) as events:
            await _suspend(c, "train", True)
            await c.wait_for(resources.PODS, name, "default", cluster.gone)
            job = await c.wait_for(
                resources.JOBS,
                "train",
                "default",
                lambda j: (
                    cluster.job_condition("Suspended")(j)
                    and not (j or {}).get("status", {}).get("terminating")
                ),
            )
        assert job is not None
        status = job["status"]
        assert "failed" not in status
        assert "succeeded" not in status
        assert "active" not in status
        (suspended,) = status["conditions"]
        assert (suspended["reason"], suspended["message"]) == ("JobSuspended", "Job suspended")

        # The controller's order: finalizer off first, then the graceful DELETE.
        versions = [obj for kind, obj in events.of(name) if kind == "MODIFIED"]
        first_deleting = next(v for v in versions if v["metadata"].get("deletionTimestamp"))
        assert not first_deleting["metadata"].get("finalizers")
        assert first_deleting["metadata"]["deletionGracePeriodSeconds"] == 5
        assert any(
            not v["metadata"].get("finalizers") and not v["metadata"].get("deletionTimestamp")
            for v in versions
        )
        terminal = [v for v in versions if v["status"].get("phase") == "Failed"][-1]
        ended = terminal["status"]["containerStatuses"][0]["state"]["terminated"]
        assert (ended["exitCode"], ended["reason"]) == (143, "Error")
        saved = json.loads(ended["message"])
        assert saved["kontinue"] == "saved"
        assert events.of(name)[-1][0] == "DELETED"

        # A real SIGTERM reached the process, no SIGKILL was needed, the checkpoint is whole.
        container = c.container(pod, "trainer")
        assert container is not None
        (kill,) = container.kills
        assert kill.sigterm_at is not None
        assert kill.sigkill_at is None
        assert isinstance(container.record().state, state.Terminated)
        directory = tmp_path / "shared/hostpath/var/kontinue/checkpoints" / pod["metadata"]["uid"]
        assert trainer.saved_step(checkpoint_format.verify(directory)) == saved["step"]

        # Resume: a new pod, the Suspended condition flips to JobResumed, startTime is reset.
        await _suspend(c, "train", False)
        again = await recording.running_pod(c, "train", progress=1)
        assert again["metadata"]["uid"] != pod["metadata"]["uid"]
        job = await c.wait_for(
            resources.JOBS, "train", "default", lambda j: (j or {}).get("status", {}).get("active")
        )
        assert job is not None
        (resumed,) = job["status"]["conditions"]
        assert (resumed["status"], resumed["reason"]) == ("False", "JobResumed")
        assert job["status"]["startTime"] >= suspended["lastTransitionTime"]
        assert "failed" not in job["status"]


async def test_save_slower_than_grace_is_killed_137_and_leaves_a_torn_directory(
    tmp_path: Path,
) -> None:
    slow = workloads.trainer_container(steps=100000, rate=50, save_seconds=30)
    async with cluster.Cluster(nodes=[nodes.NodeSpec("gpu-a")], workdir=tmp_path) as c:
        await c.client().create(resources.JOBS, workloads.job("slow", slow, grace=2))
        pod = await recording.running_pod(c, "slow")
        async with recording.PodEvents(c.api) as events:
            await _suspend(c, "slow", True)
            await c.wait_for(resources.PODS, pod["metadata"]["name"], "default", cluster.gone)
        terminal = [
            v for _, v in events.of(pod["metadata"]["name"]) if v["status"].get("phase") == "Failed"
        ][-1]
        ended = terminal["status"]["containerStatuses"][0]["state"]["terminated"]
        assert (ended["exitCode"], ended["reason"]) == (137, "Error")
        assert "message" not in ended  # never said "saved": a failed member
        container = c.container(pod, "trainer")
        assert container is not None
        (kill,) = container.kills
        assert kill.sigterm_at is not None
        assert kill.sigkill_at is not None
        assert 1.8 <= kill.sigkill_at - kill.sigterm_at < 5
        torn = tmp_path / "shared/hostpath/var/kontinue/checkpoints" / pod["metadata"]["uid"]
        assert torn.is_dir()
        with pytest.raises(checkpoint_format.Problem, match="the save never finished"):
            checkpoint_format.verify(torn)
