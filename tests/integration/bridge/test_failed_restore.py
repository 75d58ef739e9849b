"""A failed restore costs a retry and then a cold start, never the Job (issue 11, item 5).

Everything real on the emulated cluster (tests/integration/bridge/test_end_to_end.py): a Job with
``backoffLimit: 0`` is preempted, saves, and its Checkpoint is Succeeded; then its saved state
is damaged on the shared volume. The readmitted pod's restore init-container refuses it (exit 4)
and the pod fails. The podFailurePolicy rule the webhook put on the Job
(kontinue.restore.POD_FAILURE_RULE, valid because the template carries the restore container's
stand-in) makes the job controller ignore that failure; the bridge counts it on the Checkpoint;
with ``attemptsBeforeFallback: 1`` the next pod cold-starts and the Job runs on. Before the rule,
the first failed restore ended the Job ``BackoffLimitExceeded``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kontinue import checkpoint_format, keys
from kontinue.kube import resources
from kontinue.models import checkpoint
from tests.integration.bridge.conftest import eventually
from tests.integration.bridge.test_end_to_end import NS, _trainer_job, system

Obj = dict[str, Any]


def _damage(root: Path, pod_uid: str) -> int:
    """Truncate every file the member saved (its directory is named by its pod UID)."""
    damaged = 0
    for manifest in root.rglob(checkpoint_format.MANIFEST_NAME):
        if manifest.parent.name != pod_uid:
            continue
        for entry in checkpoint_format.read_manifest(manifest.parent).files:
            with (manifest.parent / entry.path).open("r+b") as stream:
                stream.truncate(max(0, entry.bytes // 2))
            damaged += 1
    return damaged


def _restore_exit(pod: Obj) -> int | None:
    for status in (pod.get("status") or {}).get("initContainerStatuses") or []:
        terminated = (status.get("state") or {}).get("terminated")
        if status["name"] == keys.RESTORE_INIT_CONTAINER and terminated:
            return int(terminated["exitCode"])
    return None


async def test_a_torn_checkpoint_costs_a_cold_start_not_a_job_with_backoff_limit_0(
    tmp_path: Path,
) -> None:
    async with system(tmp_path, opted_in=True, attempts=1) as s:
        await s.admin.create(
            resources.JOBS,
            _trainer_job("low", priority="low", steps=100000, save_seconds=0.1, backoff_limit=0),
        )
        job = await s.admin.get(resources.JOBS, "low", namespace=NS)
        rules = job["spec"]["podFailurePolicy"]["rules"]
        assert {"onExitCodes"} <= set(rules[1])  # the restore rule, accepted by the apiserver
        victim = await s.running_pod("low", min_step=10, exclude=set())
        await s.admin.create(
            resources.JOBS, _trainer_job("high", priority="high", steps=400, save_seconds=0.1)
        )

        async def saved() -> bool:
            cps = await s.checkpoints()
            return len(cps) == 1 and cps[0].status.phase is checkpoint.Phase.SUCCEEDED

        await eventually(saved, within=60, what="the victim's Checkpoint Succeeded")
        assert _damage(tmp_path, victim["metadata"]["uid"]) > 0

        failed_pods: list[Obj] = []

        async def restore_failed() -> bool:
            failed_pods[:] = [p for p in await s.pods_of("low") if _restore_exit(p) == 4]
            return bool(failed_pods)

        await eventually(restore_failed, within=90, what="a readmitted pod's restore refused")

        async def counted() -> bool:
            (cp,) = await s.checkpoints()
            return cp.status.failed_restores >= 1

        await eventually(counted, within=30, what="the failed restore counted")
        successor = await s.running_pod(
            "low",
            min_step=1,
            exclude={victim["metadata"]["uid"], *(p["metadata"]["uid"] for p in failed_pods)},
        )
        pod = await s.admin.get(resources.PODS, successor["metadata"]["name"], namespace=NS)
        annotations = pod["metadata"].get("annotations") or {}
        assert keys.COLD_START_REASON_ANNOTATION in annotations, annotations
        assert keys.RESTORE_INIT_CONTAINER not in {
            c["name"] for c in pod["spec"].get("initContainers") or []
        }  # the template's stand-in removed: nothing to restore
        assert "RESTORED" not in s.log(successor)

        job = await s.admin.get(resources.JOBS, "low", namespace=NS)
        status = job.get("status") or {}
        assert not status.get("failed"), status
        assert not any(
            c["type"] == "Failed" and c["status"] == "True" for c in status.get("conditions") or []
        ), status
