"""Every row of the measured Job accounting table, through the emulated cluster's real parts.

shared/reference/job-accounting.md (copied to tests/fixtures/cluster/job-accounting.md) was
measured on a real v1.36.2 control plane. Here the same scenarios run through the emulated Job
controller, the emulated kube-scheduler (priority preemption by a real high-priority pod) and the
emulated kubelet running real ``sh`` processes that trap SIGTERM and exit 143 (or 0) a moment later
-- so a pod counted "at delete time" is provably still running when it is counted.
``backoffLimit: 1`` everywhere, so two counted failures end the Job.
"""

from __future__ import annotations

import asyncio
import dataclasses
from pathlib import Path
from typing import Any

import pytest

from emulator import cluster, gpus, nodes
from kontinue import keys
from kontinue.kube import api as kube_api
from kontinue.kube import resources
from tests.integration.cluster import recording, workloads

Object = dict[str, Any]
ONE_GPU = gpus.GpuProfile(count=1)


def _sh(exit_code: int) -> Object:
    """A container that runs until SIGTERM, then exits ``exit_code`` 0.3 s later."""
    script = f'trap "sleep 0.3; exit {exit_code}" TERM; while true; do sleep 0.1; done'
    return {
        "name": "trainer",
        "image": "busybox",
        "command": ["sh", "-c", script],
        "resources": {"limits": {keys.GPU_RESOURCE: "1"}},
    }


@dataclasses.dataclass(frozen=True)
class Row:
    what: str  # "suspend" | "preempt"
    times: int
    exit_code: int
    policy: str  # "default" | "Failed" | "Failed+pFP" | "Indexed"
    failed_after_each: tuple[int, ...]  # status.failed after each round (0 = absent)
    succeeded: int
    ends: tuple[str, str] | None  # (condition type, reason)


ROWS = {
    "suspend x3, 143, default": Row("suspend", 3, 143, "default", (0, 0, 0), 0, None),
    "suspend x3, exit 0, default": Row("suspend", 3, 0, "default", (0, 0, 0), 0, None),
    "suspend x3, exit 0, Failed": Row("suspend", 3, 0, "Failed", (0, 0, 0), 0, None),
    "suspend x3, exit 0, Failed+pFP": Row("suspend", 3, 0, "Failed+pFP", (0, 0, 0), 0, None),
    "suspend x3, exit 0, Indexed": Row("suspend", 3, 0, "Indexed", (0, 0, 0), 0, None),
    "suspend x3, 143, Failed+pFP": Row("suspend", 3, 143, "Failed+pFP", (0, 0, 0), 0, None),
    "preempt x2, 143, default": Row(
        "preempt", 2, 143, "default", (1, 2), 0, ("Failed", "BackoffLimitExceeded")
    ),
    "preempt x3, 143, Failed+pFP": Row("preempt", 3, 143, "Failed+pFP", (0, 0, 0), 0, None),
    "preempt x2, 143, Failed": Row(
        "preempt", 2, 143, "Failed", (1, 2), 0, ("Failed", "BackoffLimitExceeded")
    ),
    "preempt, exit 0, default": Row("preempt", 1, 0, "default", (1,), 0, None),
    "preempt, exit 0, Failed+pFP": Row(
        "preempt", 1, 0, "Failed+pFP", (0,), 1, ("Complete", "CompletionsReached")
    ),
    "preempt, exit 0, Failed": Row(
        "preempt", 1, 0, "Failed", (0,), 1, ("Complete", "CompletionsReached")
    ),
}


def _job(row: Row) -> Object:
    return workloads.job(
        "acct",
        _sh(row.exit_code),
        grace=5,
        backoff_limit=1,
        priority_class="low",
        replacement="Failed" if row.policy.startswith("Failed") else None,
        ignore_disruption=row.policy == "Failed+pFP",
        indexed=row.policy == "Indexed",
    )


def _status(job: Object | None) -> Object:
    return dict((job or {}).get("status") or {})


async def _settle(c: cluster.Cluster) -> None:
    """Wait until the Job controller has had nothing to do for a few polls."""
    assert c.job_controller is not None
    quiet = 0
    for _ in range(500):
        quiet = quiet + 1 if c.job_controller.queue.idle else 0
        if quiet >= 5:
            return
        await asyncio.sleep(0.02)
    raise AssertionError("the job controller never went idle")


