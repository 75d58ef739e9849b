"""Unknown but verifiable (issue 20 item 2): a member whose final status never came.

Its kubelet was lost, so the bridge recorded it ``Unreported`` and the set ``Failed``; whether it
saved is unknown. The webhook (``admission.mutate`` on a recorded job-controller pod, the
Checkpoints in its cache) offers the member's directory to the next pod with no wait, and the
restore program as installed (``kontinue-restore``, with the env of the webhook's patch and the
volume mapped into a scratch directory as a kubelet's mounts would) decides from the files: the
complete directory is restored from, a torn or missing one gives way to the older good set, or
to a cold start.
"""

from __future__ import annotations

import datetime
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from kontinue import keys, lineage
from kontinue.models import checkpoint
from tests.integration.restore import support
from tests.unit.webhook import support as hook
from webhook import admission, plumbing, settings, state

CONFIG = settings.Settings(image="registry.example/kontinue:test")
MOUNT = "/kontinue/checkpoints"  # the default policy's mountPath
LOST_UID = "0dd5e7a1-0000-4000-8000-000000000001"
OLD_UID = "0dd5e7a1-0000-4000-8000-000000000000"
Obj = dict[str, Any]


def _set(pod: Obj, name: str, uid: str, *, minutes_ago: int, state_: str) -> Obj:
    owner = hook.lineage_of(pod)
    when = datetime.datetime(2026, 12, 2, 12, 0, tzinfo=datetime.UTC) - datetime.timedelta(
        minutes=minutes_ago
    )
    phase = "Succeeded" if state_ == "Saved" else "Failed"
    return {
        "metadata": {"name": name, "namespace": owner.namespace},
        "spec": {
            "lineage": owner.model_dump(by_alias=True),
            "trigger": {"source": "Kueue", "reason": "Preempted", "time": when.isoformat()},
            "members": [{"podName": f"{name}-0", "podUid": uid, "index": 0}],
        },
        "status": {
            "phase": phase,
            "members": [{"podName": f"{name}-0", "state": state_, "reason": "as recorded"}],
        },
    }


def _restore_container(*, with_older: bool) -> tuple[Obj, dict[str, str]]:
    """The webhook's patch for the next pod: its annotations and the restore container's env."""
    pod = hook.kueue_pod()
    cps = [_set(pod, "lost", LOST_UID, minutes_ago=5, state_="Unreported")]
    if with_older:
        cps.append(_set(pod, "old", OLD_UID, minutes_ago=30, state_="Saved"))
    snap = state.Snapshot.of(
        cluster_queues=[hook.opted_in_cq("cq-gpu")],
        checkpoints=[checkpoint.load(cp) for cp in cps],
    )
    verdict = admission.mutate(hook.parsed(hook.request_for(pod)), state=snap, config=CONFIG)
    out = hook.apply_patch(pod, verdict.patch)
    assert hook.pod_errors(out) == []
    (init,) = [c for c in out["spec"]["initContainers"] if c["name"] == keys.RESTORE_INIT_CONTAINER]
    env = {e["name"]: e["value"] for e in init["env"] if "value" in e}
    return out["metadata"]["annotations"], env


def _directory(area: Path, uid: str) -> Path:
    owner = hook.lineage_of(hook.kueue_pod())
    return area / "volume" / lineage.lineage_dir(owner) / uid


def _run(area: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    mapped = {
        name: value.replace(MOUNT, str(area / "volume")).replace(
            plumbing.RESTORE_DIR, str(area / "run")
        )
        for name, value in env.items()
    }
    (area / "run").mkdir(exist_ok=True)
    script = Path(sys.executable).parent / "kontinue-restore"
    return subprocess.run(
        [str(script)],
        env={
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            keys.ENV_TERMINATION_LOG: str(area / "termination"),
            **mapped,
        },
        cwd=area,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_the_webhook_offers_the_unreported_member_with_no_wait() -> None:
    annotations, env = _restore_container(with_older=True)
    assert annotations[keys.RESTORE_FROM_ANNOTATION] == "lost"
    assert env[keys.ENV_WAIT_FOR].endswith(f"/{LOST_UID}")
    assert env[keys.ENV_WAIT_SECONDS] == "0"  # its directory is final: checked once
    assert env[plumbing.ENV_RESTORE_SOURCE].endswith(f"/{OLD_UID}")


@pytest.mark.parametrize("lost", ["complete", "torn", "missing"])
def test_the_restore_uses_the_unreported_directory_only_if_it_verifies(
    area: Path, lost: str
) -> None:
    _, env = _restore_container(with_older=True)
    support.trainer_checkpoint(_directory(area, OLD_UID), step=3)
    lost_dir = _directory(area, LOST_UID)
    if lost == "complete":
        support.trainer_checkpoint(lost_dir, step=33)
    elif lost == "torn":  # SIGKILLed mid-save: data, no manifest
        lost_dir.mkdir(parents=True)
        (lost_dir / "state.bin").write_bytes(b"\0" * 100)

    proc = _run(area, env)

    assert proc.returncode == 0, proc.stderr
    chosen = (area / "run" / "restore-from").resolve()
    if lost == "complete":
        assert chosen == lost_dir.resolve()
        assert "restore from checkpoint lost" in proc.stdout, proc.stdout
    else:
        assert chosen == _directory(area, OLD_UID).resolve()
        assert "instead of checkpoint lost" in proc.stdout, proc.stdout
        assert "after 0s" in proc.stdout, proc.stdout  # never waited


def test_with_nothing_older_a_torn_unreported_member_is_a_cold_start(area: Path) -> None:
    annotations, env = _restore_container(with_older=False)
    assert annotations[keys.RESTORE_FROM_ANNOTATION] == "lost"
    assert env[plumbing.ENV_RESTORE_SOURCE] == ""

    proc = _run(area, env)

    assert proc.returncode == 0, proc.stderr
    assert not (area / "run" / "restore-from").exists()
    assert proc.stdout.startswith("cold start:"), proc.stdout
