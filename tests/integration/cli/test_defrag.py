"""``defrag`` through the real console script: a 4-GPU job pending on 2 + 2 free GPUs.

Four one-GPU scavengers spread 2 + 2 over two 4-GPU nodes (the scheduler prefers the node with
the most free GPUs); the urgent job's PriorityClass does not preempt, so it stays pending until
``kubectl kontinue defrag`` moves two scavengers off one node.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from emulator.demo import scenario, timeline
from emulator.jobs import backoff
from kontinue.kube import resources
from tests.integration.cli import harness

pytestmark = pytest.mark.timeout(240)

NS = harness.NS
Obj = dict[str, Any]


@pytest_asyncio.fixture
async def kube(tmp_path: Path) -> AsyncIterator[harness.Kube]:
    async with _fragmented(tmp_path) as k:
        yield k


@contextlib.asynccontextmanager
async def _fragmented(
    tmp_path: Path, *, pod_failure_backoff: float = 0.0, urgent_steps: int = 10**9
) -> AsyncIterator[harness.Kube]:
    """s0..s3 spread 2 + 2, and ``urgent`` (4 GPUs, ``urgent_steps`` at 20 steps/s) pending."""
    async with harness.kube(tmp_path, pod_failure_backoff=pod_failure_backoff) as k:
        scavengers = []
        for i in range(4):
            await k.job(f"s{i}")
            (pod,) = await k.running_pods(f"s{i}")
            scavengers.append(pod)
        assert [p["spec"]["nodeName"] for p in scavengers] == ["gpu-a", "gpu-b"] * 2
        for pod in scavengers:
            await k.training(pod)
        await k.admin.create(
            resources.PRIORITY_CLASSES,
            {
                "apiVersion": "scheduling.k8s.io/v1",
                "kind": "PriorityClass",
                "metadata": {"name": "urgent"},
                "value": 1000,
                "preemptionPolicy": "Never",
            },
        )
        urgent = scenario.trainer_job(
            "urgent",
            role=timeline.Role.PRIORITY,
            gpus=4,
            steps=urgent_steps,
            options=harness.OPTIONS,
        )
        urgent["spec"]["template"]["spec"]["priorityClassName"] = "urgent"
        await k.admin.create(resources.JOBS, urgent)

        async def unschedulable() -> bool:
            for pod in await k.pods("urgent"):
                for c in pod["status"].get("conditions") or []:
                    if c["type"] == "PodScheduled" and c["status"] == "False":
                        return True
            return False

        await harness.eventually(unschedulable, within=30, what="urgent pending, unschedulable")
        yield k


async def test_dry_run_prints_the_plan_and_moves_nothing(kube: harness.Kube) -> None:
    result = await kube.kk("defrag", "--for", "job/urgent", "--dry-run")
    assert result.code == 0, result
    lines = result.out.splitlines()
    assert lines[0].endswith("needs 4 GPUs; free per node: gpu-a 2, gpu-b 2")
    assert lines[1:] == [
        "plan: free node gpu-a by moving 2 job(s):",
        "  move job/s0 (1 GPU) gpu-a -> gpu-b",
        "  move job/s2 (1 GPU) gpu-a -> gpu-b",
        "dry run: nothing moved",
    ]
    as_json = await kube.kk("defrag", "--for", "job/urgent", "--dry-run", "-o", "json")
    data = json.loads(as_json.out)
    assert as_json.err == "dry run: nothing moved\n"
    assert data["node"] == "gpu-a"
    assert [(m["owner"], m["to"]) for m in data["moves"]] == [
        ("job/s0", "gpu-b"),
        ("job/s2", "gpu-b"),
    ]
    assert (await kube.admin.list(resources.CHECKPOINTS, namespace=NS))["items"] == []
    for name in ("s0", "s1", "s2", "s3"):
        (pod,) = await kube.running_pods(name)
        assert not kube.said(pod, "SAVING")


async def test_refusals(kube: harness.Kube) -> None:
    missing = await kube.kk("defrag", "--for", "job/nope")
    assert missing.code == 1
    assert missing.err == "refused: job nope has no pods in namespace default (suspended?)\n"
    running = await kube.kk("defrag", "--for", "job/s1")
    assert running.code == 1
    assert "has no pending pod" in running.err
    bad = await kube.kk("defrag", "--for", "deploy/x")
    assert bad.code == 1
    assert "--for takes pod/NAME or job/NAME" in bad.err


async def test_defrag_moves_two_scavengers_and_the_urgent_job_runs(kube: harness.Kube) -> None:
    before = {n: (await kube.running_pods(n))[0] for n in ("s0", "s1", "s2", "s3")}
    result = await kube.kk("defrag", "--for", "job/urgent", "--wait")
    assert result.code == 0, result
    (urgent,) = await kube.running_pods("urgent")
    assert urgent["spec"]["nodeName"] == "gpu-a"
    assert result.out.splitlines()[-1].startswith(f"{urgent['metadata']['name']} running on gpu-a")
    for name in ("s0", "s2"):
        (now,) = await kube.running_pods(name)
        assert now["spec"]["nodeName"] == "gpu-b"
        assert await kube.restored(now) == kube.said(before[name], "SAVED")
        job = await kube.admin.get(resources.JOBS, name, namespace=NS)
        assert (job["status"].get("failed") or 0) == 0
    for name in ("s1", "s3"):
        (now,) = await kube.running_pods(name)
        assert now["metadata"]["uid"] == before[name]["metadata"]["uid"]
    items = (await kube.admin.list(resources.CHECKPOINTS, namespace=NS))["items"]
    assert sorted(
        (
            c["spec"]["lineage"]["ownerName"],
            c["spec"]["trigger"]["source"],
            c["spec"]["trigger"]["reason"],
        )
        for c in items
    ) == [("s0", "Manual", "Defrag"), ("s2", "Manual", "Defrag")]


async def test_defrag_wait_with_the_real_backoff_reports_an_urgent_job_that_already_ended(
    tmp_path: Path,
) -> None:
    """With the Job controller's real pod-failure backoff (10 s, kept even for pods the
    podFailurePolicy ignores: emulator/jobs/backoff.py), the moved jobs' successors start
    seconds after the urgent job; a short urgent job has ended by then. ``--wait`` used to
    wait for it to be Running and never returned (the defrag demo's timeout)."""
    async with _fragmented(
        tmp_path, pod_failure_backoff=backoff.DEFAULT_SECONDS, urgent_steps=10
    ) as kube:
        before = {n: (await kube.running_pods(n))[0] for n in ("s0", "s2")}
        result = await kube.kk("defrag", "--for", "job/urgent", "--wait", "--timeout", "120")
        assert result.code == 0, result
        (urgent,) = await kube.pods("urgent")
        assert urgent["spec"]["nodeName"] == "gpu-a"
        last = result.out.splitlines()[-1]
        assert last.startswith(
            (
                f"{urgent['metadata']['name']} running on gpu-a (",
                f"{urgent['metadata']['name']} ran on gpu-a (Succeeded) (",
            )
        ), result
        for name in ("s0", "s2"):
            assert f"job/{name} moved:" in result.out
            (now,) = await kube.running_pods(name)
            assert now["spec"]["nodeName"] == "gpu-b"
            assert await kube.restored(now) == kube.said(before[name], "SAVED")
            job = await kube.admin.get(resources.JOBS, name, namespace=NS)
            assert (job["status"].get("failed") or 0) == 0

        async def done() -> bool:
            job = await kube.admin.get(resources.JOBS, "urgent", namespace=NS)
            return bool(job["status"].get("succeeded"))

        await harness.eventually(done, within=60, what="the urgent job finished")
