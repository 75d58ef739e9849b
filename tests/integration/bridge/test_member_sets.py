"""Issues 19 and 11 item 1 on the emulated cluster: multi-pod sets restore member by member.

The real webhook and bridge against the emulated apiserver, job controller, scheduler, kubelets
(real processes, real files) and Kueue. The workload (tests/integration/workloads/
member_trainer.py) records its identity and step in every save and refuses a directory saved by
another identity, so a wrong-identity restore ends its pod with exit 7.

Proved on the emulator, not on the real control-plane tier (tests/realcp has no webhook/bridge
wiring yet).
"""

from __future__ import annotations

import asyncio
import re
from pathlib import Path
from typing import Any

from emulator import cluster
from kontinue import keys
from kontinue.kube import resources
from kontinue.models import checkpoint
from tests.integration.bridge.conftest import BRIDGE_USER, eventually
from tests.integration.bridge.test_end_to_end import GRACE, NS, System, system

Obj = dict[str, Any]
RESTORED = re.compile(r"^RESTORED member=(\S+) step=(\d+) dir=(\S+)$", re.MULTILINE)
SAVED = re.compile(r"^SAVED member=(\S+) step=(\d+)$", re.MULTILINE)


def _job(name: str, *, priority: str, pods: int, control: Path, steps: int = 0) -> Obj:
    command = ["python", "-m", "tests.integration.workloads.member_trainer"]
    if steps:  # a short high-priority Job: runs a few seconds and completes
        command = ["python", "-c", "import time; time.sleep(2)"]
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": name,
            "namespace": NS,
            "labels": {keys.KUEUE_QUEUE_NAME_LABEL: "team"},
        },
        "spec": {
            "completionMode": "Indexed",
            "completions": pods,
            "parallelism": pods,
            "backoffLimit": 1,
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "priorityClassName": priority,
                    "terminationGracePeriodSeconds": GRACE,
                    "containers": [
                        {
                            "name": "trainer",
                            "image": "kontinue/reference-workload:dev",
                            "command": command,
                            "env": [{"name": "MEMBER_CONTROL_DIR", "value": str(control)}],
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


async def _live_pods(s: System, job: str, *, exclude: set[str]) -> list[Obj]:
    return [
        p
        for p in await s.pods_of(job)
        if p["metadata"]["uid"] not in exclude and not p["metadata"].get("deletionTimestamp")
    ]


async def _running_all(s: System, job: str, count: int, *, exclude: set[str]) -> list[Obj]:
    found: list[Obj] = []

    async def progressing() -> bool:
        found.clear()
        for pod in await _live_pods(s, job, exclude=exclude):
            container = s.cluster.container(pod, "trainer")
            if container is None or not container.spec.log_path.exists():
                continue
            if container.spec.log_path.read_text().count("PROGRESS step=") >= 5:
                found.append(pod)
        return len(found) == count

    try:
        await eventually(progressing, within=90, what=f"{count} {job} pods 5 steps in")
    except BaseException:
        for pod in await s.pods_of(job):
            print(
                "POD",
                pod["metadata"]["name"],
                pod["metadata"].get("deletionTimestamp"),
                pod.get("status"),
                pod["metadata"].get("annotations"),
            )
            for kind in ("trainer", keys.RESTORE_INIT_CONTAINER):
                c = s.cluster.container(pod, kind)
                if c is not None and c.spec.log_path.exists():
                    print("LOG", kind, c.spec.log_path.read_text()[-2000:])
        for cp in await s.checkpoints():
            print("CP", cp.name, cp.status)
        raise
    return sorted(
        found, key=lambda p: p["metadata"]["annotations"][keys.JOB_COMPLETION_INDEX_ANNOTATION]
    )


async def _preempt(s: System, name: str, control: Path) -> None:
    await s.admin.create(
        resources.JOBS, _job(name, priority="high", pods=2, control=control, steps=1)
    )
    await s.cluster.wait_for(
        resources.JOBS, name, NS, cluster.job_condition("Complete"), timeout=90
    )


def _restores(s: System, pods: list[Obj]) -> dict[str, tuple[int, str]]:
    """identity -> (restored step, saver pod uid) for each pod that restored."""
    found = {}
    for pod in pods:
        for member, step, saver in RESTORED.findall(s.log(pod)):
            found[member] = (int(step), saver)
    return found


async def test_a_torn_member_sends_every_pod_of_the_next_incarnation_to_the_older_whole_set(
    tmp_path: Path,
) -> None:
    """Issue 11 item 1 in wait mode: the new pods are created while the torn set is still
    unrecorded (the bridge cannot write Checkpoint status); member 0's own directory is complete,
    yet both pods resume from the older whole set, because they wait, gated, for the bridge's
    verdict on the set. On main, pod 0 restored the torn set's member 0 and pod 1 the older set."""
    control = tmp_path / "control"
    control.mkdir()
    async with system(tmp_path, opted_in=True, wait_seconds=3, gpus_quota=2) as s:
        await s.admin.create(resources.JOBS, _job("par", priority="low", pods=2, control=control))
        first = await _running_all(s, "par", 2, exclude=set())
        await _preempt(s, "high-1", control)
        seen = {p["metadata"]["uid"] for p in first}
        second = await _running_all(s, "par", 2, exclude=seen)
        (whole,) = await s.checkpoints()
        assert whole.status.phase is checkpoint.Phase.SUCCEEDED, whole.status
        by_identity = {m.identity: m.pod_uid for m in whole.spec.members}
        assert set(by_identity) == {"index=0", "index=1"}
        saved = {m: int(step) for p in first for m, step in SAVED.findall(s.log(p))}
        # each pod restored its own identity's member of the whole set
        assert _restores(s, second) == {
            who: (saved[who], by_identity[who]) for who in ("index=0", "index=1")
        }

        # Now member 1 will be torn, and the bridge cannot record results until we let it.
        (control / "torn-1").write_text("")
        stall = s.cluster.api.faults.add(
            verb="patch", resource="checkpoints", subresource="status", user=BRIDGE_USER, count=None
        )
        await _preempt(s, "high-2", control)
        seen |= {p["metadata"]["uid"] for p in second}

        async def gated() -> bool:
            pods = await _live_pods(s, "par", exclude=seen)
            return len(pods) == 2 and all(
                {"name": keys.SET_VERDICT_GATE} in (p["spec"].get("schedulingGates") or [])
                for p in pods
            )

        await eventually(gated, within=60, what="both new pods gated on the set's verdict")
        await asyncio.sleep(1.0)
        for pod in await _live_pods(s, "par", exclude=seen):
            assert not pod["spec"].get("nodeName"), "a gated pod was scheduled"
        s.cluster.api.faults.remove(stall)

        third = await _running_all(s, "par", 2, exclude=seen)
        cps = {cp.name: cp for cp in await s.checkpoints()}
        torn = next(cp for name, cp in cps.items() if name != whole.name)
        assert torn.status.phase is checkpoint.Phase.FAILED, torn.status
        # One set for the incarnation: the older whole one, never half of the torn one.
        assert _restores(s, third) == {
            who: (saved[who], by_identity[who]) for who in ("index=0", "index=1")
        }
        for pod in third:
            assert "WRONG-MEMBER" not in s.log(pod)