async def _live_pod(c: cluster.Cluster) -> Object:
    """The Job's pod once it runs (a real process started)."""
    for _ in range(1500):
        pods = await c.pods(labels={keys.JOB_NAME_LABEL: "acct"})
        for pod in pods:
            running = (pod.get("status") or {}).get("phase") == "Running"
            if running and not pod["metadata"].get("deletionTimestamp"):
                return pod
        await asyncio.sleep(0.02)
    raise AssertionError("no running pod of the Job")


async def _suspend(c: cluster.Cluster, value: bool) -> None:
    await c.client().patch(
        resources.JOBS,
        "acct",
        {"spec": {"suspend": value}},
        content_type=kube_api.MERGE_PATCH,
        namespace="default",
    )


async def _preempt(c: cluster.Cluster, round_: int) -> None:
    """A high-priority pod that needs the node's only GPU, runs briefly and ends Succeeded."""
    name = f"preemptor-{round_}"
    body = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "priorityClassName": "high",
            "restartPolicy": "Never",
            "containers": [
                {
                    "name": "main",
                    "image": "busybox",
                    "command": ["true"],
                    "resources": {"limits": {keys.GPU_RESOURCE: "1"}},
                }
            ],
        },
    }
    await c.client().create(resources.PODS, body)
    await c.wait_for(resources.PODS, name, "default", cluster.pod_phase("Succeeded"))


@pytest.mark.parametrize("case", list(ROWS))
async def test_accounting_row(case: str, tmp_path: Path) -> None:
    row = ROWS[case]
    specs = [nodes.NodeSpec("gpu-a", gpu=ONE_GPU)]
    async with cluster.Cluster(nodes=specs, workdir=tmp_path) as c:
        admin = c.client()
        await admin.create(resources.PRIORITY_CLASSES, workloads.priority_class("low", 100))
        await admin.create(resources.PRIORITY_CLASSES, workloads.priority_class("high", 1000000))
        await admin.create(resources.JOBS, _job(row))
        failed_after: list[int] = []
        async with (
            recording.PodEvents(c.api) as pod_events,
            recording.PodEvents(c.api, resource=resources.JOBS) as job_events,
        ):
            for round_ in range(row.times):
                victim = await _live_pod(c)
                if row.what == "suspend":
                    await _suspend(c, True)
                    await c.wait_for(
                        resources.PODS, victim["metadata"]["name"], "default", cluster.gone
                    )
                    await _settle(c)
                    failed_after.append(int(_status(await _get(c)).get("failed") or 0))
                    await _suspend(c, False)
                else:
                    await _preempt(c, round_)
                    await c.wait_for(
                        resources.PODS, victim["metadata"]["name"], "default", cluster.gone
                    )
                    await _settle(c)
                    failed_after.append(int(_status(await _get(c)).get("failed") or 0))
                if row.ends is not None and round_ == row.times - 1:
                    break
            if row.ends is not None:
                await c.wait_for(
                    resources.JOBS, "acct", "default", cluster.job_condition(row.ends[0])
                )
            else:
                await _live_pod(c)  # a replacement / resumed pod runs: the Job goes on
            await _settle(c)
            final = _status(await _get(c))

        assert tuple(failed_after) == row.failed_after_each
        assert int(final.get("failed") or 0) == row.failed_after_each[-1]
        assert ("failed" in final) == (row.failed_after_each[-1] > 0)  # absent, not 0
        assert int(final.get("succeeded") or 0) == row.succeeded
        assert ("succeeded" in final) == (row.succeeded > 0)
        finished = [
            (cond["type"], cond["reason"])
            for cond in final.get("conditions") or []
            if cond["type"] in ("Complete", "Failed") and cond["status"] == "True"
        ]
        assert finished == ([row.ends] if row.ends else [])

        if row.what == "preempt" and row.policy == "default":
            # counted at delete time: the Job shows the failure before the victim's process ended
            counted = next(
                int(obj["metadata"]["resourceVersion"])
                for _, obj in job_events.events
                if _status(obj).get("failed")
            )
            first_victim = next(
                obj["metadata"]["name"]
                for _, obj in pod_events.events
                if obj["metadata"]["name"].startswith("acct-")
            )
            ended = next(
                int(obj["metadata"]["resourceVersion"])
                for _, obj in pod_events.of(first_victim)
                if _status(obj).get("phase") in ("Failed", "Succeeded")
            )
            assert counted < ended


async def _get(c: cluster.Cluster) -> Object | None:
    return await c.client().get(resources.JOBS, "acct", namespace="default")
