"""The emulated Job controller holds a replacement back for its pod-failure backoff, as a real
v1.36 controller does even when its podFailurePolicy ignores the failure (measured with 10 s on
the real tier: tests/realcp/test_kueue_flow.py); here with a 3 s base to stay quick."""

from __future__ import annotations

import datetime
from pathlib import Path

from emulator import cluster, nodes
from kontinue import keys
from kontinue.kube import resources
from kontinue.models import base
from tests.integration.cluster import recording, workloads
from tests.waiting import eventually

BASE = 3.0


def _at(value: str) -> datetime.datetime:
    return base.parse_time(value)


async def test_an_evicted_pod_is_replaced_only_after_the_backoff(tmp_path: Path) -> None:
    async with cluster.Cluster(
        nodes=[nodes.NodeSpec("gpu-a")], workdir=tmp_path, pod_failure_backoff=BASE
    ) as c:
        trainer = workloads.trainer_container(steps=100000, rate=50, save_seconds=0.1)
        job = workloads.job("train", trainer, ignore_disruption=True)
        await c.client().create(resources.JOBS, job)
        first = await recording.running_pod(c, "train")
        await c.client().evict(resources.PODS, first["metadata"]["name"], namespace="default")

        async def replaced() -> bool:
            pods = await c.pods(labels={keys.JOB_NAME_LABEL: "train"})
            return any(p["metadata"]["uid"] != first["metadata"]["uid"] for p in pods)

        await eventually(replaced, within=60, what="a replacement pod")
        (second,) = [
            p
            for p in await c.pods(labels={keys.JOB_NAME_LABEL: "train"})
            if p["metadata"]["uid"] != first["metadata"]["uid"]
        ]
        job_now = await c.client().get(resources.JOBS, "train", namespace="default")
        assert not (job_now.get("status") or {}).get("failed")  # ignored: never counted
        # the failed pod finished at its container's finishedAt; the replacement came >= BASE
        # later (whole seconds: a lower bound only — under load the gap only grows)
        records = c.job_controller.backoffs if c.job_controller else {}
        record = records.get(("default", "train"))
        assert record is not None
        assert record.failures == 1
        assert record.last_failure is not None
        created = _at(second["metadata"]["creationTimestamp"]).timestamp()
        assert created - record.last_failure >= BASE - 1, (created, record)
