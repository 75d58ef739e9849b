"""Emulated Volcano on the emulated cluster: a high-priority vcjob in one queue reclaims the GPUs
of a low-priority vcjob in another; the victim gets Volcano's exact conditions and Event, is
deleted by the volcano-scheduler with its own grace period, saves on a real SIGTERM (exit 143),
and is recreated under the same name by its ``PodEvicted → RestartJob`` policy."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from emulator import cluster, gpus, nodes
from emulator.volcano import objects
from kontinue import checkpoint_format, keys
from kontinue.kube import resources
from reference_workload import trainer
from tests.integration.cluster import recording, workloads

Obj = dict[str, Any]
NS = "default"


def queue(name: str, *, gpus_cap: int, deserved: int) -> Obj:
    return objects.queue(
        name,
        capability={keys.GPU_RESOURCE: str(gpus_cap)},
        deserved={keys.GPU_RESOURCE: str(deserved)},
    )


def vcjob(name: str, queue_name: str, container: Obj, *, priority: str, grace: int = 5) -> Obj:
    template = {
        "metadata": {"labels": {"app": name}},
        "spec": workloads.pod_spec(container, grace=grace),
    }
    return objects.job(
        name,
        NS,
        queue=queue_name,
        tasks=[objects.task("train", template)],
        priority=priority,
        policies=[{"event": "PodEvicted", "action": "RestartJob"}],
        max_retry=5,
    )


@pytest.fixture
async def volcano_cluster(tmp_path: Path) -> AsyncIterator[cluster.Cluster]:
    spec = nodes.NodeSpec("gpu-a", gpu=gpus.GpuProfile(count=4))
    async with cluster.Cluster(nodes=[spec], workdir=tmp_path, queue_system="volcano") as c:
        yield c


async def test_high_priority_vcjob_reclaims_gpus_and_the_victim_is_recreated(
    volcano_cluster: cluster.Cluster, tmp_path: Path
) -> None:
    c = volcano_cluster
    admin = c.client()
    await admin.create(resources.PRIORITY_CLASSES, workloads.priority_class("low", 100))
    await admin.create(resources.PRIORITY_CLASSES, workloads.priority_class("high", 1000))
    await admin.create(resources.VOLCANO_QUEUES, queue("research", gpus_cap=4, deserved=0))
    await admin.create(resources.VOLCANO_QUEUES, queue("prod", gpus_cap=4, deserved=4))
    long = workloads.trainer_container(steps=100000, rate=50, save_seconds=0.2, gpus=4)
    low = await admin.create(resources.VOLCANO_JOBS, vcjob("low", "research", long, priority="low"))

    def progressed(pod: Obj | None) -> bool:
        if pod is None or (pod.get("status") or {}).get("phase") != "Running":
            return False
        container = c.container(pod, "trainer")
        return bool(
            container is not None
            and container.spec.log_path.exists()
            and container.spec.log_path.read_text().count("PROGRESS ") >= 3
        )

    victim = await c.wait_for(resources.PODS, "low-train-0", NS, progressed)
    assert victim is not None
    meta = victim["metadata"]
    assert meta["labels"]["volcano.sh/job-name"] == "low"
    assert meta["labels"]["volcano.sh/queue-name"] == "research"
    assert meta["annotations"]["scheduling.k8s.io/group-name"] == f"low-{low['metadata']['uid']}"
    assert meta["annotations"]["volcano.sh/job-version"] == "0"
    assert meta["annotations"]["volcano.sh/template-uid"] == "low-train"
    assert meta["ownerReferences"][0]["kind"] == "Job"
    assert victim["spec"]["nodeName"] == "gpu-a"

    short = workloads.trainer_container(steps=3, rate=50, gpus=4)
    async with recording.PodEvents(c.api) as pod_events:
        await admin.create(resources.VOLCANO_JOBS, vcjob("high", "prod", short, priority="high"))

        def done(pod: Obj | None) -> bool:
            return pod is not None and (pod.get("status") or {}).get("phase") == "Succeeded"

        await c.wait_for(resources.PODS, "high-train-0", NS, done)

        def recreated(pod: Obj | None) -> bool:
            return (
                pod is not None
                and pod["metadata"]["uid"] != meta["uid"]
                and (pod.get("status") or {}).get("phase") == "Running"
            )

        again = await c.wait_for(resources.PODS, "low-train-0", NS, recreated)
        assert again is not None

    versions = [
        o for kind, o in pod_events.of("low-train-0") if o["metadata"]["uid"] == meta["uid"]
    ]
    marked = next(
        o
        for o in versions
        if any(x["type"] == "DisruptionTarget" for x in o["status"].get("conditions") or [])
    )
    conditions = {x["type"]: x for x in marked["status"]["conditions"]}
    assert (conditions["Ready"]["status"], conditions["Ready"]["reason"]) == ("False", "Evict")
    assert conditions["Ready"]["message"] == "Pod is evicted, because of reclaim"
    target = conditions["DisruptionTarget"]
    assert (target["status"], target["reason"]) == ("True", "PreemptionByScheduler")
    assert target["message"] == "volcano: preempting to accommodate a higher priority pod"
    assert not marked["metadata"].get("deletionTimestamp")  # conditions first, then the DELETE
    deleting = next(o for o in versions if o["metadata"].get("deletionTimestamp"))
    assert deleting["metadata"]["deletionGracePeriodSeconds"] == 5  # the pod's own grace

    container = c.container(victim, "trainer")
    assert container is not None
    assert container.kills[0].sigterm_at is not None
    terminal = next(o for o in versions if o["status"].get("phase") == "Failed")
    ended = terminal["status"]["containerStatuses"][0]["state"]["terminated"]
    assert ended["exitCode"] == 143
    saved = json.loads(ended["message"])
    directory = tmp_path / "shared/hostpath/var/kontinue/checkpoints" / meta["uid"]
    assert trainer.saved_step(checkpoint_format.verify(directory)) == saved["step"]

    events = (await admin.list(resources.EVENTS, namespace=NS))["items"]
    evict = [
        e for e in events if e["reason"] == "Evict" and e["involvedObject"]["name"] == "low-train-0"
    ]
    assert [(e["type"], e["message"]) for e in evict] == [
        ("Warning", "Pod is evicted, because of reclaim")
    ]
    group_events = [
        e for e in events if e["reason"] == "Evict" and e["involvedObject"]["kind"] == "PodGroup"
    ]
    assert [e["message"] for e in group_events] == ["reclaim"]

    # PodEvicted -> RestartJob: a new version, the same pod name
    assert again["metadata"]["annotations"]["volcano.sh/job-version"] == "1"
    assert again["metadata"]["annotations"]["volcano.sh/job-retry-count"] == "1"
    job = await admin.get(resources.VOLCANO_JOBS, "low", namespace=NS)
    assert job["status"]["retryCount"] == 1
    assert keys.VOLCANO_JOB_NAME_LABEL in again["metadata"]["labels"]


async def _reclaimed(c: cluster.Cluster, high: str) -> None:
    """A 4-GPU high-priority vcjob ``high`` in ``prod`` reclaims the GPUs and completes."""
    admin = c.client()
    short = workloads.trainer_container(steps=3, rate=50, gpus=4)
    await admin.create(resources.VOLCANO_JOBS, vcjob(high, "prod", short, priority="high"))

    def done(pod: Obj | None) -> bool:
        return pod is not None and (pod.get("status") or {}).get("phase") == "Succeeded"

    await c.wait_for(resources.PODS, f"{high}-train-0", NS, done, timeout=90)


def _phase_is(*phases: str) -> Any:
    def check(job: Obj | None) -> bool:
        return ((job or {}).get("status") or {}).get("state", {}).get("phase") in phases

    return check


async def _running_low(c: cluster.Cluster, name: str, *, not_uid: str = "") -> Obj:
    def running(pod: Obj | None) -> bool:
        return (
            pod is not None
            and pod["metadata"]["uid"] != not_uid
            and not pod["metadata"].get("deletionTimestamp")
            and (pod.get("status") or {}).get("phase") == "Running"
        )

    pod = await c.wait_for(resources.PODS, f"{name}-train-0", NS, running, timeout=90)
    assert pod is not None
    return pod


async def _setup(c: cluster.Cluster) -> None:
    admin = c.client()
    await admin.create(resources.PRIORITY_CLASSES, workloads.priority_class("low", 100))
    await admin.create(resources.PRIORITY_CLASSES, workloads.priority_class("high", 1000))
    await admin.create(resources.VOLCANO_QUEUES, queue("research", gpus_cap=4, deserved=0))
    await admin.create(resources.VOLCANO_QUEUES, queue("prod", gpus_cap=4, deserved=4))


async def test_podfailed_of_a_preempted_pod_comes_first_and_terminates_the_job_issue_5885(
    volcano_cluster: cluster.Cluster,
) -> None:
    """Upstream issue #5885: the contract's exit 143 on SIGTERM makes ``updatePod`` raise
    ``PodFailed`` before ``deletePod`` raises ``PodEvicted``; ``PodFailed -> TerminateJob`` wins."""
    c = volcano_cluster
    await _setup(c)
    long = workloads.trainer_container(steps=100000, rate=50, save_seconds=0.2, gpus=4)
    job = vcjob("low", "research", long, priority="low")
    job["spec"]["policies"].append({"event": "PodFailed", "action": "TerminateJob"})
    await c.client().create(resources.VOLCANO_JOBS, job)
    await _running_low(c, "low")
    await _reclaimed(c, "high")
    ended = await c.wait_for(resources.VOLCANO_JOBS, "low", NS, _phase_is("Terminated"), timeout=60)
    assert ended is not None
    assert int(ended["status"].get("retryCount") or 0) == 0  # never restarted


async def test_each_preemption_uses_a_retry_under_podevicted_restartjob_issue_2560(
    volcano_cluster: cluster.Cluster,
) -> None:
    """Upstream issue #2560: ``PodEvicted -> RestartJob`` does ``retryCount++`` per preemption
    (state/running.go) and ``restartingUpdateStatus`` fails the job at ``maxRetry``."""
    c = volcano_cluster
    await _setup(c)
    long = workloads.trainer_container(steps=100000, rate=50, save_seconds=0.2, gpus=4)
    job = vcjob("low", "research", long, priority="low")
    job["spec"]["maxRetry"] = 2
    await c.client().create(resources.VOLCANO_JOBS, job)
    first = await _running_low(c, "low")
    await _reclaimed(c, "high-a")
    second = await _running_low(c, "low", not_uid=first["metadata"]["uid"])
    assert second["metadata"]["annotations"]["volcano.sh/job-retry-count"] == "1"
    await _reclaimed(c, "high-b")
    failed = await c.wait_for(resources.VOLCANO_JOBS, "low", NS, _phase_is("Failed"), timeout=60)
    assert failed is not None
    assert failed["status"]["retryCount"] == 2
