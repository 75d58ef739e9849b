"""Issue 20 item 3 on the emulated cluster: a pod with a native sidecar and an init container of
its own is preempted and restores, every part real (the webhook over HTTPS, the bridge, the
emulated kubelet running the containers as processes in spec order, as the recorded kubelet
does: tests/fixtures/kubelet/06-init-and-native-sidecar.json).

With the sidecar listed first (how a storage webhook such as GKE's Cloud Storage FUSE driver
leaves a pod), the restore runs after the sidecar has started and before the user's init
container, which reads the very checkpoint the trainer then resumes from. With the user's init
container listed before the sidecar, it runs before both and is left alone.
"""

from __future__ import annotations

import copy
import re
from pathlib import Path
from typing import Any

import pytest

from emulator import cluster
from kontinue import keys
from kontinue.kube import resources
from kontinue.models import checkpoint
from tests.integration.bridge.test_end_to_end import NS, _trainer_job, system

Obj = dict[str, Any]
SIDECAR: Obj = {
    "name": "storage",
    "image": "kontinue/reference-workload:dev",
    "restartPolicy": "Always",
    "command": [
        "python",
        "-c",
        "import time\nprint('SIDECAR up', flush=True)\nwhile True:\n    time.sleep(3600)\n",
    ],
}
# Reports what it sees of the restored state: the step of the checkpoint behind
# KONTINUE_RESTORE_FROM, and its member identity.
PREPARE: Obj = {
    "name": "prepare",
    "image": "kontinue/reference-workload:dev",
    "command": [
        "python",
        "-c",
        "import json, os, pathlib\n"
        "link = os.environ.get('KONTINUE_RESTORE_FROM', '')\n"
        "member = os.environ.get('KONTINUE_MEMBER', '-')\n"
        "if link and os.path.exists(link):\n"
        "    step = json.loads(pathlib.Path(link, 'MANIFEST.json').read_text())['step']\n"
        "    print(f'PREPARE member={member} restored step={step}', flush=True)\n"
        "else:\n"
        "    print(f'PREPARE member={member} cold', flush=True)\n",
    ],
}
RESTORED = re.compile(r"^RESTORED step=(\d+) ", re.MULTILINE)
SAVED = re.compile(r"^SAVED step=(\d+) ", re.MULTILINE)


def _job(name: str, inits: list[Obj]) -> Obj:
    job = _trainer_job(name, priority="low", steps=100000, save_seconds=0.2)
    spec = job["spec"]["template"]["spec"]
    spec["initContainers"] = copy.deepcopy(inits)
    return job


def _started_order(c: cluster.Cluster, pod: Obj) -> list[str]:
    """The pod's containers in the order the emulated runtime started them."""
    uid = pod["metadata"]["uid"]
    return [
        started.spec.name
        for kubelet in c.kubelets.values()
        for started in kubelet.runtime.containers
        if f"/pods/{uid}/" in str(started.spec.log_path)
    ]


def _log(c: cluster.Cluster, pod: Obj, name: str) -> str:
    container = c.container(pod, name)
    assert container is not None, (pod["metadata"]["name"], name)
    return container.spec.log_path.read_text()


@pytest.mark.parametrize(
    ("inits", "expected"),
    [
        ([SIDECAR, PREPARE], ["storage", keys.RESTORE_INIT_CONTAINER, "prepare"]),
        ([PREPARE, SIDECAR], ["prepare", "storage", keys.RESTORE_INIT_CONTAINER]),
    ],
    ids=["sidecar-first", "init-first"],
)
async def test_a_pod_with_a_native_sidecar_and_its_own_init_container_restores(
    tmp_path: Path, inits: list[Obj], expected: list[str]
) -> None:
    async with system(tmp_path, opted_in=True) as s:
        await s.admin.create(resources.JOBS, _job("low", inits))
        victim = await s.running_pod("low", min_step=10, exclude=set())
        # The first incarnation starts cold: its init containers in spec order, no restore.
        assert _started_order(s.cluster, victim)[:2] == [c["name"] for c in inits]
        assert "PREPARE member=" in _log(s.cluster, victim, "prepare")
        assert " cold" in _log(s.cluster, victim, "prepare")

        await s.admin.create(
            resources.JOBS, _trainer_job("high", priority="high", steps=3, save_seconds=0.2)
        )
        await s.cluster.wait_for(
            resources.JOBS, "high", NS, cluster.job_condition("Complete"), timeout=120
        )
        successor = await s.running_pod("low", min_step=1, exclude={victim["metadata"]["uid"]})
        (cp,) = await s.checkpoints()
        assert cp.status.phase is checkpoint.Phase.SUCCEEDED, cp.status

        pod = await s.admin.get(resources.PODS, successor["metadata"]["name"], namespace=NS)
        assert pod["metadata"]["annotations"][keys.RESTORE_FROM_ANNOTATION] == cp.name
        assert [c["name"] for c in pod["spec"]["initContainers"]] == expected
        # The kubelet ran them in that order, then the trainer.
        assert _started_order(s.cluster, pod) == [*expected, "trainer"]
        statuses = {st["name"]: st for st in pod["status"]["initContainerStatuses"]}
        restore_end = statuses[keys.RESTORE_INIT_CONTAINER]["state"]["terminated"]
        assert restore_end["exitCode"] == 0, restore_end
        assert statuses["storage"]["state"].get("running") is not None  # still serving

        # The trainer resumed from the step the victim saved.
        (saved_step,) = SAVED.findall(_log(s.cluster, victim, "trainer"))
        (restored_step,) = RESTORED.findall(_log(s.cluster, pod, "trainer"))
        assert restored_step == saved_step
        prepare = _log(s.cluster, pod, "prepare")
        if expected[-1] == "prepare":
            # after the restore: the user's init container read the checkpoint the trainer
            # resumed from, as the same member
            assert f"PREPARE member=index=0 restored step={saved_step}" in prepare, prepare
        else:
            # before the sidecar, so before the restore: untouched, no Kontinue variables
            assert "PREPARE member=- cold" in prepare, prepare
        job = await s.admin.get(resources.JOBS, "low", namespace=NS)
        assert not (job.get("status") or {}).get("failed"), job.get("status")
